"""Record the GUI test fixtures from real runs: ``python tests/gui/data/capture.py [NAME ...]``.

Each scenario runs a real ``rankwatch run --plain`` job (torchrun, gloo, CPU) of a
``tests/scripts/diag_*.py`` script in a throwaway ``RANKWATCH_HOME``, then writes
what the run store recorded -- the run row with its summary, the rank and node
rows, every event (in the shape the hub sends: ``{kind, t, rank, message, ...}``)
and the last log lines -- to ``tests/gui/data/<name>.json``. The GUI tests replay
these through a fake runner on a real socket, so the banner and the diagnosis
panel are tested against what the runner really says.

``doctor`` records ``rankwatch doctor --json``; ``two_nodes_lost`` runs a two-node
job over a throwaway sshd on 127.0.0.1 (``tests/remote/sshd.py``) and kills node 1's
agent, so node 1 is *lost*.

Takes about two minutes on two cores; nothing here runs during the tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from runner.rows import StoredRun  # noqa: E402
from runner.store.store import RunStore, stored_rank_json  # noqa: E402
from tests.jobs import SCRIPTS, processes_with_marker, wait_for  # noqa: E402

DATA = Path(__file__).resolve().parent
LOG_TAIL = 400


def _runner(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runner", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(REPO))


def _home() -> tuple[Path, dict[str, str]]:
    home = Path(tempfile.mkdtemp(prefix="rw-capture-"))
    env = dict(os.environ, RANKWATCH_HOME=str(home), RANKWATCH_SOCKET_DIR=tempfile.mkdtemp(prefix="rw-", dir="/tmp"))
    return home, env


def _latest(home: Path) -> StoredRun | None:
    store_file = home / "data" / "runs.db"
    if not store_file.exists():
        return None
    try:
        with RunStore(store_file, readonly=True) as store:
            runs = store.runs(limit=1)
            return runs[0] if runs else None
    except Exception:
        return None


def _dump(name: str, home: Path, command: list[str], **extra) -> Path:
    with RunStore(home / "data" / "runs.db", readonly=True) as store:
        run_id = store.resolve_run_id("last")
        run = store.stored_run(run_id)
        events = [event.to_wire() for event in store.stored_events(run_id)]
        logs = [list(line) for line in store.log_lines(run_id, limit=LOG_TAIL)]
        fixture = {"scenario": name, "command": command,
                   "run": {key: value for key, value in run.to_wire().items() if key != "socket"},
                   "ranks": [stored_rank_json(row) for row in store.ranks(run_id)],
                   "nodes": [node.to_wire() for node in store.stored_nodes(run_id)], "events": events, "logs": logs,
                   **extra}
    path = DATA / f"{name}.json"
    text = json.dumps(fixture, indent=1, default=str)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"{name}: run {run.status}: {(run.summary or {}).get('headline')}")
    return path


def _run_to_end(name: str, args: list[str], env_extra: dict[str, str] | None = None) -> Path:
    home, env = _home()
    env.update(env_extra or {})
    process = _runner("run", "--plain", *args, env=env)
    process.communicate(timeout=300)
    return _dump(name, home, ["rankwatch", "run", "--plain", *args])


def exception() -> Path:
    return _run_to_end("exception", ["--nproc-per-node", "2", str(SCRIPTS / "diag_exception.py")])


def sigkill() -> Path:
    return _run_to_end("sigkill", ["--nproc-per-node", "2", str(SCRIPTS / "diag_sigkill.py")])


def legacy() -> Path:
    return _run_to_end("legacy", ["--nproc-per-node", "2", str(SCRIPTS / "diag_legacy.py")])


def port_taken() -> Path:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        return _run_to_end("port_taken", ["--nproc-per-node", "2", "--env", f"DIAG_PORT={port}",
                                          str(SCRIPTS / "diag_port_taken.py")])
    finally:
        holder.close()


def straggler() -> Path:
    profile = Path(tempfile.mkdtemp()) / "slow.toml"
    profile.write_text(f'script = "{SCRIPTS / "diag_slow_data.py"}"\n'
                       'args = ["--steps", "30", "--diverge-at", "10"]\nnproc_per_node = 2\n'
                       "[telemetry]\nhash_every = 5\n")
    return _run_to_end("straggler", [str(profile)])


def hang() -> Path:
    """Two ranks, rank 0 in a barrier, rank 1 sleeping in a helper: the stall's capture, one requested, Ctrl-C."""
    home, env = _home()
    env["DIAG_DIR"] = tempfile.mkdtemp()
    args = ["--nproc-per-node", "2", "--stall-timeout", "5", str(SCRIPTS / "diag_hang.py")]
    process = _runner("run", "--plain", *args, env=env)
    try:
        run = wait_for(lambda: _latest(home), 60, what="the run")

        def captured():
            with RunStore(home / "data" / "runs.db", readonly=True) as store:
                return store.stored_events(run.id, kind="stacks")
        wait_for(captured, 180, interval=0.5, what="the stall's stack capture")
        subprocess.run([sys.executable, "-m", "runner", "stacks", str(run.id)], env=env, cwd=str(REPO),
                       capture_output=True, timeout=60)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    return _dump("hang", home, ["rankwatch", "run", "--plain", *args])


