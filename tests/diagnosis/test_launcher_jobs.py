"""Scripts that do not fit torchrun, run under it for real (torchrun, gloo, CPU): each gets the right diagnosis.

One short job per mismatch (``tests/scripts/diag_*.py``), about 5-10 s each on an
idle machine: a script that starts its own ranks with ``torch.multiprocessing.spawn``
(a hang, stopped with Ctrl-C), one that takes ``--rank/--world_size/--init_method``
and is given the same ones in every process, one that requires ``--local-rank``
run with the legacy option, one with a ``--local_rank`` default run without it.
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from runner.store.store import RunStore
from tests.diagnosis.test_diagnosis_jobs import marked_line, stored, summary_block
from tests.jobs import (
    SCRIPTS,
    latest_run,
    processes_with_marker,
    rankwatch,
    start_rankwatch,
    wait_for,
)

pytestmark = pytest.mark.torchrun


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_script_that_spawns_its_own_ranks_under_torchrun_is_named_at_once_with_what_to_do():
    script = SCRIPTS / "diag_self_spawn.py"
    env = {**os.environ, "DIAG_PORT": str(free_port())}
    runner = start_rankwatch("run", "--plain", "--launch-mode", "torchrun", "--nproc-per-node", "2", str(script),
                             env=env)
    try:
        run = wait_for(lambda: latest_run(), 30, what="the run to be recorded")

        def mismatch():
            return [e for e in stored(run.id)[1] if e.kind == "launch_mismatch"]
        [event] = wait_for(mismatch, 90, interval=0.3, what="the launch_mismatch event")
    finally:
        runner.send_signal(signal.SIGINT)
        _out, err = runner.communicate(timeout=60)
    data = event.fields
    assert data["key"] == "self_spawn" and data["level"] == "warning" and event.rank in (0, 1)
    line = marked_line(script, "SPAWN")
    assert data["cause"].startswith(f"rank {event.rank} starts its own processes with torch.multiprocessing.spawn "
                                    f"at diag_self_spawn.py:{line} in <module> under torchrun")
    assert "TORCHELASTIC_USE_AGENT_STORE=True" in data["cause"]
    assert f"[rankwatch] {data['cause']}" in err  # printed live, not only at the end
    block = summary_block(err)
    assert "stopped on request; rank" in block and "own processes with torch.multiprocessing.spawn" in block
    assert "hint: rank" in block and "-> let it start its own ranks: launch mode self-spawn (`rankwatch run " \
        "--launch-mode self-spawn diag_self_spawn.py`" in block
    assert "int(os.environ['RANK'])" in block
    assert processes_with_marker(run.run_key) == []  # the spawned children are gone too


def test_the_same_rank_argument_in_every_process_names_both_ranks_and_the_holder_in_this_run():
    port = free_port()
    result = rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "diag_duplicate_rank.py"),
                       "--rank", "0", "--world_size", "2", "--init_method", f"tcp://127.0.0.1:{port}")
    assert result.returncode == 1
    block = summary_block(result.stderr)
    assert "EADDRINUSE" in block
    hint = block[block.index("  hint: "):]
    assert hint.startswith("  hint: ranks 0 and 1 both claimed rank 0: torchrun passes the same arguments to every "
                           f"process, so each got --rank 0 --world_size 2 --init_method tcp://127.0.0.1:{port}")
    run, _events = stored()
    holder = 1 - run.summary["first_failure"]["rank"]
    assert f"port {port} is held by rank {holder} of this very run (" in hint
    assert "not by a leftover of an earlier run" in hint and "often a leftover" not in block
    assert [h["key"] for h in run.summary["hints"]] == ["duplicate_rank"]


def test_a_script_taking_local_rank_with_a_dash_gets_that_spelling_from_the_legacy_option():
    result = rankwatch("run", "--plain", "--nproc-per-node", "2", "--legacy-local-rank",
                       str(SCRIPTS / "diag_local_rank_dash.py"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank 0] rank uses local rank 0" in result.stderr + result.stdout
    assert "[rank 1] rank uses local rank 1" in result.stderr + result.stdout
    block = summary_block(result.stderr)
    assert "hint: the script takes --local-rank (the spelling torch >= 2.0's launch passes), not --local_rank" in block
    assert "turn the legacy" not in block


def test_a_script_with_a_local_rank_default_run_without_the_legacy_option_is_warned():
    result = rankwatch("run", "--plain", "--nproc-per-node", "2", str(SCRIPTS / "diag_local_rank_default.py"))
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stderr + result.stdout
    assert "[rank 1] rank uses cuda:0" in output  # what the warning is about: rank 1 silently on local rank 0
    warning = ("the script declares --local_rank (torch.distributed.launch's argument), but nothing passes it: "
               "torchrun gives the local rank in LOCAL_RANK and the legacy --local_rank option is off; rank 1 parsed "
               "--local_rank = 0 while its LOCAL_RANK is 1, so every rank uses local rank 0 (on GPUs: all on cuda:0)")
    assert f"[rankwatch] {warning}" in result.stderr
    block = summary_block(result.stderr)
    assert f"hint: {warning}" in block and "-> turn on the legacy option (--legacy-local-rank" in block
    with RunStore(readonly=True) as store:
        [event] = store.stored_events(store.resolve_run_id("last"), kind="launch_mismatch")
    assert event.rank == 1 and event.fields["key"] == "local_rank_unpassed"
