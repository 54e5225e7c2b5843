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
from collections import deque
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


PROGRESS_SNAPSHOT_SECONDS = 5.0
"""A line rewritten in place (``\\r``: a progress bar) that keeps changing without a newline is
delivered as it stands first after ``PARTIAL_FLUSH_SECONDS``, then at most this often."""
RECENT_ROWS = 16
"""Finished lines a cursor-up (``ESC[A``) can return to: nested or per-rank tqdm bars (``position=``)."""
CONTROL = re.compile(r"\r|\n|\x1b\[(\d*)([ABGK])")
"""What moves the cursor or erases: carriage return, newline, and the CSI sequences progress bars
use (cursor up/down, to column 1, erase in line). Other escape sequences (colours) stay in the text."""
UNFINISHED_ESCAPE = re.compile(r"\x1b(?:\[[\d;?]{0,8})?$")


class _Row:
    """One line of the screen: its text as shown, and what of it was delivered."""

    __slots__ = ("at_start", "changed", "rewritten", "shown", "shown_at", "started", "text")

    def __init__(self, text: str = "", shown: str | None = None) -> None:
        self.text = text
        self.at_start = False
        """The cursor went back to its start (``\\r``): what comes next replaces the text."""
        self.rewritten = False
        """It was rewritten in place (a progress bar): delivered as snapshots, trailing spaces dropped."""
        self.started: float | None = None
        """When the text not yet delivered began to arrive."""
        self.changed = 0.0
        self.shown = shown
        """The text last delivered for this row (None: nothing yet)."""
        self.shown_at: float | None = None

    def visible(self) -> str:
        return self.text.rstrip(" ") if self.rewritten else self.text

    def write(self, text: str, now: float) -> None:
        if self.at_start:
            self.text, self.at_start = text, False
        else:
            self.text += text
        if self.started is None:
            self.started = now
        self.changed = now


