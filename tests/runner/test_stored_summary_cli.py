"""The CLI's readers of a stored run (`runs show`, `attach` of a run that ended, `stop` of one) read
a summary stored by an earlier version through ``RunSummary.from_wire``: the lines it always printed,
and a failure stored without its rank is left out rather than a crash. A real store, the real CLI."""

from __future__ import annotations

import subprocess
import sys
import time

from runner.cli.main import main
from runner.cli.stop_command import EXIT_NOT_RUNNING
from runner.store.store import RunStore

OLD_SUMMARY = {  # keys as an earlier version stored them: no outcome or hints, an unknown key
    "headline": "rank 1 on h failed first (exit code 1): ValueError: bad",
    "first_failure": {"rank": 1, "host": "h", "exit_code": 1, "evidence": "exception",
                      "exception_line": "ValueError: bad"},
    "other_failures": [{"rank": 0, "exit_code": -15, "signal": "SIGTERM", "after": 1},
                       {"exit_code": -15}],  # no rank: left out
    "finished": [{"rank": 2, "before": 0.25}],
    "losses": [{"rank": 0, "not_received": 1}],
    "from_a_later_version": True,
}
SUMMARY_LINES = [
    "rank 1 on h failed first (exit code 1): ValueError: bad",
    "  first to fail: rank 1 on h (exit code 1; known from: exception)",
    "  exception:     ValueError: bad",
    "  then:          rank 0 (SIGTERM, stopped after rank 1 failed)",
    "  finished:      rank 2 (exit code 0, 0.25 s before rank 1 failed)",
    "  not stored:    rank 0: 1 record sent but never received (a connection broke)",
]


def record_ended_run() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with RunStore() as store:
        run_id = store.create_run(run_key="e" * 24, profile="p", spec_toml="", command="", host="h", workdir="/",
                                  runner_pid=dead.pid, socket=None, world_size=3, status="running")
        store.update_run(run_id, status="failed", exit_code=1, ended=time.time(), summary=OLD_SUMMARY)
    return run_id


def test_an_earlier_versions_summary_reads_in_runs_show_attach_and_stop(capsys):
    run_id = record_ended_run()
    assert main(["runs", "show", str(run_id)]) == 0
    shown = capsys.readouterr().out.splitlines()
    start = shown.index(f"── Rankwatch · run {run_id} failed (exit code 1) ".ljust(72, "─"))
    assert shown[start + 1:start + 1 + len(SUMMARY_LINES)] == SUMMARY_LINES
    assert main(["attach", str(run_id)]) == 0  # an ended run is shown as stored
    attached = capsys.readouterr()
    assert f"run {run_id} is not running (failed); showing what was stored" in attached.err
    assert all(line in attached.out.splitlines() for line in SUMMARY_LINES)
    assert main(["stop", str(run_id)]) == EXIT_NOT_RUNNING
    assert (f"rankwatch: run {run_id} is not running (failed, exit code 1); nothing to stop"
            in capsys.readouterr().err)
