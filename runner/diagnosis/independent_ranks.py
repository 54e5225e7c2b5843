"""Ranks that train without a process group: copies of one training, or ranks that each train alone.

torchrun starts ``WORLD_SIZE`` processes; only the script makes them one job. When its
ranks never make a process group (``no_process_group`` notices, ``rankwatch._group_check``,
sent at a rank's 5th optimizer step), each trains by itself and nothing fails. This
monitor compares the losses those ranks report for their first ``LOSS_STEPS`` steps and
says which of two things happens:

* **copies** (a warning): ranks report the same loss at every step compared: each one
  repeats the same whole training (the same model, the same data), the job does one
  process's work N times over. Lightning Fabric does this under torchrun when ``Fabric()``
  is left to pick its devices (one per process, ``SingleDeviceStrategy``), so when the
  script uses Fabric the advice says how Fabric wants to be launched;
* **alone** (information, no error): their losses differ: each rank trains a model of its
  own, which may well be the intent (a sweep, an ensemble); said calmly, as a fact.

Where no loss was measured the finding says only what is known (no process group), as
information -- except under Fabric, whose world of 1 on every rank is evidence enough.

The decision waits until every rank of the job sent its notice and the compared steps'
losses are in, or ``SETTLE_SECONDS`` after the first notice, or the job's end
(``conclude``). One ``launch_mismatch`` event (key ``no_process_group``) when decided;
``Findings.launcher`` holds the latest wording, from all the evidence at the job's end, for
the summary's hints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from rankwatch.protocol import LOSS, NO_PROCESS_GROUP, EventKind, Message, Metrics, Notice
from runner.diagnosis.findings import Findings, LauncherFinding, NoticeReport
from runner.diagnosis.hints import HintKey
from runner.format import ranks_text
from runner.hub.observer import HubObserver

LOSS_STEPS = 16
"""The first steps whose losses are kept per rank and compared."""
MIN_COMPARED = 3
"""Fewer common steps than this tell nothing about identical work."""
SETTLE_SECONDS = 5.0
RELATIVE = 1e-6
"""Losses this close are the same computation (bit-identical on a CPU; a GPU's kernels may differ
in the last bits)."""
WARNING, INFO = "warning", "info"


def same_losses(first: dict[tuple[str, int], float], second: dict[tuple[str, int], float], steps: list) -> bool:
    return all(math.isclose(first[step], second[step], rel_tol=RELATIVE, abs_tol=1e-12) for step in steps)


def copy_groups(losses: dict[int, dict[tuple[str, int], float]]) -> tuple[list[list[int]], int]:
    """(groups of ranks whose losses are the same at every step they all report, steps compared).

    Steps compared: those every rank reported (same source and step). No groups when fewer
    than ``MIN_COMPARED``; a group holds at least two ranks."""
    ranks = sorted(losses)
    common = set.intersection(*(set(losses[rank]) for rank in ranks)) if ranks else set()
    steps = sorted(common, key=lambda key: (key[1], key[0]))
    if len(steps) < MIN_COMPARED:
        return [], len(steps)
    groups: list[list[int]] = []
    for rank in ranks:
        group = next((g for g in groups if same_losses(losses[g[0]], losses[rank], steps)), None)
        if group is None:
            groups.append([rank])
        else:
            group.append(rank)
    return [group for group in groups if len(group) > 1], len(steps)


def fabric_advice(facts: NoticeReport, world_size: int, local_world_size: int) -> str:
    """How Fabric wants to be told that torchrun launched it (``lightning_fabric.connector``: ``Fabric()``
    reads ``LT_*``; ``fabric run`` sets ``LT_CLI_USED=1``, with which ``Fabric()`` joins the group
    itself and refuses ``fabric.launch()``)."""
    accelerator = facts.get("fabric_accelerator") or "cpu"
    if accelerator not in ("cpu", "cuda", "gpu", "mps"):
        accelerator = "cpu"
    devices = max(1, local_world_size)
    nodes = max(1, world_size // devices)
    settings = [f"LT_ACCELERATOR={accelerator}", f"LT_DEVICES={devices}", "LT_STRATEGY=ddp"]
    if nodes > 1:
        settings.append(f"LT_NUM_NODES={nodes}")
    in_code = (f"Fabric(accelerator=\"{accelerator}\", devices={devices}, strategy=\"ddp\""
               f"{f', num_nodes={nodes}' if nodes > 1 else ''})")
    if facts.get("fabric_launched"):
        flags = " ".join(f"--env {setting}" for setting in settings)
        return (f"tell Fabric that torchrun started {world_size} processes: in the code, {in_code} before "
                f"fabric.launch() (under torchrun launch() starts no process, it joins torchrun's); or without "
                f"changing the code, `rankwatch run --nproc-per-node {devices} {flags} SCRIPT` (or these in the "
                "profile's [env]); not "
                "LT_CLI_USED=1, which `fabric run` sets but with which Fabric refuses the script's fabric.launch()")
    flags = " ".join(f"--env {setting}" for setting in ["LT_CLI_USED=1", *settings])
    return (f"launch it the way `fabric run` does, which sets Fabric's environment and runs torchrun: "
            f"`rankwatch run --nproc-per-node {devices} {flags} SCRIPT` (or these in the profile's [env]); "
            f"Fabric() then joins torchrun's processes in one DDP job; or in the code: {in_code} followed "
            "by fabric.launch(), which under torchrun starts no process")


def describe(reports: dict[int, NoticeReport], losses: dict[int, dict[tuple[str, int], float]],
             world_size: int | None) -> LauncherFinding:
    """The finding for the ranks that reported no process group."""
    ranks = sorted(reports)
    first = reports[ranks[0]]
    world = world_size or _int(first.get("world_size")) or len(ranks)
    local_world = _int(first.get("local_world_size")) or world
    steps = _int(first.get("steps"))
    by_step = f"by {{}} {_ordinal(steps)} optimizer step" if steps else "while {} trained"
    groups, compared = copy_groups({rank: losses.get(rank, {}) for rank in ranks})
    copies = sorted(rank for group in groups for rank in group)
    measured = compared >= MIN_COMPARED
    fabric = next((reports[rank] for rank in ranks if reports[rank].get("fabric")), None)
    every = "no rank" if len(ranks) >= world else f"none of {ranks_text(ranks)}"
    lead = (f"torchrun started {world} processes (WORLD_SIZE={world}), but {every} had a process group "
            f"{by_step.format('its' if steps else 'it')}")
    calm_lead = (f"{ranks_text(ranks)} of this torchrun job (WORLD_SIZE={world}) had no process group "
                 f"{by_step.format('their' if steps else 'they')}")
    if copies:
        level = WARNING
        alike = "all" if len(copies) == len(ranks) else ranks_text(copies)
        what = f"train {len(copies)} independent copies of one training"
        evidence = "no process group, identical losses"
        cause = (f"{lead}, and {alike} report identical losses at the {compared} steps compared: each trains the "
                 "whole model on the same data by itself, nothing is shared between them, and the job does the "
                 f"work of one process {len(copies)} times over")
    elif measured:
        level = INFO
        what, evidence = "each train on their own", "no process group, their losses differ"
        cause = (f"{calm_lead}, and their losses differ at the {compared} steps compared: each rank trains a model of "
                 "its own, with nothing averaged between them")
    else:
        level = INFO
        what, evidence = "each train on their own", "no process group"
        cause = (f"{calm_lead}: each rank trains by itself; their losses were not measured, so whether they repeat "
                 "each other's work is not known")
    title = f"{ranks_text(copies or ranks)} {what}: {evidence}"
    advice = ("to train one model on all ranks, call torch.distributed.init_process_group() (torchrun's "
              "environment gives the rank and world size), wrap the model in DistributedDataParallel and give "
              "each rank its share of the data (DistributedSampler)")
    if copies:
        advice += "; if one process is what you want, run it with --nproc-per-node 1"
    else:
        advice = f"nothing to do if that is the intent (a sweep, an ensemble, one experiment per rank); {advice}"
    if fabric is not None:
        level = WARNING
        strategy = fabric.get("fabric_strategy")
        fabric_world = _int(fabric.get("fabric_world_size"))
        sees = (f", which counts a world of {fabric_world} on every rank ({strategy})" if fabric_world and strategy
                else "")
        one_device = (" (one device per process: what Fabric() picks with its accelerator, devices and strategy "
                      "left to 'auto')" if fabric_world == 1 else "")
        cause += (f"; the script uses Lightning Fabric{sees}: Fabric() was not told how many processes torchrun "
                  f"started{one_device}")
        runs = f"{len(copies)} independent copies" if copies else f"{len(ranks)} separate trainings"
        title = f"Lightning Fabric runs {runs} under torchrun: {evidence}"
        advice = fabric_advice(fabric, world, local_world)
    return LauncherFinding(key=HintKey.NO_PROCESS_GROUP.value, level=level, ranks=ranks, title=title, cause=cause,
                           advice=advice)


class IndependentRanks(HubObserver):
    """Collects ``no_process_group`` notices and the first losses of every rank; decides in ``tick``."""

    def __init__(self, hub, findings: Findings, clock: Callable[[], float] = time.monotonic):
        self.hub = hub
        self.findings = findings
        self.clock = clock
        self.reports: dict[int, NoticeReport] = {}
        self.losses: dict[int, dict[tuple[str, int], float]] = {}
        """rank -> {(source, step): loss} of its first ``LOSS_STEPS`` steps."""
        self.past_first_steps: set[int] = set()
        self.first_notice: float | None = None
        self.published: LauncherFinding | None = None

    def on_message(self, message: Message) -> None:
        if isinstance(message, Metrics):
            self._take_losses(message)
        elif isinstance(message, Notice) and message.key == NO_PROCESS_GROUP:
            self.reports[message.rank] = {"t": message.t, **message.facts}
            if self.first_notice is None:
                self.first_notice = self.clock()

    def _take_losses(self, message: Metrics) -> None:
        if message.rank in self.past_first_steps:
            return  # this rank's first steps are all in: nothing more to look at
        kept = self.losses.setdefault(message.rank, {})
        for _rank, _t, step, name, value, source in message.records:
            if step is None:
                continue
            if step >= LOSS_STEPS:
                self.past_first_steps.add(message.rank)  # records come in step order
            elif name == LOSS and value is not None:
                kept[(source, step)] = value

    def tick(self, now: float) -> None:
        if self.first_notice is None or len(self.reports) < 2:
            return
        if self.published is not None:
            if len(self.reports) > len(self.published.ranks):
                self._decide()  # a late rank: the summary names it too (no second event)
            return
        waited = self.clock() - self.first_notice >= SETTLE_SECONDS
        if waited or (len(self.reports) >= self._world_size() and self._losses_in()):
            self._decide()

    def conclude(self) -> None:
        """The job ended: decide (again, for the summary) with every loss and notice that came."""
        if len(self.reports) >= 2:
            self._decide()

    def _world_size(self) -> int:
        sizes = [row.world_size for row in self.hub.model.ranks.values() if row.world_size]
        sizes += [_int(report.get("world_size")) or 0 for report in self.reports.values()]
        return max(sizes) if sizes else 0

    def _losses_in(self) -> bool:
        """Every reporting rank sent the losses of the steps before its notice (or of ``LOSS_STEPS``)."""
        for rank, report in self.reports.items():
            wanted = min(LOSS_STEPS, _int(report.get("steps")) or LOSS_STEPS)
            if len({step for _source, step in self.losses.get(rank, {})}) < wanted:
                return False
        return True

    def _decide(self) -> None:
        record = describe(self.reports, self.losses, self._world_size() or None)
        self.findings.set_launcher(NO_PROCESS_GROUP, record)
        first_time = self.published is None
        self.published = record
        if first_time:
            rank = record.ranks[0]
            self.hub.add_event(EventKind.LAUNCH_MISMATCH, rank, f"{record.cause}. What to do: {record.advice}",
                               key=NO_PROCESS_GROUP, level=record.level, ranks=record.ranks,
                               title=record.title, cause=record.cause, advice=record.advice)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