class TerminalLines:
    """One stream's text in, its lines out as a terminal would show them.

    A line rewritten with ``\\r`` (tqdm, ``print(..., end="\\r")``) is the text after its last
    ``\\r`` (progress bars pad the rest with spaces), not every state glued together; erase in
    line (``ESC[K``, ``ESC[2K``) empties it. Lines are delivered at their newline; a line still
    being rewritten is delivered as it stands after ``PARTIAL_FLUSH_SECONDS`` and then every
    ``PROGRESS_SNAPSHOT_SECONDS`` while it changes (``flush_stale``), so a bar shows live and
    the log holds its states at that rate, plus its last one. A cursor-up (``ESC[A``, tqdm's
    ``position=`` and nested bars) returns to a recent line: rewriting it there delivers its
    new states the same way, and the newlines that only move between those lines end nothing.
    A partial line that is not rewritten (``print(..., end="")``) is delivered after
    ``PARTIAL_FLUSH_SECONDS`` and its continuation follows as a further line, as before.

    ``feed`` and ``flush_*`` return ``(text, t)``: ``t`` is when the line began to arrive, or
    for a rewritten line when its delivered state was written. Lines are cut at
    ``MAX_LINE_CHARS``.
    """

    def __init__(self) -> None:
        self._rows = [_Row()]
        self._cursor = 0
        self._recent: deque[str] = deque(maxlen=RECENT_ROWS)
        """Delivered lines above the rows, nearest last: where a cursor-up goes."""
        self._escape = ""
        """The start of an escape sequence the last read ended in."""

    def feed(self, text: str, now: float) -> list[tuple[str, float]]:
        row = self._rows[0]
        if len(self._rows) == 1 and not row.rewritten and "\r" not in text and "\x1b" not in text:
            return self._feed_plain(row, text, now)
        text, self._escape = self._escape + text, ""
        cut = UNFINISHED_ESCAPE.search(text)
        if cut is not None:  # a sequence cut between two reads: its end comes with the next
            text, self._escape = text[:cut.start()], text[cut.start():]
        out: list[tuple[str, float]] = []
        position = 0
        for match in CONTROL.finditer(text):
            if match.start() > position:
                self._write(text[position:match.start()], now, out)
            position = match.end()
            self._control(match, now, out)
        if position < len(text):
            self._write(text[position:], now, out)
        return out

    def _feed_plain(self, row: _Row, text: str, now: float) -> list[tuple[str, float]]:
        """The common case, kept fast: no rewriting anywhere, lines split at newlines."""
        *complete, rest = (row.text + text).split("\n")
        started = row.started if row.started is not None else now
        out: list[tuple[str, float]] = []
        if complete and not complete[0] and row.shown == "":  # the end of a line delivered in part
            complete, started = complete[1:], now
            row.shown = None
        for piece in complete:
            out.extend(_cut(piece, started))
            started = now
        if complete:
            self._recent.extend(complete[-RECENT_ROWS:])
        while len(rest) > MAX_LINE_CHARS:  # one line must not hold the hub: the rest follows as further lines
            out.append((rest[:MAX_LINE_CHARS], started))
            rest, started = rest[MAX_LINE_CHARS:], now
        row.text = rest
        row.started = started if rest else None
        row.changed = now
        return out

    def _write(self, text: str, now: float, out: list[tuple[str, float]]) -> None:
        row = self._rows[self._cursor]
        row.write(text, now)
        while len(row.text) > MAX_LINE_CHARS:
            out.append((row.text[:MAX_LINE_CHARS], row.started if row.started is not None else now))
            row.text, row.started = row.text[MAX_LINE_CHARS:], now

    def _control(self, match: re.Match[str], now: float, out: list[tuple[str, float]]) -> None:
        row = self._rows[self._cursor]
        code = match.group(0)
        if code == "\n":
            self._newline(now, out)
        elif code == "\r" or match.group(2) == "G":
            row.at_start = row.rewritten = True
        elif match.group(2) == "K":
            if match.group(1) in ("1", "2") or row.at_start:  # the whole line, or from its start
                row.text, row.rewritten = "", True
                row.changed = now
        elif match.group(2) == "A":
            self._up(int(match.group(1) or 1))
        else:  # "B", cursor down: within the rows
            self._cursor = min(len(self._rows) - 1, self._cursor + int(match.group(1) or 1))

    def _newline(self, now: float, out: list[tuple[str, float]]) -> None:
        row = self._rows[self._cursor]
        if self._cursor < len(self._rows) - 1:  # moves down to a line that is there (nested bars)
            if not row.rewritten and row.shown is None and row.text:
                out.extend(self._deliver(row, now))
            self._cursor += 1
            self._rows[self._cursor].at_start = True  # a newline goes to the start of the line below
            return
        for above in self._rows[:-1]:  # the lines above went on changing: their last state first
            if above.visible() and above.visible() != above.shown:
                out.extend(self._deliver(above, now))
        visible = row.visible()
        if row.shown is None or visible != row.shown:  # not a state delivered already, nor the
            out.extend(_cut(visible, self._moment(row, now)))  # empty end of a line delivered in part
        self._recent.extend(above.visible() for above in self._rows[:-1])
        self._recent.append(visible)
        self._rows, self._cursor = [_Row()], 0

    def _up(self, count: int) -> None:
        for _ in range(count):
            if self._cursor > 0:
                self._cursor -= 1
            elif self._recent:
                self._rows.insert(0, _Row(text=(shown := self._recent.pop()), shown=shown))
            else:
                return
        if len(self._rows) > RECENT_ROWS:  # never more rows than that: the top ones are done
            del self._rows[: len(self._rows) - RECENT_ROWS]
            self._cursor = min(self._cursor, len(self._rows) - 1)

    def _deliver(self, row: _Row, now: float) -> list[tuple[str, float]]:
        visible = row.visible()
        lines = _cut(visible, self._moment(row, now))
        row.shown, row.shown_at = visible, now
        row.started = None
        return lines

    @staticmethod
    def _moment(row: _Row, now: float) -> float:
        if row.rewritten:
            return row.changed or now
        return row.started if row.started is not None else now

    def flush_stale(self, now: float, older_than: float = PARTIAL_FLUSH_SECONDS) -> list[tuple[str, float]]:
        """Lines waiting for their newline: a plain partial line once it waited ``older_than``
        (it is then done: what follows is a further line), a rewritten one as it stands, at most
        every ``PROGRESS_SNAPSHOT_SECONDS`` and only when it changed."""
        out: list[tuple[str, float]] = []
        for row in self._rows:
            if row.started is None or now - row.started < older_than:
                continue
            if not row.rewritten:
                if row.text:
                    out.extend(_cut(row.text, row.started))
                row.text, row.started, row.shown = "", None, ""  # what follows continues it
                continue
            visible = row.visible()
            if not visible or visible == row.shown:
                continue
            if row.shown_at is None or now - row.shown_at >= PROGRESS_SNAPSHOT_SECONDS:
                out.extend(self._deliver(row, now))
        return out

    def flush_all(self, now: float) -> list[tuple[str, float]]:
        """Every line not delivered yet, as it stands (the stream ended)."""
        out: list[tuple[str, float]] = []
        if self._escape:
            self._write(self._escape, now, out)
            self._escape = ""
        for row in self._rows:
            visible = row.visible()
            if visible and visible != row.shown:
                out.extend(_cut(visible, self._moment(row, now)))
        self._rows, self._cursor = [_Row()], 0
        return out


def _cut(text: str, t: float) -> list[tuple[str, float]]:
    return [(text[start:start + MAX_LINE_CHARS], t) for start in range(0, max(len(text), 1), MAX_LINE_CHARS)]


def visible_text(text: str) -> str:
    """A line's text as a terminal shows it once written: after its last ``\\r`` (see ``TerminalLines``)."""
    if "\r" not in text and "\x1b" not in text:
        return text
    terminal = TerminalLines()
    lines = terminal.feed(text, 0.0) + terminal.flush_all(0.0)
    return lines[-1][0] if lines else ""


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
        return OutputLine(rank=rank, stream=self.stream, text=visible_text(text), t=t, local_rank_only=local_only)

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
