"""A rank of a multi-rank job that trains without a process group says so once (``rankwatch._group_check``).

Real workers (the bootstrap, a fake hub): one rank of a WORLD_SIZE=2 job trains with
no process group, another makes one first; both run at once (``import torch`` costs
seconds per process).
"""

from __future__ import annotations

from types import SimpleNamespace

from worker_harness import FakeHub, start_worker, worker_environment

from rankwatch import _group_check
from rankwatch.protocol import NO_PROCESS_GROUP


def test_a_rank_without_a_process_group_says_so_at_its_fifth_step_and_one_with_a_group_does_not():
    with FakeHub() as hub:
        alone = start_worker(["group_steps.py"], worker_environment(hub.address, rank=0, world_size=2))
        grouped = start_worker(["group_steps.py", "--group"], worker_environment(hub.address, rank=1, world_size=2))
        for process, printed in ((alone, "trained False"), (grouped, "trained True")):
            stdout, stderr = process.communicate(timeout=90)
            assert process.returncode == 0 and printed in stdout, stderr
        hub.wait_for(lambda: len(hub.messages("exit")) == 2)
        notices = hub.messages("notice", key=NO_PROCESS_GROUP)
    assert len(notices) == 1  # once, though the rank made 8 steps
    notice = notices[0]
    assert notice["rank"] == 0
    assert (notice["steps"], notice["world_size"], notice["local_world_size"]) == (_group_check.CHECK_AT_STEP, 2, 2)
    assert "fabric" not in notice  # the script did not import Lightning Fabric


def test_only_ranks_of_a_multi_rank_job_with_telemetry_are_checked(monkeypatch):
    armed = []
    monkeypatch.setattr(_group_check._torch_hook, "call_when_imported", armed.append)

    def session(world_size: int) -> SimpleNamespace:
        return SimpleNamespace(environment=SimpleNamespace(world_size=world_size, local_world_size=world_size),
                               notice=lambda *args, **facts: None)

    _group_check.install(session(1))
    _group_check.install(None)  # telemetry off
    assert armed == []
    _group_check.install(session(2))
    assert len(armed) == 1