def healthy() -> Path:
    """Two ranks training normally; Dump stacks (``rankwatch stacks``) while they step, then they finish."""
    home, env = _home()
    args = ["--nproc-per-node", "2", str(SCRIPTS / "quiet_steps.py"), "12"]
    process = _runner("run", "--plain", *args, env=env)
    try:
        run = wait_for(lambda: _latest(home), 60, what="the run")

        def stepping():
            with RunStore(home / "data" / "runs.db", readonly=True) as store:
                return len(store.metrics(run.id, name="step_time")) > 20
        wait_for(stepping, 120, interval=0.5, what="steps")
        subprocess.run([sys.executable, "-m", "runner", "stacks", str(run.id)], env=env, cwd=str(REPO),
                       capture_output=True, timeout=60)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return _dump("healthy", home, ["rankwatch", "run", "--plain", *args, "(Dump stacks while it steps)"])


def doctor() -> Path:
    _home_dir, env = _home()
    result = subprocess.run([sys.executable, "-m", "runner", "doctor", "--json", "--interpreter", sys.executable],
                            env=env, cwd=str(REPO), capture_output=True, text=True, timeout=120)
    report = json.loads(result.stdout)
    path = DATA / "doctor.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"doctor: exit {result.returncode}, {len(report.get('checks') or [])} checks")
    return path


def two_nodes_lost() -> Path:
    """Two nodes (this machine, and 127.0.0.1 over a throwaway sshd); node 1's agent is killed."""
    from tests.remote.sshd import LocalSshd

    sshd = LocalSshd(Path(tempfile.mkdtemp(prefix="rw-sshd-")))
    sshd.start()
    try:
        home, env = _home()
        env["RANKWATCH_SSH_OPTIONS"] = sshd.options
        args = ["--hosts", "localhost:1,127.0.0.1:1", "--gpus", "cpu", "--interpreter", sys.executable,
                "--omp-num-threads", "1", str(SCRIPTS / "remote_train.py"), "--steps", "100000"]
        process = _runner("run", "--plain", *args, env=env)
        run = wait_for(lambda: _latest(home), 60, what="the run")

        def both_running():
            with RunStore(home / "data" / "runs.db", readonly=True) as store:
                ranks = store.ranks(run.id)
                return len([r for r in ranks if r.state == "running"]) == 2
        wait_for(both_running, 120, interval=0.5, what="both ranks")

        def both_printing():
            with RunStore(home / "data" / "runs.db", readonly=True) as store:
                return {line.rank for line in store.log_lines(run.id, contains=" step 5 ")} == {0, 1}
        wait_for(both_printing, 120, interval=0.5, what="both ranks' output")
        [agent] = [p for p in processes_with_marker(run.run_key) if p.cmdline()[-2:] == ["runner", "agent"]]
        agent.kill()
        process.communicate(timeout=120)
        return _dump("two_nodes_lost", home, ["rankwatch", "run", "--plain", *args, "(node 1's agent killed)"])
    finally:
        sshd.stop()


SCENARIOS = {f.__name__: f for f in (exception, sigkill, hang, healthy, straggler, port_taken, legacy, doctor,
                                     two_nodes_lost)}

if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        SCENARIOS[scenario]()
