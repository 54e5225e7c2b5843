"""The terminal view of a run: `rankwatch run` and `rankwatch attach`.

It consumes the same hub->subscriber messages as the GUI (snapshot, update, bye),
in-process for `run` and over the socket for `attach`. On a terminal it keeps a
live table at the bottom (a row per rank) with the logs scrolling above it; when
stdout is not a terminal (CI, a pipe, a file) it prints plain prefixed lines only.
"""

from __future__ import annotations

import re
import sys
import textwrap
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

from runner.diagnosis.report import format_diagnostics
from runner.diagnosis.summary import FinishedRank, RunSummary
from runner.exit_status import (
    describe_exit_code,
    describe_stop_reason,
    ended_by,
    failure_end_words,
    how_it_ended,
)
from runner.format import (
    MISSING,
    format_amount,
    format_bytes,
    format_fixed,
    format_number,
    format_percent,
    ranks_text,
)
from runner.rank_failure import RankFailure, describe_losses
from runner.runstate.messages import (
    Bye,
    EventKind,
    HistoryEnd,
    HubMessage,
    LaunchModeFields,
    RankInfo,
    RunInfo,
    SnapshotMessage,
    StoppingFields,
    UpdateMessage,
    decode_hub_message,
    fields_of,
)
from runner.runstate.progress import PROGRESS_METRICS, progress_texts
from runner.runstate.state import RunState, steps_done
from runner.state import RankState, RunStatus
from runner.store.rank_stats import BUILT_IN_METRICS, RankStats
from runner.view.bursts import Bursts, burst_of
from runner.view.columns import Column, Justify, choose_columns, format_rate, text_width
from runner.view.failure_lines import EchoTracebacks, LauncherQuiet
from runner.view.log_lines import format_prefix, without_torch_prefix
from runner.view.phase_bars import CLOCK_WORDS, phase_bar, phase_shares_text
from runner.view.standing_out import (
    EVERY_RANK_UP_TO,
    MIN_TABLE_ROWS,
    STANDING_OUT_ROWS,
    rows_that_fit,
    stored_ranks_that_stand_out,
)

if TYPE_CHECKING:  # rich is imported when a live table starts (plain mode never needs it)
    from rich.console import Console
    from rich.live import Live

__all__ = ["TerminalView", "format_bytes", "format_prefix", "render_summary", "without_torch_prefix"]

STATE_STYLE = {
    RankState.WAITING.value: "dim", RankState.RUNNING.value: "green", RankState.STALLED.value: "bold yellow",
    RankState.EXITED.value: "cyan", RankState.FAILED.value: "bold red", RankState.STOPPED.value: "magenta",
    RankState.LOST.value: "red",
}
PLAIN_STATUS_SECONDS = 30.0
FAILURE_STATES = frozenset({RankState.FAILED, RankState.LOST})
"""A rank in one of these failed: torchrun's lines from then on are its reaction (``LauncherQuiet``)."""
NOTABLE_EVENTS = frozenset({
    EventKind.RANK_FAILED, EventKind.RANK_STOPPED, EventKind.STALLED, EventKind.RESUMED, EventKind.STRAGGLER, EventKind.DIVERGENCE,
    EventKind.NODE_LOST, EventKind.WARNING, EventKind.REFUSED, EventKind.STOPPING, EventKind.CONNECTION_LOST,
    EventKind.STACKS, EventKind.LAUNCH_MISMATCH, EventKind.SLURM, EventKind.SLURM_SUBMITTED,
    EventKind.RECORDS_REJECTED, EventKind.STORE_INCOMPLETE})
