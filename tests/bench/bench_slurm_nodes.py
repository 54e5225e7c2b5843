"""Many Slurm nodes: one run across the most nodes a local Slurm cluster holds on this machine.

A throwaway cluster (``tests/slurm/cluster.py``: munged, slurmctld and one ``slurmd`` per node,
all on this host) with ``--nodes`` nodes; then the real ``rankwatch run --slurm --nodes N``
(sbatch, one torchrun per node, the ranks' telemetry relayed to the head's hub) of a script that
logs a loss every 50 ms for ``--steps`` steps without importing torch (torchrun still rendezvouses
every node). Reports how long the job took to be running and to end, its exit, and from the
store: ranks and nodes seen, each node's host and state, and records stored per rank against
what each rank logged.

    .venv/bin/python tests/bench/bench_slurm_nodes.py --nodes 8 --nproc-per-node 1 --steps 200

Needs root and Debian's slurmctld, slurmd and munge (``bash .ci/run`` installs them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "runner" / "worker_path")]

from rankwatch import protocol  # noqa: E402
from runner.store.store import RunStore  # noqa: E402
from tests.slurm.cluster import LocalSlurm  # noqa: E402
from tests.slurm.helpers import runner_env, slurm_flags  # noqa: E402

STEPS_SCRIPT = '''
import os, sys, time
import rankwatch
rank, steps = int(os.environ["RANK"]), int(sys.argv[1])
for step in range(steps):
    rankwatch.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.05)
print(f"rank {rank} logged {steps} steps", flush=True)
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--nproc-per-node", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=540.0, help="seconds the run may take")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rw-slurm-nodes-", dir="/tmp"))
    cluster = LocalSlurm(folder / "slurm", nodes=args.nodes)
    started = time.monotonic()
    cluster.start()
    cluster_s = time.monotonic() - started
    script = folder / "steps.py"
    script.write_text(STEPS_SCRIPT)
    home, workdir = folder / "home", folder / "work"
    workdir.mkdir()
    try:
        print(f"load average before: {os.getloadavg()}", flush=True)
        began = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "runner", "run", "--plain",
             *slurm_flags(workdir, args.nodes, args.nproc_per_node), str(script), str(args.steps)],
            cwd=str(REPO), env=runner_env(home, cluster), capture_output=True, text=True, timeout=args.timeout)
        run_s = time.monotonic() - began
        print(f"load average after: {os.getloadavg()}", flush=True)
        with RunStore(home / "data" / "runs.db", readonly=True) as store:
            [listed] = store.runs(limit=1)
            run = store.stored_run(listed.id)
            ranks = store.ranks(run.id)
            nodes = store.stored_nodes(run.id)
            per_rank = dict(store.connection.execute(
                "SELECT rank, COUNT(*) FROM metrics WHERE run_id = ? AND name = ? GROUP BY rank",
                (run.id, protocol.LOSS)).fetchall())
            running = [event.t for event in store.stored_events(run.id) if event.kind == "rank_started"]
        world = args.nodes * args.nproc_per_node
        figures = {
            "nodes": args.nodes, "ranks": world, "exit_code": result.returncode, "status": run.status,
            "cluster_up_s": round(cluster_s, 1), "run_s": round(run_s, 1),
            "first_to_last_rank_started_s": round(max(running) - min(running), 2) if running else None,
            "ranks_seen": len(ranks), "ranks_exited_0": sum(1 for rank in ranks if rank.exit_code == 0),
            "nodes_seen": len(nodes), "node_states": sorted({node.state or "" for node in nodes}),
            "hosts": sorted({node.host or "" for node in nodes}),
            "loss_records_stored": sum(per_rank.values()), "loss_records_logged": world * args.steps,
            "ranks_short": sorted(rank for rank in range(world) if per_rank.get(rank, 0) != args.steps),
        }
        print(json.dumps(figures), flush=True)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
        print(f"\n| nodes | ranks | exit | cluster up s | run s | ranks started within s | ranks seen / exited 0 "
              f"| nodes seen (states) | loss records stored / logged |\n|---|---|---|---|---|---|---|---|---|\n"
              f"| {args.nodes} | {world} | {result.returncode} | {figures['cluster_up_s']} | {figures['run_s']} "
              f"| {figures['first_to_last_rank_started_s']} | {figures['ranks_seen']} / {figures['ranks_exited_0']} "
              f"| {figures['nodes_seen']} ({', '.join(figures['node_states'])}) "
              f"| {figures['loss_records_stored']:,} / {figures['loss_records_logged']:,} |")
        return 0 if result.returncode == 0 and not figures["ranks_short"] else 1
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
