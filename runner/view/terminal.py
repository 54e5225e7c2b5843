"""The terminal view of a run: `rankwatch run` and `rankwatch attach`.

It consumes the same hub->subscriber messages as the GUI (snapshot, update, bye),
in-process for `run` and over the socket for `attach`. On a terminal it keeps a
live table at the bottom (a row per rank) with the logs scrolling above it; when
stdout is not a terminal (CI, a pipe, a file) it prints plain prefixed lines only.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from runner.diagnosis.report import format_diagnostics
from runner.state import RankState

STATE_STYLE = {
    RankState.WAITING.value: "dim", RankState.RUNNING.value: "green", RankState.STALLED.value: "bold yellow",
    RankState.EXITED.value: "cyan", RankState.FAILED.value: "bold red", RankState.STOPPED.value: "magenta",
    RankState.LOST.value: "red",
}
PLAIN_STATUS_SECONDS = 30.0
NOTABLE_EVENTS = {"rank_failed", "stalled", "resumed", "straggler", "divergence", "node_lost", "warning", "refused",
                  "stopping", "connection_lost", "stacks", "launch_mismatch", "slurm", "slurm_submitted"}


def format_prefix(rank: int | None, node: str | None, multi_node: bool) -> str:
    if rank is None:
        return f"[{node} torchrun]" if multi_node and node else "[torchrun]"
    return f"[{node} rank {rank}]" if multi_node and node else f"[rank {rank}]"


def without_torch_prefix(line: str, rank: int | None) -> str:
    """torch's excepthook already prefixes "[rank1]: " to tracebacks; once is enough on screen."""
    if rank is not None:
        own = f"[rank{rank}]: "
        if line.startswith(own):
            return line[len(own):]
    return line


def _fmt(value: Any, pattern: str, scale: float = 1.0, empty: str = "-") -> str:
    if value is None:
        return empty
    try:
        return pattern.format(value * scale)
    except (TypeError, ValueError):
        return empty


def format_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return "-"