EXPECTED_WHILE_STOPPING = frozenset({EventKind.CONNECTION_LOST})
"""Events a stop causes by design (the ranks it ends disconnect): not news while stopping, nor once
a rank failed (torchrun then ends the others; the summary names how each ended)."""
DEFAULT_WIDTH = 120
DEFAULT_HEIGHT = 40
PROGRESS_SAMPLES_PER_BATCH = 64
REFRESH_PER_SECOND = 4
"""The live table is rebuilt this often, by the Live's thread (the hub publishes up to 20 updates a second)."""
PHASES_COLUMN = "where the step goes"
"""The phases' stacked bar (``runner.view.phase_bars``: d data, h h2d, F forward, B backward, c comm,
O optimizer, · rest)."""
PHASES_COLUMN_WIDTH = 12
WIDE_PHASES_COLUMN_WIDTH = 24
"""The phases' bar where the terminal has room to spare (each letter 1/24 of the step)."""
RANK_COLUMNS = (
    Column("rank", "rank", 0, always=True),
    Column("host", "host", 4, justify=Justify.LEFT),
    Column("state", "state", 1, justify=Justify.LEFT, always=True),
    Column("step", "step", 2),
    Column("loss", "loss", 3),
    Column("step_time", "ms/step", 6),
    Column("samples_per_s", "samples/s", 7, short_header="smp/s"),
    Column("data_wait", "data wait", 10, short_header="data"),
    Column("comm_wait", "comm wait", 11, short_header="comm"),
    Column("phases", PHASES_COLUMN, 30, short_header="phases", justify=Justify.LEFT),
    Column("cpu_percent", "CPU %", 8),
    Column("rss", "RSS", 9),
    Column("gpu", "GPU", 31),
    Column("gpu_util", "GPU %", 8),
    Column("gpu_mem", "GPU mem", 9, short_header="mem"),
    Column("seen", "seen", 25),
    Column("exit", "exit", 5, justify=Justify.LEFT),
)
"""The rank table's columns in their order; the priority decides which stay on a narrow terminal:
who and how far first (rank, state, step, loss), then how a rank ended, its speed and its device,
where its time goes, the keys the script logged (``LOGGED_PRIORITY``), and the rest."""
LOGGED_PRIORITY = 20
WHOLE_RUN_CAPTION = ("whole run: median step time; data wait, comm wait, samples/s and where the step goes over "
                     "every (timed) step; GPU % the median, GPU mem the most; loss and the last columns as last seen")
"""The live table's last frame, once ``show_results`` gave each rank's whole-run figures."""


class LoggedValues:
    """The newest value of every key a script logged (``rankwatch.log``, ``--parse-stdout``), per rank,
    in the order the keys first appeared."""

    def __init__(self) -> None:
        self.newest: dict[str, dict[int, tuple[float, float | None]]] = {}

    def add_rows(self, rows: Sequence[Any]) -> None:
        """Protocol metric rows ``[rank, t, step, name, value, source]``.

        This runs in the runner's event loop for `rankwatch run` (100k+ rows a second), so the
        per-row work is done by comprehensions: the last row of each (key, rank) in the batch (a
        worker sends its points in order), then one comparison of times per key and rank."""
        built_in = BUILT_IN_METRICS
        last_in_batch = {(row[3], row[0]): row for row in rows if row[3] not in built_in}
        newest = self.newest
        for (name, rank), row in last_in_batch.items():
            by_rank = newest.get(name)
            if by_rank is None:
                by_rank = newest[name] = {}
            previous = by_rank.get(rank)
            if previous is None or row[1] >= previous[0]:
                by_rank[rank] = (row[1], row[4])

    def names(self) -> list[str]:
        """Keys to show per rank (progress keys such as ``epoch`` go to the header instead)."""
        return [name for name in self.newest if name not in PROGRESS_METRICS]

    def value(self, name: str, rank: int) -> float | None:
        found = self.newest.get(name, {}).get(rank)
        return None if found is None else found[1]

    def last_value(self, names) -> float | None:
        """The newest value of the first of ``names`` any rank logged (for the progress header)."""
        for name in names:
            by_rank = self.newest.get(name)
            if by_rank:
                _t, value = max(by_rank.values(), key=lambda item: item[0])
                if value is not None:
                    return value
        return None


