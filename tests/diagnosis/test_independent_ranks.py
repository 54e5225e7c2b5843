"""Ranks without a process group: copies of one training (a warning) or each on its own (calmly said).

The monitor (``runner.diagnosis.independent_ranks``) is fed the messages a real job
sends: each rank's ``metrics`` (its losses) and its ``no_process_group`` notice at
its 5th optimizer step, with the facts ``rankwatch._group_check`` collects -- the
Fabric ones as a plain ``Fabric()`` under torchrun gives them (2.6: SingleDeviceStrategy,
a world of 1). The real Fabric job is in tests/integration/test_frameworks.py.
"""

from __future__ import annotations

import time

from rankwatch import protocol
from runner.diagnosis.findings import Findings
from runner.diagnosis.independent_ranks import LOSS_STEPS, SETTLE_SECONDS, IndependentRanks
from runner.diagnosis.triage import TriageInput, triage
from tests.diagnosis.fakes import FakeHub

FABRIC_FACTS = {"fabric": "lightning_fabric", "fabric_strategy": "SingleDeviceStrategy", "fabric_world_size": 1,
                "fabric_accelerator": "cpu", "fabric_launched": False}


class Job:
    """A hub with ``world_size`` ranks said hello, the monitor, and a clock the test moves."""

    def __init__(self, world_size: int = 2, local_world_size: int | None = None):
        self.hub = FakeHub()
        self.findings = Findings()
        self.now = [100.0]
        self.world_size = world_size
        self.local_world_size = local_world_size or world_size
        for rank in range(world_size):
            self.hub.hello(rank, pid=1000 + rank, world_size=world_size)
        self.monitor = IndependentRanks(self.hub, self.findings, clock=lambda: self.now[0])

    def losses(self, rank: int, values: list[float], first_step: int = 0) -> None:
        items = [[time.time(), first_step + index, "loss", value, "auto"] for index, value in enumerate(values)]
        self.monitor.on_message(protocol.Metrics(rank, protocol.metric_records(rank, items, {})))

    def notice(self, rank: int, **facts) -> None:
        facts = {"steps": 5, "world_size": self.world_size, "local_world_size": self.local_world_size, **facts}
        self.monitor.on_message(protocol.Notice(rank, time.time(), protocol.NO_PROCESS_GROUP, facts))

    def tick(self, seconds: float = 0.5) -> None:
        self.now[0] += seconds
        self.monitor.tick(self.now[0])

    def events(self) -> list[dict]:
        return self.hub.of_kind(protocol.EventKind.LAUNCH_MISMATCH)

    def finding(self) -> dict:
        """The launcher finding, as the run's summary keeps it."""
        return self.findings.launcher[protocol.NO_PROCESS_GROUP].to_json()


LOSSES = [0.9, 0.71, 0.55, 0.43, 0.35, 0.3]


def test_ranks_with_identical_losses_and_no_group_are_named_independent_copies():
    job = Job()
    for rank in (0, 1):
        job.losses(rank, LOSSES)
        job.notice(rank)
    job.tick()
    [event] = job.events()
    assert event["key"] == protocol.NO_PROCESS_GROUP and event["level"] == "warning"
    assert event["ranks"] == [0, 1]
    assert event["title"] == ("ranks 0, 1 train 2 independent copies of one training: no process group, "
                              "identical losses")
    assert event["cause"].startswith("torchrun started 2 processes (WORLD_SIZE=2), but no rank had a process group "
                                     "by its 5th optimizer step, and all report identical losses at the 6 steps "
                                     "compared")
    assert "init_process_group" in event["advice"] and "--nproc-per-node 1" in event["advice"]
    assert "Fabric" not in event["message"]  # the script did not import it
    assert job.finding()["title"] == event["title"]


def test_ranks_that_each_train_their_own_model_get_a_calm_statement_not_a_warning():
    job = Job()
    job.losses(0, LOSSES)
    job.losses(1, [value * 1.3 for value in LOSSES])
    for rank in (0, 1):
        job.notice(rank)
    job.tick()
    [event] = job.events()
    assert event["level"] == "info"
    assert event["title"] == "ranks 0, 1 each train on their own: no process group, their losses differ"
    assert event["cause"].startswith("ranks 0, 1 of this torchrun job (WORLD_SIZE=2) had no process group by their "
                                     "5th optimizer step, and their losses differ at the 6 steps compared")
    assert event["advice"].startswith("nothing to do if that is the intent")
    summary = triage(TriageInput(findings=job.findings, seen={0, 1}, measured={0, 1}, instrumented=True), 0,
                     stopped=False)
    assert summary["headline"] == "all ranks finished"  # a fact in the hints, not a problem
    assert [hint["key"] for hint in summary["hints"]] == [protocol.NO_PROCESS_GROUP]


