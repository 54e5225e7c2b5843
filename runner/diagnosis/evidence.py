"""Failure triage's evidence, collected while the run goes on: a hub observer.

Triage (``triage.triage``) looks at the run once it ended; what it needs happens
during the run and would be gone by then. ``TriageEvidence`` watches the hub and
keeps it in a ``TriageInput``:

* which ranks said hello, and each one's host; which sent any metric;
* each rank's first fatal exception (type, message, traceback, time);
* each rank's exit code and time, from the bootstrap's ``exit``;
* when a rank was lost without an exit (its connection dropped, its node was lost);
* the tail of each rank's stderr, and torchrun's own lines per node (its failure
  report is parsed from them at the end: ``conclude``).
"""

from __future__ import annotations

import time

from rankwatch.protocol import ExceptionReport, Exit, Hello, LogLine, Message, Metrics
from runner.diagnosis.torchrun_report import merge_reports, parse_torchrun_report
from runner.diagnosis.triage import TriageInput
from runner.hub.observer import HubObserver


class TriageEvidence(HubObserver):
    def __init__(self, data: TriageInput) -> None:
        self.data = data

    def on_hello(self, hello: Hello) -> None:
        self.data.seen.add(hello.rank)
        if hello.host:
            self.data.hosts[hello.rank] = hello.host

    def on_message(self, message: Message) -> None:
        data = self.data
        if isinstance(message, ExceptionReport):
            if message.fatal and message.rank not in data.exceptions:
                data.exceptions[message.rank] = {"t": message.t, "exc_type": message.exc_type,
                                                 "message": message.message, "traceback": message.traceback}
        elif isinstance(message, Exit):
            data.exits[message.rank] = (message.code, message.t or time.time())
        elif isinstance(message, Metrics) and message.records:
            data.measured.add(message.rank)

    def on_worker_lost(self, rank: int, t: float) -> None:
        self.data.lost.setdefault(rank, t)

    def on_log(self, line: LogLine) -> None:
        if line.rank is None:
            self.data.add_launcher_line(line.node or "", line.line)
        elif line.stream == "stderr":
            self.data.add_stderr(line.rank, line.line)

    def conclude(self) -> TriageInput:
        """The evidence for triage, with torchrun's failure report read from its lines on every node."""
        self.data.report = merge_reports(
            [parse_torchrun_report(list(lines)) for lines in self.data.launcher_lines.values()])
        return self.data