class TerminalView:
    """Render hub messages. ``live=None`` picks a live table when stdout is a terminal.

    While a run is stopping, torchrun's own lines (its SIGTERM notices and the
    traceback of its SignalException) and the ranks' expected disconnections are kept
    in the store but not printed: the stop is reported as "stopping…" and "stopped".
    """

    def __init__(self, live: bool | None = None, out: TextIO | None = None, err: TextIO | None = None,
                 multi_node: bool = False, status_every: float = PLAIN_STATUS_SECONDS,
                 interrupt_kills: bool = False):
        self.status_every = status_every
        """Plain mode: print one status line per rank this often (0: never)."""
        self._last_status = time.monotonic()
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live_mode = self.out.isatty() if live is None else live
        self.multi_node = multi_node
        self.interrupt_kills = interrupt_kills
        """``rankwatch run``: Ctrl-C during a stop kills at once (say so when the stop begins)."""
        self.state = RunState()
        """The run as the hub's messages built it (``runner.runstate``): what the table shows."""
        self.spec_args: list = []
        self.launcher = "torchrun"
        """How lines of no rank are labelled: ``script`` when the script started its own ranks."""
        self.logged = LoggedValues()
        self.cpu_mode = True
        self.ended = False
        self.stopping_since: float | None = None
        self.hidden_launcher_lines = 0
        """torchrun's lines not printed while the run stopped."""
        self.launcher_quiet = LauncherQuiet()
        """torchrun's lines not printed once a rank failed (``runner.view.failure_lines``)."""
        self.echoes = EchoTracebacks()
        self.bursts = Bursts()
        """Per-rank events many ranks send at once: the first few, then a count (``runner.view.bursts``)."""
        self._rank_prefixes: dict[int, str] = {}
        """Each rank's line prefix as last printed (a held traceback's lines keep it)."""
        self._live: Live | None = None
        self._console: Console | None = None
        self._lock = threading.Lock()
        self._outbox: list[tuple[str, str, str, str | None]] = []
        self._results: dict[int, RankStats] | None = None
        """Each rank's whole-run figures once the run ended (``show_results``), for the last frame."""

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            console = self._console = Console(file=self.out)
            # The Live's thread asks for the table at each refresh, so elapsed time and heartbeat
            # ages move even when no message arrives; the lock keeps it from reading half an update.
            live = self._live = Live(console=console, refresh_per_second=REFRESH_PER_SECOND, transient=False,
                                     redirect_stdout=False, redirect_stderr=False, get_renderable=self._render)
            live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def _render(self):
        with self._lock:
            return self._table()

    # ---- messages --------------------------------------------------------------------

    @property
    def ranks(self) -> dict[int, RankInfo]:
        return self.state.ranks

    @property
    def run(self) -> RunInfo | None:
        return self.state.run

    def handle(self, message: dict[str, Any] | HubMessage) -> None:
        """One hub message: as decoded from its line (``attach``), or typed already."""
        typed = decode_hub_message(message) if isinstance(message, dict) else message
        if typed is None:
            return
        with self._lock:
            self._handle(typed)
        self._flush_lines()

    def _handle(self, message: HubMessage) -> None:
        if isinstance(message, SnapshotMessage):
            self.state.apply(message)
            self.spec_args = list(self.state.spec.get("args") or [])
            if self.state.spec.get("launch_mode") == "self-spawn":
                self.launcher = "script"
            if any(row.gpu_index is not None for row in message.ranks):
                self.cpu_mode = False  # attached to a run on GPUs: their columns from the start
            if len(message.nodes) > 1:
                self.multi_node = True
            if self.state.status == RunStatus.STOPPING.value:
                self.stopping_since = time.monotonic()
        elif isinstance(message, UpdateMessage):
            self._on_update(message)
        elif isinstance(message, Bye):
            self.state.apply(message)
            self.ended = True
            self._say_bursts(self.bursts.flush())
            for rank, held in self.echoes.flush():
                self._print_line(self._rank_prefixes.get(rank, format_prefix(rank, None, False)), held.text,
                                 held.stream)
            if self.stopping_since is not None:
                self._say_stopped(self.stopping_since)
            else:
                self._say_what_was_not_shown()
            if self._live is None and self.status_every:
                self._print_final_header()  # plain mode: the run's last state, once (ranks: show_results)
        else:
            self.state.apply(message)
            if isinstance(message, HistoryEnd) and message.thinned:
                self._print_line("[rankwatch]", message.describe(None if self.run is None else self.run.id), "stderr")
        if (self._live is None and self.status_every and not self.ended
                and time.monotonic() - self._last_status >= self.status_every):
            self._last_status = time.monotonic()
            self._print_status()

    def _on_update(self, message: UpdateMessage) -> None:
        self.state.apply(message)
        self._say_bursts(self.bursts.ended())
        events = message.events
        # A stop is known before the lines it causes are printed (they may share this update).
        if self.stopping_since is None and (
                self.state.status == RunStatus.STOPPING.value
                or any(event.kind is EventKind.STOPPING for event in events)):
            self.stopping_since = time.monotonic()
        metrics = message.metrics
        if metrics:
            self.logged.add_rows(metrics)
            # Rows come in the order they were stored; the rate needs a mark every half second,
            # not every row: a sample of the batch and its newest row.
            sample = list(metrics[::max(1, len(metrics) // PROGRESS_SAMPLES_PER_BATCH)])
            sample.append(metrics[-1])
            self.state.note_steps([row[2] for row in sample], [row[1] for row in sample])
        a_rank_failed = any(RankState(row.state) in FAILURE_STATES for row in self.ranks.values())
        for line in message.logs:
            if line.rank is None:
                if self.stopping_since is not None:
                    self.hidden_launcher_lines += 1
                    continue
                if self.launcher == "torchrun" and self.launcher_quiet.hides(line.line, a_rank_failed):
                    continue
                self._print_line(format_prefix(None, line.node, self.multi_node, self.launcher), line.line,
                                 line.stream)
                continue
            prefix = self._rank_prefixes[line.rank] = format_prefix(line.rank, line.node, self.multi_node,
                                                                    self.launcher)
            for shown in self.echoes.feed(line.rank, without_torch_prefix(line.line, line.rank), line.stream,
                                          after_failure=a_rank_failed):
                self._print_line(prefix, shown.text, shown.stream)
        for event in events:
            kind = event.kind
            fields = fields_of(event)
            if isinstance(fields, StoppingFields):
                self._say_stopping(fields)
            elif isinstance(fields, LaunchModeFields) and fields.mode == "self-spawn":
                self._print_line("[rankwatch]", event.message, "stderr")  # torchrun goes without saying
            elif kind in NOTABLE_EVENTS and not (
                    (self.stopping_since is not None or a_rank_failed) and kind in EXPECTED_WHILE_STOPPING):
                burst = burst_of(kind, event.rank, event.message)
                if burst is None or self.bursts.admit(burst):
                    self._print_line("[rankwatch]", event.message, "stderr", style="yellow")
        if any(self.ranks[rank].gpu_index is not None for rank in _ranks_in(message) if rank in self.ranks):
            self.cpu_mode = False

    def _say_bursts(self, lines: list[str]) -> None:
        for line in lines:
            self._print_line("[rankwatch]", line, "stderr", style="yellow")

    def _say_stopping(self, fields: StoppingFields) -> None:
        why = fields.stopped_by
        hint = None
        if self.interrupt_kills:
            hint = "Ctrl-C again kills at once" if why == describe_stop_reason("SIGINT") else "Ctrl-C kills at once"
        details = "; ".join(part for part in (why, hint) if part)
        self._print_line("[rankwatch]", f"stopping…{f' ({details})' if details else ''}", "stderr", style="yellow")

    def _say_stopped(self, stopping_since: float) -> None:
        seconds = time.monotonic() - stopping_since
        run_id = None if self.run is None else self.run.id
        note = ""
        if self.hidden_launcher_lines and run_id is not None:
            note = (f"; torchrun's {self.hidden_launcher_lines} line(s) about it: "
                    f"rankwatch runs logs {run_id} --launcher")
        self._print_line("[rankwatch]", f"stopped ({seconds:.1f} s{note})", "stderr", style="yellow")

    def _say_what_was_not_shown(self) -> None:
        """Once a failed run ended: where the echoes' tracebacks and torchrun's report are (the
        summary below says what they say)."""
        run_id = "N" if self.run is None or self.run.id is None else self.run.id
        if self.echoes.collapsed:
            ranks = sorted(self.echoes.collapsed)
            whose = f"rank {ranks[0]}'s traceback" if len(ranks) == 1 else f"the tracebacks of {ranks_text(ranks)}"
            self._print_line("[rankwatch]", f"{whose} only said a peer went away, in the run's log: "
                             f"rankwatch runs logs {run_id} --rank {ranks[0]}", "stderr")
        if self.launcher_quiet.hidden:
            self._print_line("[rankwatch]", f"torchrun's {self.launcher_quiet.hidden} line(s) about it, in the run's "
                             f"log: rankwatch runs logs {run_id} --launcher", "stderr")

    def print_status(self) -> None:
        """Plain mode's stand-in for the live table: the header, then one line per running rank."""
        with self._lock:
            self._print_status()
        self._flush_lines()

    @property
    def watches_live(self) -> bool:
        """Whether this view shows records as they come (the live table): a plain view prints
        output lines (never delayed) and a status line every few seconds, so with it alone
        the run goes at its slow, cheaper pace (``runner.hub.freshness``)."""
        return self.live_mode

    @property
    def shows_results(self) -> bool:
        """Whether ``show_results`` shows anything (the live table, or plain mode with status
        lines): callers ask first, so that a view that would show nothing costs no store read."""
        return self.live_mode or bool(self.status_every)

    def show_results(self, stats: list[RankStats]) -> None:
        """Once the run ended: each rank's result over the whole run, from the store.

        Not the live rows: those hold the newest step's figures, and a last step (a checkpoint,
        the final all-reduce) is no summary (seen: "comm wait 46%" for a rank that waited 3 %
        of the run, "21.5 ms/step" where the median was 15.9 ms). The live table's last frame
        (drawn by ``stop``) shows them in its columns, under a caption that says so; plain mode
        prints a line per rank, past ``EVERY_RANK_UP_TO`` ranks only for those that stand out
        (``stored_ranks_that_stand_out``). The script's logged keys keep their newest values, as live.
        """
        if not self.shows_results:
            return
        if self.live_mode:
            with self._lock:
                self._results = {entry.rank: entry for entry in stats}
            return
        listed, caption = stored_ranks_that_stand_out(
            [entry for entry in stats if entry.steps is not None or entry.last_step is not None])
        with self._lock:
            for entry in listed:
                logged = self._logged_text(entry.rank)
                timing = ""
                if entry.median_step_time is not None:
                    comm = ("" if entry.comm_wait_share is None
                            else f", comm wait {format_percent(entry.comm_wait_share)}")
                    timing = (f", median step {format_amount(entry.median_step_time, 1000)} ms, "
                              f"data wait {format_percent(entry.data_wait_share)}{comm}, "
                              f"{format_amount(entry.samples_per_s)} samples/s")
                steps = (f"{entry.steps} steps" if entry.steps is not None else f"last step {entry.last_step}")
                if entry.skipped_steps:
                    steps += f" ({entry.skipped_steps} skipped by GradScaler)"
                self._print_line("[rankwatch]", f"rank {entry.rank} {entry.state or MISSING}: {steps}, "
                                 f"last loss {format_number(entry.last_loss)}{timing}{_gpu_text(entry)}{logged}",
                                 "stdout")
                if entry.phase_shares:
                    clock = CLOCK_WORDS.get(entry.phase_clock or "", "its clock")
                    self._print_line("[rankwatch]", f"rank {entry.rank} steps on {clock}: "
                                     f"{phase_shares_text(entry.phase_shares)}", "stdout")
            for line in caption:
                self._print_line("[rankwatch]", line, "stdout")
            if caption:
                run_id = "N" if self.run is None or self.run.id is None else self.run.id
                self._print_line("[rankwatch]", f"every rank: rankwatch runs show {run_id} --ranks all", "stdout")
        self._flush_lines()

    def _print_final_header(self) -> None:
        """The run's header once it ended; each rank's result comes from the store (``show_results``)."""
        if any(row.step is not None for row in self.ranks.values()):
            self._print_line("[rankwatch]", self.header(), "stdout")

    def _logged_text(self, rank: int) -> str:
        """``, NAME VALUE`` for each key the script logged (its newest value on ``rank``)."""
        return "".join(f", {name} {format_number(self.logged.value(name, rank))}" for name in self.logged.names())

    def _print_status(self) -> None:
        lines: dict[int, str] = {}
        for rank in sorted(self.ranks):
            row = self.ranks[rank]
            if row.step is None or RankState(row.state).finished:
                continue
            cpu_percent, rss_bytes = self.state.process_figures(rank)
            usage = (f"cpu {format_fixed(cpu_percent, '{:.0f}%')}, rss {format_bytes(rss_bytes)}"
                     if self.cpu_mode else
                     f"gpu {MISSING if row.gpu_index is None else row.gpu_index} "
                     f"{format_fixed(row.gpu_util, '{:.0f}%')}, mem {format_bytes(row.gpu_mem_used)}")
            logged = self._logged_text(rank)
            working = self.state.working_text(rank, time.time())
            lines[rank] = (f"rank {rank} {row.state}{f', {working}' if working else ''}: "
                           f"step {steps_done(row.step)}, loss {format_number(row.loss)}, "
                           f"{format_amount(row.step_time, 1000)} ms/step, "
                           f"data wait {format_percent(row.data_wait_share)}, "
                           f"comm wait {format_percent(row.comm_wait_share)}, "
                           f"{format_amount(row.samples_per_s)} samples/s, {usage}{logged}")
        shown = list(lines.values())
        if len(lines) > EVERY_RANK_UP_TO:  # 1,024 lines every 30 s would be no status: those that stand out
            kept, caption = rows_that_fit([{"rank": str(rank)} for rank in lines], self.ranks,
                                          STANDING_OUT_ROWS, time.time())
            shown = [lines[int(row["rank"])] for row in kept] + caption
        if shown:
            self._print_line("[rankwatch]", self.header(), "stdout")
        for line in shown:
            self._print_line("[rankwatch]", line, "stdout")

    def _print_line(self, prefix: str, text: str, stream: str, style: str | None = None) -> None:
        """Queue a line; it is written once the view's lock is released (printing above the live
        table takes the Live's lock, which its refresh thread holds while asking for the table)."""
        self._outbox.append((prefix, text, stream, style))

    def _flush_lines(self) -> None:
        """Write the queued lines. Above the live table they go out in one print: each print
        draws the table again (~30 ms at 256 ranks), and 256 ranks printing a line every few
        steps made an attached terminal fall behind until the hub dropped it."""
        lines, self._outbox = self._outbox, []
        if not lines:
            return
        if self._console is not None:
            from rich.text import Text

            block = Text()
            for index, (prefix, text, stream, style) in enumerate(lines):
                if index:
                    block.append("\n")
                block.append(f"{prefix} {text}", style=style or ("red" if stream == "stderr" else "blue"))
            self._console.print(block, soft_wrap=True, highlight=False, markup=False)
            return
        for prefix, text, stream, _style in lines:  # each flushed: stdout and stderr keep their order
            target = self.err if stream == "stderr" else self.out
            target.write(f"{prefix} {text}\n")
            target.flush()

    # ---- the header and the table ----------------------------------------------------

    def current_step(self) -> int | None:
        return self.state.current_step()

    def header(self, now: float | None = None, width: int | None = None) -> str:
        """``run 3 · example · running · epoch 2/10 · step 120/640 (19%) · elapsed 1:05 · ETA 4:31``.

        With ``width`` (the live table's line): without the profile's name when the whole does not
        fit, so the line stays one line and keeps the progress and the ETA."""
        run = self.run
        status = (run.status if run is not None else None) or RunStatus.STARTING.value
        progress = self.state.progress_now(self.logged.last_value, now)
        position, timing = progress_texts(progress, status)
        if progress.fraction is not None:
            position += f" ({100 * progress.fraction:.0f}%)"
        run_id = "?" if run is None or run.id is None else run.id
        shown = self.state.shown_status or status  # "hung" while a rank stalls, as the GUI and History say
        parts = [f"run {run_id}", (run.profile if run is not None else None) or "", shown, position, timing]
        whole = " · ".join(part for part in parts if part)
        if width is None or text_width(whole) <= width:
            return whole
        return " · ".join(part for part in (parts[0], *parts[2:]) if part)

    def _table(self, width: int | None = None):
        """The header line (as wide as the terminal) over the rank table."""
        from rich.console import Group
        from rich.text import Text

        width = width or (self._console.width if self._console is not None else DEFAULT_WIDTH)
        return Group(Text(self.header(width=width), style="bold", overflow="fold"), self._rank_table(width))

    def _rank_table(self, width: int | None = None):
        """The rank table: the columns that fit ``width`` by priority (``runner.view.columns``),
        every key the script logged among them; the columns left out for width are named under it."""
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        width = width or (self._console.width if self._console is not None else DEFAULT_WIDTH)
        columns, rows = self._table_cells(PHASES_COLUMN_WIDTH)
        cells = {column.key: [row[column.key] for row in rows] for column in columns}
        chosen = choose_columns(columns, cells, width)
        if "phases" in chosen.widths and width - chosen.width >= WIDE_PHASES_COLUMN_WIDTH - PHASES_COLUMN_WIDTH:
            columns, rows = self._table_cells(WIDE_PHASES_COLUMN_WIDTH)  # a wide terminal: a finer bar
            cells = {column.key: [row[column.key] for row in rows] for column in columns}
            chosen = choose_columns(columns, cells, width)
        now = time.time()
        working = [f"rank {rank} {text}" for rank, row in sorted(self.ranks.items())
                   if not RankState(row.state).finished
                   and (text := self.state.working_text(rank, now))]
        hidden = ([f"too narrow for: {', '.join(column.header for column in chosen.too_narrow)}"]
                  if chosen.too_narrow else [])
        rows, standing_out = rows_that_fit(rows, self.ranks, self._table_rows(), now)
        captions = [*([WHOLE_RUN_CAPTION] if self._results is not None else []), *standing_out, *working[:3],
                    *hidden]
        table = Table(expand=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                      padding=(0, 1, 0, 0))
        for column in chosen.shown:
            table.add_column(chosen.headers[column.key], justify=column.justify.value, no_wrap=True,
                             min_width=chosen.widths[column.key])
        for row in rows:  # Text, never markup: a phase bar "[ddhFFFBBB...]" reads as a style tag and vanishes
            table.add_row(*(Text(row[column.key], style=STATE_STYLE.get(row[column.key], ""))
                            if column.key == "state" else Text(row[column.key]) for column in chosen.shown))
        if not captions:
            return table
        # under the table, as wide as the terminal (a table's caption wraps at the table's width)
        return Group(table, *(Text(caption, style="dim", overflow="fold") for caption in captions))

    def _table_rows(self) -> int:
        """Rank rows the screen has room for: half its height, the logs scroll above the rest."""
        height = self._console.height if self._console is not None else DEFAULT_HEIGHT
        return max(MIN_TABLE_ROWS, height // 2 - 4)

    def _table_cells(self, bar_width: int) -> tuple[list[Column], list[dict[str, str]]]:
        """Every column the table could show, in its order, and each rank's cells as text
        (the phases' bar ``bar_width`` letters wide)."""
        figures = {rank: self._figures(rank, row) for rank, row in self.ranks.items()}
        logged_names = self.logged.names()
        columns = [*RANK_COLUMNS, *(Column(f"logged:{name}", name, LOGGED_PRIORITY + index)
                                    for index, name in enumerate(logged_names))]
        if self._results is not None:
            columns = [replace(column, header="median ms/step", short_header="ms/step")
                       if column.key == "step_time" else column for column in columns]
        host_shown = self.multi_node
        now = time.time()
        rows = []
        for rank in sorted(self.ranks):
            row = self.ranks[rank]
            shown = figures[rank]
            age = now - row.last_seen if row.last_seen else None
            cpu_percent, rss_bytes = self.state.process_figures(rank)
            gpu = not self.cpu_mode
            cells = {
                "rank": str(rank), "host": (row.host or MISSING) if host_shown else MISSING, "state": row.state,
                "step": MISSING if row.step is None else str(steps_done(row.step)),
                "loss": format_number(shown.loss),
                "exit": describe_exit_code(row.exit_code),
                "step_time": format_amount(shown.step_time, 1000),
                "samples_per_s": format_rate(shown.samples_per_s),
                "cpu_percent": MISSING if gpu else format_fixed(cpu_percent, "{:.0f}"),
                "rss": MISSING if gpu else format_bytes(rss_bytes),
                "gpu_util": format_fixed(shown.gpu_util, "{:.0f}") if gpu else MISSING,
                "gpu_mem": format_bytes(shown.gpu_mem_used) if gpu else MISSING,
                "gpu": str(row.gpu_index) if gpu and row.gpu_index is not None else MISSING,
                "data_wait": format_percent(shown.data_wait_share),
                "comm_wait": format_percent(shown.comm_wait_share),
                "phases": phase_bar(shown.phase_shares, bar_width) if shown.phase_shares else MISSING,
                "seen": MISSING if RankState(row.state).finished or age is None else f"{max(0.0, age):.0f} s",
            }
            for name in logged_names:
                cells[f"logged:{name}"] = format_number(self.logged.value(name, rank))
            rows.append(cells)
        return columns, rows

    def _figures(self, rank: int, row: RankInfo) -> ShownFigures:
        """The loss, step time and shares shown for ``rank``: the live row's newest step while the
        run goes, its whole-run figures from the store once ``show_results`` gave them."""
        result = self._results.get(rank) if self._results is not None else None
        if result is None:
            return ShownFigures(loss=row.loss, step_time=row.step_time, data_wait_share=row.data_wait_share,
                                comm_wait_share=row.comm_wait_share, samples_per_s=row.samples_per_s,
                                phase_shares=row.phase_shares, gpu_util=row.gpu_util, gpu_mem_used=row.gpu_mem_used)
        return ShownFigures(loss=result.last_loss if result.last_loss is not None else row.loss,
                            step_time=result.median_step_time, data_wait_share=result.data_wait_share,
                            comm_wait_share=result.comm_wait_share, samples_per_s=result.samples_per_s,
                            phase_shares=result.phase_shares, gpu_util=result.gpu_util,
                            gpu_mem_used=result.gpu_mem_used_peak)


@dataclass(frozen=True)
class ShownFigures:
    """A rank's figures in the live table: its newest step's while the run goes, its whole run's
    (``RankStats``) in the last frame."""

    loss: float | None
    step_time: float | None
    """Seconds per step (the median over the run in the last frame)."""
    data_wait_share: float | None
    comm_wait_share: float | None
    samples_per_s: float | None
    phase_shares: dict[str, float | None] | None
    gpu_util: float | None
    gpu_mem_used: int | None
    """Bytes (the most the rank held over the run, in the last frame)."""


def _ranks_in(message: UpdateMessage) -> list[int]:
    return [rank for rank in (row.get("rank") for row in message.ranks) if isinstance(rank, int)]


def _gpu_text(entry: RankStats) -> str:
    """``, GPU 0 51% (median), 3.6 GiB at most``: a rank's GPU over the run, when it was sampled."""
    if entry.gpu_index is None or (entry.gpu_util is None and entry.gpu_mem_used_peak is None):
        return ""
    used = "" if entry.gpu_mem_used_peak is None else f", {format_bytes(entry.gpu_mem_used_peak)} at most"
    return f", GPU {entry.gpu_index} {format_fixed(entry.gpu_util, '{:.0f}%')} (median){used}"


def _finished_text(finished: FinishedRank, failed_rank: int | None) -> str:
    """``rank 1 (exit code 0, 0.02 s before rank 0 failed)``: a rank of a failed run whose script ran to its end."""
    before = finished.before
    when = ""
    if before is not None:
        when = (f", {before:.2f} s before rank {failed_rank} failed" if before >= 0
                else f", {-before:.2f} s after rank {failed_rank} failed")
    return f"rank {finished.rank} ({ended_by(0)}{when})"


def render_summary(run: RunInfo | Mapping[str, Any], out: TextIO) -> None:
    """The block printed at the end of a run: outcome, first failure, hints, where to look.

    ``run``: the run's row, as the hub publishes it or the store holds it; its summary is read
    through ``RunSummary.from_wire`` (leniently: a summary of any earlier version reads).

    On a terminal its long lines are wrapped at words, each under its own value
    (``wrap_summary_line``): the terminal's own wrapping cut words in two ("(dat" / "a 1%")."""
    if not isinstance(run, RunInfo):
        run = RunInfo.from_wire(run)
    if not out.isatty():
        _write_summary(run, out)
        return
    import io
    import shutil

    block = io.StringIO()
    _write_summary(run, block)
    width = shutil.get_terminal_size().columns
    out.write("".join(line + "\n" for text in block.getvalue().split("\n")[:-1]
                      for line in wrap_summary_line(text, width)))
    out.flush()


SUMMARY_LABEL = re.compile(r"^(\s*(?:[a-z][\w ]*:\s+|->\s+|→\s+)?)")
"""A summary line's label and the spaces after it (``  hint: ``, ``  first to fail: ``, ``  -> ``)."""


def wrap_summary_line(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken at spaces, the continuation lines
    indented to where the text after the line's label begins. A code line (a traceback's) and a
    line that fits are left whole."""
    if text_width(text) <= width or width < 20:
        return [text]
    label = SUMMARY_LABEL.match(text)
    prefix = label.group(1) if label else ""
    if len(prefix) >= 4 and not prefix.strip():
        return [text]  # a traceback's line: code and paths are not prose
    indent = " " * len(prefix)
    if len(indent) > width // 2:
        indent = indent[: width // 2]
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_long_words=True,
                         break_on_hyphens=False, drop_whitespace=True) or [text]


def _write_summary(run: RunInfo, out: TextIO) -> None:
    summary = RunSummary.from_wire(run.summary or {})
    width = 72
    code = MISSING if run.exit_code is None else run.exit_code
    out.write("\n" + f"── Rankwatch · run {run.id} {run.status} (exit code {code}) ".ljust(width, "─") + "\n")
    if summary.headline:
        out.write(f"{summary.headline}\n")
    first = summary.first_failure
    if first is not None:
        _write_first_failure(first, out)
    if any(other.rank is not None for other in summary.other_failures):  # ranks that ended alike go together: "ranks 0, 2-7 (SIGTERM, stopped after rank 1 failed)"
        alike: dict[str, list[int]] = {}
        for other in summary.other_failures:
            if other.rank is not None:
                alike.setdefault(failure_end_words(other), []).append(other.rank)
        described = [f"{ranks_text(ranks)} ({words})" for words, ranks in alike.items()]
        out.write(f"  then:          {', '.join(described[:8])}{' ...' if len(described) > 8 else ''}\n")
    finished = summary.finished
    if finished and first is not None:
        out.write(f"  finished:      {', '.join(_finished_text(item, first.rank) for item in finished[:8])}"
                  f"{' ...' if len(finished) > 8 else ''}\n")
    for line in format_diagnostics(summary.diagnostics, run.id):
        out.write(line + "\n")
    for line in describe_losses(summary.losses, summary.store_incomplete):
        out.write(f"  not stored:    {line}\n")
    lost = summary.runner_lost
    if lost is not None:  # the runner died: what the store holds of the run (runner.store.lost_run)
        newest = lost.newest_record_t
        until = f", the newest from {time.strftime('%H:%M:%S', time.localtime(newest))}" if newest else ""
        out.write(f"  stored:        {_count(lost.stored_metrics)} metric records, "
                  f"{_count(lost.stored_logs)} log lines{until}\n")
        if lost.not_stored:
            out.write(f"  not stored:    {lost.not_stored}\n")
    for hint in summary.hints:
        out.write(f"  hint: {hint.cause}\n        -> {hint.advice}\n")
    if run.id is not None:
        out.write(f"  details: rankwatch runs show {run.id}   logs: rankwatch runs logs {run.id}\n")
    out.flush()


def _write_first_failure(first: RankFailure, out: TextIO) -> None:
    how = how_it_ended(first.exit_code, first.signal)
    where = f" on {first.host}" if first.host else ""
    out.write(f"  first to fail: rank {first.rank}{where} ({how}; known from: {first.evidence})\n")
    if first.exception_line:
        out.write(f"  exception:     {first.exception_line}\n")
    traceback = (first.traceback or "").strip().splitlines()
    if traceback:
        source = first.traceback_source
        out.write(f"  traceback (last lines{', from ' + source if source and source != 'bootstrap' else ''}):\n")
        for line in traceback[-6:]:
            out.write(f"    {line}\n")
    if first.kernel_log:
        out.write(f"  kernel log:    {first.kernel_log}\n")


def _count(value: int | None) -> str:
    return MISSING if value is None else str(value)
