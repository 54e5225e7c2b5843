"""Launcher mismatches: a script that does not fit the way torchrun starts it, named while it runs.

torchrun starts one process per rank and passes each its rank in the environment.
Scripts written for another launcher break under it in ways that look like hangs
or unrelated errors; this monitor collects the evidence as it appears and words
one diagnosis per mismatch (what happens, what to do):

* ``self_spawn`` (a worker ``notice``, ``rankwatch._launch_checks``): the script
  starts its own processes with ``torch.multiprocessing.spawn``;
* ``local_rank_unpassed`` (a ``notice``): the script declares ``--local_rank`` but
  nothing passes it, so every rank parsed the same value;
* ``local_rank_spelling`` (a ``notice``, informational): the legacy option passed
  ``--local-rank``, the spelling the script declares, instead of ``--local_rank``;
* an exception that says ``EADDRINUSE``: the port's holder is looked up at once,
  while it still holds the port (after the run it is gone), and matched to this
  run's ranks by pid -- so the duplicate ``--rank`` hint (``hints``) can say that
  the holder is rank 0 of this very run rather than "a leftover".

Each mismatch is one ``launch_mismatch`` event (the first time it is seen) and one
record in ``Findings.launcher`` (every rank that showed it), which triage turns
into the summary's hints (``hints.launcher_hint``).

Events (``EVENT`` in ``rankwatch.protocol``)::

    launch_mismatch {message, key, level ("warning" | "info"), ranks, title, cause, advice}
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from rankwatch.protocol import EventKind, ExceptionReport, Message, Notice
from runner.diagnosis.findings import Findings, LauncherFinding, NoticeReport
from runner.diagnosis.hints import HintKey, RunPortHolder
from runner.diagnosis.triage import TriageInput
from runner.format import ranks_text
from runner.hub.observer import HubObserver
from runner.launch.ports import PortHolder, port_holder

SELF_SPAWN, LOCAL_RANK_UNPASSED, LOCAL_RANK_SPELLING = (HintKey.SELF_SPAWN, HintKey.LOCAL_RANK_UNPASSED,
                                                        HintKey.LOCAL_RANK_SPELLING)
ADDRESS_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
PORT = re.compile(r"port[:= ]+(\d{2,5})")


def _where(record: NoticeReport) -> str:
    file, line = record.get("file"), record.get("line")
    if not file:
        return ""
    return f" at {os.path.basename(str(file))}:{line} in {record.get('function_name') or '?'}"


def describe_self_spawn(reports: dict[int, NoticeReport]) -> tuple[str, str, str]:
    """(title, cause, advice) for ranks that start their own ranks under torchrun (``torch.multiprocessing.spawn``,
    or a ``multiprocessing.Process`` whose target calls ``init_process_group``)."""
    ranks = sorted(reports)
    first = reports[ranks[0]]
    function = str(first.get("function") or "torch.multiprocessing.spawn")
    nprocs = first.get("nprocs")
    count = f" {nprocs} more processes each" if isinstance(nprocs, int) else " more processes"
    verb = "starts its" if len(ranks) == 1 else "start their"
    title = f"{ranks_text(ranks)} {verb} own processes with {function} under torchrun"
    cause = (f"{ranks_text(ranks)} {verb} own processes with {function}"
             f"{_where(first)} under torchrun, which already started one process per rank; that makes{count}, "
             "and they inherit torchrun's TORCHELASTIC_USE_AGENT_STORE=True, so their init_process_group waits "
             "for torchrun's store at MASTER_ADDR:MASTER_PORT: a store that is not there when the script sets its "
             "own MASTER_PORT (a hang), or torchrun's own, shared with clashing ranks (errors)")
    script = os.path.basename(str(first.get("file") or "")) or "the script"
    instead = "starting a Process per rank" if function.endswith(".Process") else "mp.spawn"
    advice = (f"let it start its own ranks: launch mode self-spawn (`rankwatch run --launch-mode self-spawn "
              f"{script}`; profile: launch_mode = \"self-spawn\"; auto picks it unless torchrun is chosen) starts "
              "it once and watches the processes it spawns as ranks; or make it a torchrun script: call the worker "
              f"function once instead of {instead}, with rank=int(os.environ['RANK']) and world_size=int(os.environ['WORLD_SIZE']), and "
              "leave MASTER_ADDR/MASTER_PORT to torchrun")
    return title, cause, advice


def describe_local_rank_unpassed(reports: dict[int, NoticeReport]) -> tuple[str, str, str]:
    """(title, cause, advice) for a script that declares ``--local_rank`` that nobody passes."""
    ranks = sorted(reports)
    option = reports[ranks[0]].get("option") or "--local_rank"
    values = sorted({repr(reports[rank].get("value")) for rank in ranks})
    parsed = (f"{ranks_text(ranks)} parsed {option} = {values[0]}" if len(values) == 1
              else f"{ranks_text(ranks)} parsed {option} = " + ", ".join(repr(reports[r].get('value')) for r in ranks))
    local = ", ".join(str(reports[rank].get("local_rank")) for rank in ranks)
    title = f"the script declares {option}, which nobody passes: {parsed}"
    value = reports[ranks[0]].get("value")
    if len(values) > 1:
        effect = "so ranks do not get their own local rank"
    elif value == -1:
        effect = "and such scripts usually take -1 as \"not launched distributed\": every rank may run alone"
    elif isinstance(value, int):
        effect = f"so every rank uses local rank {value} (on GPUs: all on cuda:{value})"
    else:
        effect = "so no rank gets its own local rank"
    cause = (f"the script declares {option} (torch.distributed.launch's argument), but nothing passes it: torchrun "
             f"gives the local rank in LOCAL_RANK and the legacy --local_rank option is off; {parsed} while "
             f"{'its' if len(ranks) == 1 else 'their'} LOCAL_RANK is {local}, {effect}")
    advice = ("turn on the legacy option (--legacy-local-rank; profile: legacy_local_rank = true) so each rank gets "
              f"its own {option}, or read int(os.environ['LOCAL_RANK']) in the script; if the script already takes "
              "its device from LOCAL_RANK, this is harmless")
    return title, cause, advice


def describe_local_rank_spelling(reports: dict[int, NoticeReport]) -> tuple[str, str, str]:
    ranks = sorted(reports)
    first = reports[ranks[0]]
    passed, instead = first.get("passed") or "--local-rank", first.get("instead_of") or "--local_rank"
    cause = (f"the script takes {passed} (the spelling torch >= 2.0's launch passes), not {instead}: the legacy "
             f"option passed {passed}=<LOCAL_RANK> to {ranks_text(ranks)}")
    advice = "nothing to do; to accept both spellings: parser.add_argument('--local-rank', '--local_rank', type=int)"
    return f"the legacy option passed {passed}, the spelling the script takes", cause, advice


DESCRIBE: dict[str, tuple[str, Callable[[dict[int, NoticeReport]], tuple[str, str, str]]]] = {
    SELF_SPAWN: ("warning", describe_self_spawn),
    LOCAL_RANK_UNPASSED: ("warning", describe_local_rank_unpassed),
    LOCAL_RANK_SPELLING: ("info", describe_local_rank_spelling),
}


class LaunchChecks(HubObserver):
    """Collects launcher-mismatch evidence from worker messages. Monitor-shaped (``tick``) and a hub observer."""

    def __init__(self, hub, findings: Findings, triage_input: TriageInput,
                 is_local: Callable[[Any], bool] = lambda row: True,
                 holder_lookup: Callable[[int], PortHolder] = port_holder):
        self.hub = hub
        self.is_local = is_local
        self.findings = findings
        self.triage_input = triage_input
        self.holder_lookup = holder_lookup
        self._reports: dict[str, dict[int, NoticeReport]] = {}

    def tick(self, now: float) -> None:
        pass

    def on_message(self, message: Message) -> None:
        if isinstance(message, Notice):
            self._on_notice(message.rank, message)
        elif isinstance(message, ExceptionReport) and ADDRESS_IN_USE.search(message.message or ""):
            self._note_port_holder(message.message or "")

    def _on_notice(self, rank: int, message: Notice) -> None:
        key = message.key
        if key not in DESCRIBE:
            return
        reports = self._reports.setdefault(key, {})
        first_time = not reports
        reports[rank] = {"t": message.t, **message.facts}
        level, describe = DESCRIBE[key]
        title, cause, advice = describe(reports)
        self.findings.set_launcher(key, LauncherFinding(key=key, level=level, ranks=sorted(reports), title=title,
                                                        cause=cause, advice=advice))
        if first_time:
            self.hub.add_event(EventKind.LAUNCH_MISMATCH, rank, f"{cause}. What to do: {advice}", key=key, level=level,
                               ranks=[rank], title=title, cause=cause, advice=advice)

    def _note_port_holder(self, text: str) -> None:
        """Who holds the port now, while the run's own holder is still alive."""
        found = PORT.search(text)
        if found is None:
            return
        port = int(found.group(1))
        if port in self.triage_input.port_holders:
            return
        holder = self.holder_lookup(port)
        if holder.pid is None:
            return
        rank = next((row.rank for row in self.hub.model.ranks.values()
                     if row.pid == holder.pid and self.is_local(row)), None)
        self.triage_input.port_holders[port] = RunPortHolder(pid=holder.pid, command=holder.command, rank=rank)
