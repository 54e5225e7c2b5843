"""Capture every rank's Python stacks without ptrace: signal, wait a moment, read, analyse.

Each worker registered faulthandler on ``STACK_SIGNAL`` before its ``hello``
(``rankwatch._stacks``), writing to ``<run_dir>/stacks/rank-<N>.txt``. To capture:

1. note each file's size, then ask every local rank that said hello and has not
   finished for a dump: its reporter thread takes the ask at its next heartbeat and
   dumps with the GIL held (``rankwatch._stacks``: faulthandler's signal handler,
   which runs without it, can crash a rank whose other threads run Python). A rank
   that has not taken the ask after ``ASK_SECONDS`` gets ``STACK_SIGNAL``:
   faulthandler's handler is C code, it answers even when the main thread holds the
   GIL inside C code, or is blocked inside gloo or NCCL with no reporter left;
2. poll the files every ``POLL_SECONDS`` until every asked rank wrote
   something and the sizes stopped changing, or ``WAIT_SECONDS`` passed;
3. parse the new part of each file, analyse (``runner.diagnosis.stacks``: where each
   rank is, and -- with each rank's progress as the stall monitor saw it when the
   signal was sent -- who holds up the others), write
   ``capture-<n>.json`` (the analysis plus every thread of every rank) and
   ``capture-<n>.txt`` (the side-by-side view, then the raw dumps) next to the
   rank files, and add the ``stacks`` event (the analysis, see
   ``runner.diagnosis.stacks`` for its shape, plus ``path`` and ``text_path``).

Nothing blocks the event loop: signalling and reading small files is quick, and
the waiting is done with ``loop.call_later``. Without a running loop (unit tests)
``tick`` drives the polling.

A rank whose stack file does not exist is never asked or signalled: its handler is
not installed, and ``STACK_SIGNAL``'s default action would kill it.

Ranks on another host cannot be signalled from here: their pids belong to that
machine. The hook for them is ``remote_capture(rows) -> ranks asked``: it asks
those nodes (their agents) to signal the ranks, and each dump comes back through
``add_remote_dump(rank, text)``; asked ranks are then awaited like local ones.
The run wires it to ``RemoteNodes.request_stacks`` (a ``stack_request`` line to the
node's agent, ``runner.remote.node_stacks``); this capture hears the answers as a hub
observer (``remote_stacks`` messages). Without the hook they are listed as missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankwatch._stacks import (
    ASK_SECONDS,
    STACK_SIGNAL,
    ask_file_path,
    ask_for_dump,
    signal_unless_answered,
    stacks_file_path,
)
from rankwatch.protocol import EventKind, Message, RemoteStacks
from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stack_dumps import Frame, last_dump, main_thread, parse_dump, user_frames
from runner.diagnosis.stacks import (
    CaptureFiles,
    MissingStack,
    StackAnalysis,
    StackCaptureJson,
    analyse,
    describe,
    format_stacks,
)
from runner.hub.observer import HubObserver
from runner.processes import why_not_signalled
from runner.runstate.messages import JsonObject
from runner.state import RankState

POLL_SECONDS = 0.2
WAIT_SECONDS = ASK_SECONDS + 2.0
"""The ask's time, then as long again as a signalled rank had before asks came first."""
MAX_READ_BYTES = 4 << 20
"""A dump of a few hundred threads is well under this; a bigger file is read from its end."""


@dataclass
class _Pending:
    reason: str
    t: float
    started: float
    offsets: dict[int, int]
    missing: list[MissingStack]
    progress: dict[int, RankProgress] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    remote: set[int] = field(default_factory=set)
    remote_texts: dict[int, str] = field(default_factory=dict)
    remote_why: dict[int, str] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    """rank -> its host, for ranks on other nodes (shown with their dumps)."""
    asked: dict[int, int] = field(default_factory=dict)
    """rank -> pid of local ranks asked for a dump, until ``ask_seconds`` passed (then signalled
    unless they answered)."""