def test_only_the_ranks_that_repeat_each_other_are_named_copies():
    job = Job(world_size=4)
    for rank in range(4):
        job.losses(rank, [value * (1.0 if rank in (0, 2) else 1.0 + rank / 10) for value in LOSSES])
        job.notice(rank)
    job.tick()
    [event] = job.events()
    assert event["level"] == "warning" and event["ranks"] == [0, 1, 2, 3]
    assert event["title"].startswith("ranks 0, 2 train 2 independent copies")
    assert "and ranks 0, 2 report identical losses" in event["cause"]


def test_without_measured_losses_only_what_is_known_is_said():
    job = Job()
    for rank in (0, 1):
        job.notice(rank)
    job.tick()
    assert job.events() == []  # the losses may still be on their way
    job.tick(SETTLE_SECONDS)
    [event] = job.events()
    assert event["level"] == "info"
    assert event["title"] == "ranks 0, 1 each train on their own: no process group"
    assert "their losses were not measured, so whether they repeat each other's work is not known" in event["cause"]


def test_the_finding_waits_for_every_rank_and_for_the_losses_before_the_notice():
    job = Job()
    job.losses(0, LOSSES)
    job.notice(0)
    job.tick()
    assert job.events() == []  # one rank is no job of independent ranks yet
    job.losses(1, LOSSES[:2])
    job.notice(1)
    job.tick()
    assert job.events() == []  # rank 1's steps 2-4 are on their way
    job.losses(1, LOSSES[2:], first_step=2)
    job.tick()
    assert len(job.events()) == 1 and job.events()[0]["level"] == "warning"


def test_one_event_and_the_summary_takes_the_evidence_at_the_end():
    job = Job()
    for rank in (0, 1):
        job.losses(rank, LOSSES[:5])
        job.notice(rank)
    job.tick()
    for rank in (0, 1):
        job.losses(rank, [0.2] * 8, first_step=5)
    job.tick()
    job.monitor.conclude()
    assert len(job.events()) == 1
    assert "at the 5 steps compared" in job.events()[0]["cause"]
    assert "at the 13 steps compared" in job.finding()["cause"]


def test_a_plain_fabric_under_torchrun_is_told_how_fabric_wants_to_be_launched():
    job = Job()
    for rank in (0, 1):
        job.losses(rank, LOSSES)
        job.notice(rank, **FABRIC_FACTS, fabric_environment=None)
    job.tick()
    [event] = job.events()
    assert event["level"] == "warning"
    assert event["title"] == ("Lightning Fabric runs 2 independent copies under torchrun: no process group, "
                              "identical losses")
    assert ("the script uses Lightning Fabric, which counts a world of 1 on every rank (SingleDeviceStrategy): "
            "Fabric() was not told how many processes torchrun started") in event["cause"]
    assert ("`rankwatch run --nproc-per-node 2 --env LT_CLI_USED=1 --env LT_ACCELERATOR=cpu --env LT_DEVICES=2 "
            "--env LT_STRATEGY=ddp SCRIPT`") in event["advice"]
    assert 'Fabric(accelerator="cpu", devices=2, strategy="ddp") followed by fabric.launch()' in event["advice"]


def test_a_fabric_script_that_calls_launch_is_not_told_to_set_lt_cli_used():
    # Fabric refuses fabric.launch() when LT_CLI_USED=1 (lightning_fabric.fabric.Fabric.launch)
    job = Job(world_size=4, local_world_size=2)
    for rank in range(4):
        job.losses(rank, [value + rank for value in LOSSES])  # seeded by rank: losses differ
        job.notice(rank, **{**FABRIC_FACTS, "fabric_launched": True, "fabric_accelerator": "cuda"})
    job.tick()
    [event] = job.events()
    assert event["level"] == "warning"  # Fabric thinks each rank is the whole job, whatever the losses
    assert event["title"] == "Lightning Fabric runs 4 separate trainings under torchrun: no process group, their losses differ"
    advice = event["advice"]
    assert "LT_CLI_USED=1, which `fabric run` sets but with which Fabric refuses the script's fabric.launch()" in advice
    assert ("`rankwatch run --nproc-per-node 2 --env LT_ACCELERATOR=cuda --env LT_DEVICES=2 --env LT_STRATEGY=ddp "
            "--env LT_NUM_NODES=2 SCRIPT`") in advice
    assert 'Fabric(accelerator="cuda", devices=2, strategy="ddp", num_nodes=2) before fabric.launch()' in advice


def test_a_single_notice_or_other_notices_say_nothing():
    job = Job()
    job.monitor.on_message(protocol.Notice(0, time.time(), "self_spawn", {}))
    job.notice(1)
    job.tick(SETTLE_SECONDS * 2)
    job.monitor.conclude()
    assert job.events() == [] and job.findings.launcher == {}


def test_only_the_first_steps_losses_are_kept_and_later_batches_are_not_read():
    job = Job()
    job.losses(0, [float(step) for step in range(40)])
    assert sorted(step for _source, step in job.monitor.losses[0]) == list(range(LOSS_STEPS))
    job.losses(0, [99.0], first_step=3)  # a later batch of this rank is not even looked at
    assert job.monitor.losses[0][("auto", 3)] == 3.0