class TerminalView:
    """Render hub messages. ``live=None`` picks a live table when stdout is a terminal."""

    def __init__(self, live: bool | None = None, out: TextIO | None = None, err: TextIO | None = None,
                 multi_node: bool = False, status_every: float = PLAIN_STATUS_SECONDS):
        self.status_every = status_every
        """Plain mode: print one status line per rank this often (0: never)."""
        self._last_status = time.monotonic()
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live_mode = self.out.isatty() if live is None else live
        self.multi_node = multi_node
        self.ranks: dict[int, dict[str, Any]] = {}
        self.run: dict[str, Any] | None = None
        self.cpu_mode = True
        self.ended = False
        self._live = None
        self._console = None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.out)
            self._live = Live(self._table(), console=self._console, refresh_per_second=4, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()
            self._live = None

    # ---- messages --------------------------------------------------------------------

    def handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "snapshot":
            self.run = message.get("run")
            for row in message.get("ranks") or []:
                self.ranks[row["rank"]] = row
            if len(message.get("nodes") or []) > 1:
                self.multi_node = True
        elif kind == "update":
            self._on_update(message)
        elif kind == "bye":
            self.ended = True
            if self._live is None and self.status_every:
                self.print_status(final=True)  # plain mode: every rank's last state, once
        if self._live is not None:
            self._live.update(self._table())
        elif self.status_every and time.monotonic() - self._last_status >= self.status_every and not self.ended:
            self._last_status = time.monotonic()
            self.print_status()

    def print_status(self, final: bool = False) -> None:
        """Plain mode's stand-in for the live table: one line per running rank (``final``:
        every rank that made progress, whatever its state)."""
        for rank in sorted(self.ranks):
            row = self.ranks[rank]
            if row.get("step") is None or (not final and RankState(row.get("state", "waiting")).finished):
                continue
            usage = (f"cpu {_fmt(row.get('cpu_percent'), '{:.0f}')}%, rss {format_bytes(row.get('rss_bytes'))}"
                     if self.cpu_mode else
                     f"gpu {_fmt(row.get('gpu_index'), '{}')} {_fmt(row.get('gpu_util'), '{:.0f}')}%, "
                     f"mem {format_bytes(row.get('gpu_mem_used'))}")
            self._print_line("[rankwatch]", f"rank {rank} {row.get('state')}: step {row.get('step')}, "
                             f"loss {_fmt(row.get('loss'), '{:.4f}')}, {_fmt(row.get('step_time'), '{:.1f}', 1000)} ms/step, "
                             f"data wait {_fmt(row.get('data_wait_share'), '{:.0f}', 100)}%, "
                             f"{_fmt(row.get('samples_per_s'), '{:.0f}')} samples/s, {usage}", "stdout")

    def _on_update(self, message: dict[str, Any]) -> None:
        for rank, _t, stream, line, node in message.get("logs") or []:
            self._print_line(format_prefix(rank, node, self.multi_node), without_torch_prefix(line, rank), stream)
        for event in message.get("events") or []:
            if event.get("kind") in NOTABLE_EVENTS:
                self._print_line("[rankwatch]", event.get("message", ""), "stderr", style="yellow")
        for row in message.get("ranks") or []:
            self.ranks[row["rank"]] = row
            if row.get("gpu_index") is not None:
                self.cpu_mode = False
        if message.get("run"):
            self.run = message["run"]

    def _print_line(self, prefix: str, text: str, stream: str, style: str | None = None) -> None:
        if self._console is not None:
            from rich.text import Text

            line = Text(prefix + " ", style=style or ("red" if stream == "stderr" else "blue"))
            line.append(text)
            self._console.print(line, soft_wrap=True, highlight=False, markup=False)
        else:
            target = self.err if stream == "stderr" else self.out
            target.write(f"{prefix} {text}\n")
            target.flush()

    # ---- the table -------------------------------------------------------------------

    def _table(self):
        from rich.table import Table

        run = self.run or {}
        title = f"run {run.get('id', '?')} · {run.get('profile') or ''} · {run.get('status', 'starting')}"
        table = Table(title=title, title_justify="left", expand=False, header_style="bold")
        columns = ["rank", *(["host"] if self.multi_node else []), "state", "step", "loss", "step ms",
                   "data wait", "samples/s"]
        columns += ["CPU %", "RSS"] if self.cpu_mode else ["GPU", "GPU %", "GPU mem"]
        columns += ["heartbeat"]
        for name in columns:
            table.add_column(name, justify="left" if name in ("host", "state") else "right")
        now = time.time()
        for rank in sorted(self.ranks):
            row = self.ranks[rank]
            age = now - row["last_seen"] if row.get("last_seen") else None
            cells = [str(rank), *([row.get("host") or "-"] if self.multi_node else []),
                     f"[{STATE_STYLE.get(row.get('state'), '')}]{row.get('state')}[/]",
                     _fmt(row.get("step"), "{:.0f}"), _fmt(row.get("loss"), "{:.4f}"),
                     _fmt(row.get("step_time"), "{:.1f}", 1000), _fmt(row.get("data_wait_share"), "{:.0f}%", 100),
                     _fmt(row.get("samples_per_s"), "{:.0f}")]
            if self.cpu_mode:
                cells += [_fmt(row.get("cpu_percent"), "{:.0f}"), format_bytes(row.get("rss_bytes"))]
            else:
                cells += [_fmt(row.get("gpu_index"), "{}"), _fmt(row.get("gpu_util"), "{:.0f}"),
                          format_bytes(row.get("gpu_mem_used"))]
            cells.append(_fmt(age, "{:.0f} s") if not RankState(row.get("state", "waiting")).finished else "-")
            table.add_row(*cells)
        return table


def render_summary(run: dict[str, Any], out: TextIO) -> None:
    """The block printed at the end of a run: outcome, first failure, hints, where to look."""
    summary = run.get("summary") or {}
    status = run.get("status")
    width = 72
    out.write("\n" + f"── Rankwatch · run {run.get('id')} {status} (exit code {run.get('exit_code')}) ".ljust(width, "─") + "\n")
    if summary.get("headline"):
        out.write(f"{summary['headline']}\n")
    first = summary.get("first_failure")
    if first:
        how = []
        if first.get("exit_code") is not None:
            how.append(f"exit code {first['exit_code']}")
        if first.get("signal"):
            how.append(first["signal"])
        where = f" on {first['host']}" if first.get("host") else ""
        out.write(f"  first to fail: rank {first['rank']}{where} ({', '.join(how) or 'no exit code'};"
                  f" known from: {first.get('evidence')})\n")
        if first.get("exception_line"):
            out.write(f"  exception:     {first['exception_line']}\n")
        traceback = (first.get("traceback") or "").strip().splitlines()
        if traceback:
            source = first.get("traceback_source")
            out.write(f"  traceback (last lines{', from ' + source if source and source != 'bootstrap' else ''}):\n")
            for line in traceback[-6:]:
                out.write(f"    {line}\n")
        if first.get("kernel_log"):
            out.write(f"  kernel log:    {first['kernel_log']}\n")
    others = summary.get("other_failures") or []
    if others:
        described = []
        for other in others[:8]:
            what = other.get("signal") or (f"exit {other['exit_code']}" if other.get("exit_code") is not None else other.get("evidence"))
            described.append(f"rank {other['rank']} ({what})")
        out.write(f"  then:          {', '.join(described)}{' ...' if len(others) > 8 else ''}\n")
    for line in format_diagnostics(summary.get("diagnostics"), run.get("id")):
        out.write(line + "\n")
    for hint in summary.get("hints") or []:
        out.write(f"  hint: {hint['cause']}\n        -> {hint['advice']}\n")
    if run.get("id") is not None:
        out.write(f"  details: rankwatch runs show {run['id']}   logs: rankwatch runs logs {run['id']}\n")
    out.flush()
