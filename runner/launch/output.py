"""Split torchrun's own output into lines, attributed to ranks where torchrun says whose.

Workers' output does not come this way under Rankwatch (it reaches the runner on the
node's output socket, ``runner.launch.worker_output``). What torchrun's stdout and
stderr carry is torchrun's own log lines and whatever a worker wrote before its
bootstrap took over its descriptors. A line that torchrun tees for a worker starts
with a rank prefix: ``[rw:3]:`` (the template ``[rw:${rank}]:``, global rank) or, in
older torch, ``[default3]:`` (local rank); such lines are attributed to that rank,
anything else is torchrun's own (rank ``None``).

torchrun tails each rank's log file and writes whatever it read, so a line printed
without a newline (a progress bar, ``print(..., end="")``) arrives in pieces, each
with its own prefix, possibly interleaved with other ranks on one physical line:
``[rw:0]:abc[rw:1]:xyz\\n`` then ``[rw:0]:def\\n`` means rank 0 printed ``abcdef``
and rank 1 ``xyz``. ``RankLineSplitter`` reassembles that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = re.compile(r"\[(?:rw:(\d+)|default(\d+))\]:")
PARTIAL_FLUSH_SECONDS = 1.0
LAUNCHER = (None, False)
MAX_LINE_CHARS = 64 * 1024
"""Longer lines are cut (the rest follows as further lines): one line must not hold the hub."""


@dataclass(frozen=True)
class OutputLine:
    rank: int | None
    """Global rank; ``None`` for torchrun's own lines."""
    stream: str
    text: str
    t: float
    local_rank_only: bool = False
    """True when the prefix gave a local rank (older torch), not a global one."""


class RankLineSplitter:
    """Feed raw chunks of one stream; get complete lines attributed to ranks."""

    def __init__(self, stream: str):
        self.stream = stream
        self._buffer = ""
        self._pending: dict[tuple[int | None, bool], tuple[str, float]] = {}
        self._current_key: tuple[int | None, bool] = LAUNCHER
        """Whose text continues the physical line we are in the middle of."""

    def feed(self, chunk: str, now: float) -> list[OutputLine]:
        self._buffer += chunk
        lines: list[OutputLine] = []
        while True:
            newline = self._buffer.find("\n")
            if newline < 0:
                break
            physical, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
            lines.extend(self._physical_line(physical, now, complete=True))
        # Move the incomplete rest into the pending lines now, so a partial line can be
        # flushed when stale, but keep a possible prefix cut in half ("[rw:") buffered.
        cut = len(self._buffer)
        bracket = self._buffer.rfind("[")
        if bracket >= 0 and "]:" not in self._buffer[bracket:] and cut - bracket < 16:
            cut = bracket
        if cut:
            partial, self._buffer = self._buffer[:cut], self._buffer[cut:]
            lines.extend(self._physical_line(partial, now, complete=False))
        return lines

    def _physical_line(self, physical: str, now: float, complete: bool) -> list[OutputLine]:
        segments = self._segments(physical, self._current_key)
        lines = []
        for index, (key, text) in enumerate(segments):
            joined, started = self._pending.pop(key, ("", now))
            joined += text
            if (index == len(segments) - 1 and complete) or len(joined) > MAX_LINE_CHARS:
                lines.append(self._line(key, joined, started))
            else:
                self._pending[key] = (joined, started)
        self._current_key = LAUNCHER if complete else segments[-1][0]
        return lines

    @staticmethod
    def _segments(physical: str, continuing: tuple[int | None, bool]) -> list[tuple[tuple[int | None, bool], str]]:
        matches = list(PREFIX.finditer(physical))
        if not matches:
            return [(continuing, physical)]
        segments = []
        if matches[0].start() > 0:
            segments.append((continuing, physical[: matches[0].start()]))
        for index, match in enumerate(matches):
            end = matches[index + 1].start() if index + 1 < len(matches) else len(physical)
            global_rank, local_rank = match.group(1), match.group(2)
            key = (int(global_rank), False) if global_rank is not None else (int(local_rank), True)
            segments.append((key, physical[match.end(): end]))
        return segments

    def _line(self, key: tuple[int | None, bool], text: str, t: float) -> OutputLine:
        rank, local_only = key
        return OutputLine(rank=rank, stream=self.stream, text=text.rstrip("\r"), t=t, local_rank_only=local_only)

    def flush_stale(self, now: float, older_than: float = PARTIAL_FLUSH_SECONDS) -> list[OutputLine]:
        """Emit partial lines that have waited too long for their newline (progress bars)."""
        stale = [key for key, (_, started) in self._pending.items() if now - started >= older_than]
        return [self._line(key, self._pending.pop(key)[0], now) for key in stale]

    def flush_all(self, now: float) -> list[OutputLine]:
        lines = []
        if self._buffer:
            physical, self._buffer = self._buffer, ""
            lines.extend(self._physical_line(physical, now, complete=False))
        self._current_key = LAUNCHER
        for key in list(self._pending):
            text, started = self._pending.pop(key)
            if text:
                lines.append(self._line(key, text, started))
        return lines