class StackCapture(HubObserver):
    """One capture at a time, for every rank of the job. Monitor-shaped (``tick``)."""

    def __init__(self, hub, stacks_dir: Path, is_local: Callable[[Any], bool] | None = None,
                 on_result: Callable[[StackAnalysis], None] | None = None,
                 remote_capture: Callable[[list[Any]], list[int]] | None = None,
                 wait_seconds: float = WAIT_SECONDS, ask_seconds: float = ASK_SECONDS,
                 progress_of: Callable[[Any, float], RankProgress] | None = None,
                 is_ours: Callable[[int], bool] | None = None,
                 proven_pid: Callable[[int], int | None] | None = None):
        self.hub = hub
        self.progress_of = progress_of
        """row, now -> how the rank moves (``StallMonitor.progress_of``); None: unknown."""
        self.stacks_dir = Path(stacks_dir)
        self.is_local = is_local or _same_host
        self.on_result = on_result
        self.remote_capture = remote_capture
        self.wait_seconds = wait_seconds
        self.ask_seconds = ask_seconds
        self.is_ours = is_ours
        """pid -> whether the run started that process: a hello's pid is the worker's word, and a
        signal to a pid that is not the run's could reach any process of the user."""
        self.proven_pid = proven_pid
        """rank -> the pid its worker proved is its own (``Hub.proven_pid``: the process that
        connected), or None. Given, only that pid is ever signalled as the rank: a forged hello
        naming torchrun, the keeper or a rank's child (they carry the marker too, and
        ``STACK_SIGNAL``'s default action kills) is refused."""
        self.count = 0
        self.latest: StackCaptureJson | None = None
        """The last capture, as its event carries it."""
        self._pending: _Pending | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- monitor interface -------------------------------------------------------------

    def tick(self, now: float) -> None:
        if self._pending is not None and self._loop is None:
            self._poll()

    def capture_stacks(self, reason: str = "requested") -> bool:
        """Signal every live rank and collect the dumps into a ``stacks`` event.

        Returns False when a capture is already in flight (its event answers this
        request too). With no rank running, the event says so (no groups).
        """
        if self._pending is not None:
            return False
        rows = [row for row in self.hub.model.ranks.values()
                if row.pid and not RankState(row.state).finished]
        missing: list[MissingStack] = []
        offsets: dict[int, int] = {}
        asked: dict[int, int] = {}
        remote: list[Any] = []
        for row in sorted(rows, key=lambda r: r.rank):
            if not self.is_local(row):
                remote.append(row)
                continue
            if self.proven_pid is not None and self.proven_pid(row.rank) != row.pid:
                missing.append(MissingStack(row.rank, f"refused to signal pid {row.pid}: it is not proven to be "
                                                      "the rank's own process (its hello did not come from it)"))
                continue
            if self.is_ours is not None and not self.is_ours(row.pid):
                missing.append(MissingStack(row.rank, f"refused to signal pid {row.pid}: it is not a process "
                                                      "of this run (its hello named a pid the run did not start)"))
                continue
            path = Path(stacks_file_path(str(self.stacks_dir), row.rank))
            try:
                size = path.stat().st_size
            except OSError:
                missing.append(MissingStack(row.rank, "no stack handler (its stack file does not exist)"))
                continue
            why = why_not_signalled(row.pid, lambda pid: os.kill(pid, 0))  # gone, or not ours to signal
            if why is None:
                try:
                    ask_for_dump(str(path))
                    asked[row.rank] = row.pid
                except OSError:  # no ask can be left: signal now, as before asks came first
                    why = why_not_signalled(row.pid, lambda pid: os.kill(pid, STACK_SIGNAL))
            if why is not None:
                missing.append(MissingStack(row.rank, why))
                continue
            offsets[row.rank] = size
        asked_remote = set(self.remote_capture(remote)) if remote and self.remote_capture is not None else set()
        for row in remote:
            if row.rank not in asked_remote:
                missing.append(MissingStack(row.rank, f"on another host ({row.host}): no node agent could be "
                                                      "asked for its stack (Slurm nodes: not yet)"))
        now = time.time()
        progress = ({row.rank: self.progress_of(row, now) for row in rows} if self.progress_of is not None else {})
        self._pending = _Pending(reason=reason, t=now, started=time.monotonic(), offsets=offsets, missing=missing,
                                 remote=asked_remote, progress=progress,
                                 hosts={row.rank: row.host for row in remote if row.host}, asked=asked)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        if not offsets and not asked_remote:
            self._finish()
        elif self._loop is not None:
            self._loop.call_later(POLL_SECONDS, self._poll)
        return True

    def add_remote_dump(self, rank: int, text: str, why: str | None = None) -> None:
        """A dump of a rank on another host, forwarded by that node (see ``remote_capture``);
        ``why``: why that node has none."""
        if self._pending is not None and rank in self._pending.remote:
            self._pending.remote_texts[rank] = text
            if why:
                self._pending.remote_why[rank] = why

    def on_message(self, message: Message) -> None:
        """Hub observer: a node's agent answered a ``stack_request`` (``runner.remote.node_stacks``)."""
        if isinstance(message, RemoteStacks):
            self.add_remote_dump(message.rank, message.text, message.why)

    # ---- collecting -------------------------------------------------------------------

    def _poll(self) -> None:
        pending = self._pending
        if pending is None:
            return
        if pending.asked and time.monotonic() - pending.started >= self.ask_seconds:
            self._signal_the_unanswered(pending)
        sizes = {}
        for rank in pending.offsets:
            try:
                sizes[rank] = Path(stacks_file_path(str(self.stacks_dir), rank)).stat().st_size
            except OSError:
                sizes[rank] = pending.offsets[rank]
        all_wrote = (all(sizes[r] > pending.offsets[r] for r in pending.offsets)
                     and pending.remote <= set(pending.remote_texts))
        settled = sizes == pending.sizes
        pending.sizes = sizes
        waited = time.monotonic() - pending.started
        if (all_wrote and settled) or waited >= self.wait_seconds:
            self._finish()
        elif self._loop is not None:
            with contextlib.suppress(RuntimeError):  # loop closing at the end of the run
                self._loop.call_later(POLL_SECONDS, self._poll)

    def _signal_the_unanswered(self, pending: _Pending) -> None:
        """The ask's time is up: signal each asked rank that did not take its ask."""
        for rank, pid in pending.asked.items():
            path = stacks_file_path(str(self.stacks_dir), rank)
            why = why_not_signalled(pid, functools.partial(signal_unless_answered, stacks_path=path))
            if why is not None:
                pending.offsets.pop(rank, None)
                pending.missing.append(MissingStack(rank, why))
        pending.asked.clear()

    def _finish(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        for rank in pending.asked:  # asks still out (a wait shorter than the ask's): taken back
            with contextlib.suppress(OSError):
                os.unlink(ask_file_path(stacks_file_path(str(self.stacks_dir), rank)))
        stacks: dict[int, list[Frame]] = {}
        threads: dict[int, list[JsonObject]] = {}
        raw: dict[int, str] = {}
        missing = list(pending.missing)
        texts = {rank: self._read_from(rank, offset) for rank, offset in pending.offsets.items()}
        texts.update({rank: pending.remote_texts.get(rank, "") for rank in pending.remote})
        for rank, text in sorted(texts.items()):
            parsed = parse_dump(last_dump(text)) if text.strip() else []
            main = main_thread(parsed)
            if main is None:
                why = pending.remote_why.get(rank) or f"no dump within {self.wait_seconds:.0f} s"
                host = pending.hosts.get(rank)
                missing.append(MissingStack(rank, f"on {host}: {why}" if host else why))
                continue
            stacks[rank] = user_frames(main.frames)
            threads[rank] = [t.to_json() for t in parsed]
            raw[rank] = text
        result = analyse(stacks, pending.reason, pending.t, sorted(missing, key=lambda m: m.rank),
                         progress={rank: pending.progress[rank] for rank in stacks if rank in pending.progress})
        if pending.hosts:
            result.hosts = {str(rank): host for rank, host in sorted(pending.hosts.items())}
        self.count += 1
        result.files = self._write_files(result.to_json(), threads, raw)
        self.latest = capture = result.to_json()
        fields = {key: value for key, value in capture.items() if key != "t"}
        self.hub.add_event(EventKind.STACKS, None, f"stacks ({pending.reason}): {describe(capture)}", t=pending.t,
                           **fields)
        if self.on_result is not None:
            self.on_result(result)

    def _read_from(self, rank: int, offset: int) -> str:
        path = Path(stacks_file_path(str(self.stacks_dir), rank))
        try:
            with path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(offset, size - MAX_READ_BYTES))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _write_files(self, result: StackCaptureJson, threads: dict[int, list[JsonObject]], raw: dict[int, str]
                     ) -> CaptureFiles:
        """``capture-<n>.json`` and ``.txt``; returns their paths (None when not writable)."""
        json_path = self.stacks_dir / f"capture-{self.count}.json"
        text_path = self.stacks_dir / f"capture-{self.count}.txt"
        try:
            json_path.write_text(json.dumps({**result, "threads": {str(r): t for r, t in threads.items()}}, indent=1))
            hosts = result.get("hosts")
            hosts = hosts if isinstance(hosts, Mapping) else {}
            text = format_stacks(result) + "".join(
                f"\n==== rank {rank}{_on(hosts.get(str(rank)))}: every thread, as faulthandler wrote it ====\n{raw[rank]}"
                for rank in sorted(raw))
            text_path.write_text(text)
        except OSError as error:
            self.hub.add_event(EventKind.WARNING, None, f"cannot write the stack capture to {self.stacks_dir}: {error}")
            return CaptureFiles(path=None, text_path=None)
        return CaptureFiles(path=str(json_path), text_path=str(text_path))


def _on(host: object) -> str:
    return f" (on {host}, through its node's agent)" if isinstance(host, str) and host else ""


def _same_host(row: Any) -> bool:
    return row.host in (None, "", "localhost", socket.gethostname())
