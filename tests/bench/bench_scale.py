"""Scale: the real runner with 64 to 1,024 fake ranks speaking the real protocol.

For each rank count, the real runner (``scale_runner.py``: ``runner.run.Run`` as
``rankwatch run`` drives it, with its hub, store, publisher, samplers and monitors) runs
in its own process; torchrun and the training are stood in for by ``scale_ranks.py``
processes of up to 256 ranks each, one Unix-socket connection per rank, each rank
sending a step row (13 records) ``--rate`` times a second, a heartbeat a second and a
printed line every 5 steps; NVML answers for 8 GPUs per 8 ranks at the runner's sample
period. Measured, in this order, for each rank count:

1. ``--seconds`` of steady streaming (after ``--warmup``): the runner process's CPU
   (cores used: user + system time / wall time, all its threads) and RSS, the metric
   records stored in that window (records/s), and freshness: a subscriber
   (``HubClient``, in this process, as ``rankwatch attach`` and the GUI subscribe)
   takes each metric record's receive time minus the record's ``t``.
2. A history replay to ``history_end`` (``HubClient.subscribe(history=True)``, what
   ``rankwatch attach`` does) of the whole run so far (``--no-replay`` leaves it out).
3. The GUI (``scale_gui.py``, its own process, offscreen): the monitor panel attaches
   to the live run; first frame and frame time (wall and GUI-thread CPU).
4. The ranks end (``exit`` 0), the runner ends the run; then per rank, records and
   lines sent (the fake ranks' own counts) against those in the store; the store's
   size per rank-hour (``runs.db`` + WAL, one run in it); ``rankwatch runs show N``
   (the real CLI, a subprocess) on the finished run. (``rankwatch attach`` on a
   finished run prints the same as ``runs show``.)

``--without-stragglers`` runs the runner without its straggler monitor (what the rest
costs). Figures and findings: ``tests/bench/PERFORMANCE.md``, "Scale".

    .venv/bin/python tests/bench/bench_scale.py --ranks 64,256,1024 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
for _path in (str(REPO), str(REPO / "runner" / "worker_path")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from runner.hub.client import HubClient  # noqa: E402

HERE = Path(__file__).resolve().parent
READY_TIMEOUT_S = 180.0
END_TIMEOUT_S = 180.0


@dataclass
class Freshness:
    """A subscriber on the live run: each metric record's delay, while ``measuring``."""

    socket: str
    measuring: bool = False
    delays: list[float] = field(default_factory=list)
    """Receive time minus the record's ``t``."""
    in_hub: list[float] = field(default_factory=list)
    """The update's ``t`` (when the hub published it, after the commit) minus the record's ``t``."""
    records_seen: int = 0
    decimated_updates: int = 0
    error: str | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=lambda: asyncio.run(self._follow()), name="freshness", daemon=True)
        self.thread.start()

    async def _follow(self) -> None:
        try:
            client = await HubClient.subscribe(self.socket, history=False, logs=True)
            async for message in client.messages():
                received = time.time()
                if message.get("type") == "bye":
                    break
                metrics = message.get("metrics") or []
                if self.measuring:
                    self.records_seen += len(metrics)
                    self.decimated_updates += bool(message.get("decimated"))
                    self.delays.extend(received - row[1] for row in metrics)
                    published = message.get("t") or received
                    self.in_hub.extend(published - row[1] for row in metrics)
            client.close()
        except (OSError, ValueError) as error:
            self.error = str(error)

    def p(self, fraction: float, in_hub: bool = False) -> float | None:
        values = self.in_hub if in_hub else self.delays
        if not values:
            return None
        ordered = sorted(values)
        return ordered[int(fraction * (len(ordered) - 1))]


@dataclass
class RankCheck:
    """Per rank, what the fake ranks sent against what the store holds."""

    ranks_sent: int
    metrics_sent: int
    metrics_stored: int
    lines_sent: int
    lines_stored: int
    ranks_short: list[int]
    """Ranks whose stored records or lines differ from what they sent."""
    streamed_s: float
    reconnects: int = 0
    """Connections the hub dropped before a rank's hello (the fake rank connected again, as the reporter does)."""


@dataclass
class ScaleResult:
    ranks: int
    window_s: float
    records_per_s: float
    cores: float
    cpu_us_per_record: float
    rss_mb_end: float
    rss_mb_peak: float
    rss_mb_start: float
    fresh_p50_ms: float | None
    fresh_p95_ms: float | None
    fresh_max_ms: float | None
    fresh_hub_p95_ms: float | None
    """Of the freshness: from the record's ``t`` to the hub publishing it (after its commit)."""
    fakes_cores: float
    """Cores the fake ranks' processes used in the window (they share the machine with the hub)."""
    machine_busy: float
    """Cores busy on the whole machine in the window (other people's work included)."""
    fresh_records: int
    decimated_updates: int
    gui: dict
    replay_s: float | None
    replay_records: int
    check: RankCheck | None = None
    store_bytes: int = 0
    bytes_per_rank_hour: float = 0.0
    gpu_samples: int = 0
    show_s: float | None = None
    show_rc: int | None = None
    runner_rc: int | None = None
    notes: list[str] = field(default_factory=list)
    hellos_s: float = 0.0
    """From the runner's start to every rank's hello (the ranks connect as the fake node starts them)."""


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def replay_history(socket: str) -> tuple[float, int]:
    """Subscribe with history, as ``rankwatch attach`` does: seconds to ``history_end``, records."""
    started = time.perf_counter()
    client = await HubClient.subscribe(socket, history=True, logs=True)
    records = 0
    try:
        async for message in client.messages():
            records += len(message.get("metrics") or [])
            if message.get("type") == "history_end":
                return time.perf_counter() - started, records
    finally:
        client.close()
    raise RuntimeError("the hub hung up before history_end")


def check_store(store: Path, run_id: int, workdir: Path) -> RankCheck:
    sent: dict[int, dict] = {}
    started, ended = [], []
    for result in workdir.glob("sent-*.json"):
        data = json.loads(result.read_text())
        started.append(data["started"])
        ended.append(data["ended"])
        sent.update({int(rank): counts for rank, counts in data["ranks"].items()})
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        metrics = dict(db.execute("SELECT rank, COUNT(*) FROM metrics WHERE run_id = ? GROUP BY rank", (run_id,)))
        lines = dict(db.execute("SELECT rank, COUNT(*) FROM logs WHERE run_id = ? AND rank IS NOT NULL "
                                "GROUP BY rank", (run_id,)))
    short = [rank for rank, counts in sorted(sent.items())
             if metrics.get(rank, 0) != counts["records"] or lines.get(rank, 0) != counts["lines"]]
    return RankCheck(len(sent), sum(c["records"] for c in sent.values()),
                     sum(metrics.get(rank, 0) for rank in sent), sum(c["lines"] for c in sent.values()),
                     sum(lines.get(rank, 0) for rank in sent), short,
                     (max(ended) - min(started)) if started else 0.0,
                     sum(counts.get("reconnects", 0) for counts in sent.values()))


def stored_in_window(store: Path, run_id: int, begin: float, end: float) -> int:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return db.execute("SELECT COUNT(*) FROM metrics WHERE run_id = ? AND t >= ? AND t < ?",
                          (run_id, begin, end)).fetchone()[0]


def one_scale(ranks: int, args: argparse.Namespace, python: str) -> ScaleResult:
    workdir = Path(tempfile.mkdtemp(prefix="rw-scale-", dir="/tmp"))
    sockets = Path(tempfile.mkdtemp(prefix="rws-", dir="/tmp"))
    home = workdir / "home"
    env = {**os.environ, "RANKWATCH_HOME": str(home), "RANKWATCH_SOCKET_DIR": str(sockets),
           "QT_QPA_PLATFORM": "offscreen"}
    runner = subprocess.Popen([python, str(HERE / "scale_runner.py"), "--ranks", str(ranks), "--rate",
                               str(args.rate), "--workdir", str(workdir),
                               *([] if args.stragglers else ["--without-stragglers"]),
                               *(["--profile", f"{args.profile}.{ranks}"] if args.profile else [])],
                              stdout=subprocess.PIPE, env=env)
    notes: list[str] = []
    try:
        assert runner.stdout is not None
        ready_line = runner.stdout.readline()
        if not ready_line:
            raise RuntimeError(f"the runner for {ranks} ranks ended before it was ready (exit {runner.wait()})")
        info = json.loads(ready_line)
        run_id, socket = info["run_id"], info["socket"]
        hub = psutil.Process(info["pid"])
        fresh = Freshness(socket)
        fresh.start()
        time.sleep(args.warmup)
        rss_start = hub.memory_info().rss
        rss_peak = rss_start
        fakes = [child for child in hub.children(recursive=True) if "scale_ranks.py" in " ".join(child.cmdline())]
        psutil.cpu_percent(None)
        fresh.measuring = True
        began_wall, began_cpu = time.time(), cpu_seconds(hub)
        began_fakes = sum(cpu_seconds(child) for child in fakes)
        while time.time() < began_wall + args.seconds:
            time.sleep(1.0)
            rss_peak = max(rss_peak, hub.memory_info().rss)
        ended_wall, ended_cpu = time.time(), cpu_seconds(hub)
        fakes_cores = (sum(cpu_seconds(child) for child in fakes) - began_fakes) / (ended_wall - began_wall)
        machine_busy = psutil.cpu_percent(None) / 100 * (psutil.cpu_count() or 1)
        fresh.measuring = False
        rss_end = hub.memory_info().rss
        window = ended_wall - began_wall
        cores = (ended_cpu - began_cpu) / window
        # each phase's figures as soon as it is measured: a run whose end outlasts its timeout keeps them
        print("streamed: " + json.dumps({"ranks": ranks, "window_s": round(window, 1), "cores": round(cores, 3),
                                         "fresh_p50_ms": _ms(fresh.p(0.5)), "fresh_p95_ms": _ms(fresh.p(0.95)),
                                         "fresh_max_ms": _ms(fresh.p(1.0)), "rss_mb_peak": rss_peak / 2**20,
                                         "fakes_cores": round(fakes_cores, 3), "machine_busy": machine_busy}),
              flush=True)
        try:
            if args.no_replay:
                raise RuntimeError("left out (--no-replay)")
            replay_s, replay_records = asyncio.run(asyncio.wait_for(replay_history(socket), args.phase_timeout))
        except (OSError, RuntimeError, asyncio.TimeoutError) as error:
            replay_s, replay_records = None, 0
            notes.append(f"history replay did not reach history_end in {args.phase_timeout:.0f} s "
                         f"({type(error).__name__} {error})")
        print(f"replay: {json.dumps({'replay_s': replay_s, 'replay_records': replay_records})}", flush=True)
        gui: dict = {}
        if not args.no_gui:
            profiled = (["--profile-frames", f"{args.gui_profile}.{ranks}",
                         "--profile-history", f"{args.gui_profile}.{ranks}.history"] if args.gui_profile else [])
            # --gui-ab N: N rounds of (charts from the store, charts replayed by the hub), alternating
            variants = [[]] if not args.gui_ab else [[], ["--charts-from-hub"]] * args.gui_ab
            rounds: list[dict] = []
            for variant in variants:
                shown = subprocess.run([python, str(HERE / "scale_gui.py"), str(run_id), *profiled, *variant,
                                        "--seconds", str(args.gui_seconds), "--history-timeout", str(args.phase_timeout)],
                                       capture_output=True, text=True, env=env, timeout=args.phase_timeout + 120)
                lines = shown.stdout.strip().splitlines()
                gui = json.loads(lines[-1]) if shown.returncode == 0 and lines else {
                    "error": f"the GUI process ended with {shown.returncode}; its stderr began: "
                             + " | ".join(line for line in shown.stderr.splitlines()
                                          if "propagateSizeHints" not in line)[:800]}
                gui["charts"] = "hub" if variant else "store"
                if gui.get("error"):
                    notes.append(f"GUI: {gui['error']}")
                print(f"gui: {json.dumps(gui)}", flush=True)
                rounds.append(gui)
            gui = rounds[0]  # the table's: the first attach (charts from the store); the rest printed above
        (workdir / "stop").touch()
        stop_asked = time.perf_counter()
        runner_rc = runner.wait(args.end_timeout)
        print(f"runner ended {time.perf_counter() - stop_asked:.1f} s after the ranks were told to exit", flush=True)
        if fresh.thread is not None:
            fresh.thread.join(10)
        if fresh.error:
            notes.append(f"subscriber: {fresh.error}")
        store = home / "data" / "runs.db"
        stored = stored_in_window(store, run_id, began_wall, ended_wall)
        check = check_store(store, run_id, workdir)
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            gpu_samples = db.execute("SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?", (run_id,)).fetchone()[0]
        store_bytes = sum(path.stat().st_size for path in (store, store.with_name("runs.db-wal")) if path.exists())
        rank_hours = ranks * check.streamed_s / 3600
        started = time.perf_counter()
        shown_run = subprocess.run([python, "-m", "runner", "runs", "show", str(run_id)], capture_output=True,
                                   env=env, cwd=REPO, timeout=300)
        show_s = time.perf_counter() - started
        return ScaleResult(
            ranks=ranks, window_s=window, records_per_s=stored / window, cores=cores,
            cpu_us_per_record=(ended_cpu - began_cpu) / max(1, stored) * 1e6, rss_mb_end=rss_end / 2**20,
            rss_mb_peak=rss_peak / 2**20, rss_mb_start=rss_start / 2**20,
            fresh_p50_ms=_ms(fresh.p(0.5)), fresh_p95_ms=_ms(fresh.p(0.95)), fresh_max_ms=_ms(fresh.p(1.0)),
            fresh_hub_p95_ms=_ms(fresh.p(0.95, in_hub=True)), fakes_cores=fakes_cores, machine_busy=machine_busy,
            fresh_records=len(fresh.delays), decimated_updates=fresh.decimated_updates, gui=gui,
            replay_s=replay_s, replay_records=replay_records, check=check, store_bytes=store_bytes,
            bytes_per_rank_hour=store_bytes / rank_hours if rank_hours else 0.0, gpu_samples=gpu_samples,
            show_s=show_s, show_rc=shown_run.returncode, runner_rc=runner_rc, notes=notes, hellos_s=info["hellos_s"])
    finally:
        if runner.poll() is None:
            (workdir / "stop").touch()
            try:
                runner.wait(30)
            except subprocess.TimeoutExpired:
                runner.kill()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(workdir), str(sockets)], check=False)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _cell(value: float | None, form: str = "{:.0f}") -> str:
    return "n/a" if value is None else form.format(value)


def table(results: list[ScaleResult]) -> list[str]:
    rows = ["| ranks | records/s | stored == sent (per rank) | hub cores | us CPU/record | hub RSS MB (start/peak/end) "
            "| fake ranks / machine cores | fresh p50 / p95 / max ms (p95 until published) | store MB per rank-hour "
            "| runs show s | replay to history_end s (records/s) | GUI first frame s | GUI frame ms mean / p95 (CPU) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        check = r.check
        equal = "n/a" if check is None else (
            f"yes ({check.metrics_sent:,} records, {check.lines_sent:,} lines)" if not check.ranks_short
            else f"NO: {len(check.ranks_short)} ranks short ({check.metrics_stored:,}/{check.metrics_sent:,} records, "
                 f"{check.lines_stored:,}/{check.lines_sent:,} lines)")
        gui = r.gui
        frame = ("n/a" if not gui or gui.get("frame_mean_ms") is None else
                 f"{gui['frame_mean_ms']:.0f} / {gui['frame_p95_ms']:.0f} ({gui['frame_cpu_ms']:.0f})")
        rows.append(
            f"| {r.ranks:,} | {r.records_per_s:,.0f} | {equal} | {r.cores:.2f} | {r.cpu_us_per_record:.1f} "
            f"| {r.rss_mb_start:.0f} / {r.rss_mb_peak:.0f} / {r.rss_mb_end:.0f} "
            f"| {r.fakes_cores:.2f} / {r.machine_busy:.2f} "
            f"| {_cell(r.fresh_p50_ms)} / {_cell(r.fresh_p95_ms)} / {_cell(r.fresh_max_ms)} ({_cell(r.fresh_hub_p95_ms)}) "
            f"| {r.bytes_per_rank_hour / 1e6:.1f} | {_cell(r.show_s, '{:.2f}')} "
            f"| {_cell(r.replay_s, '{:.1f}')} ({r.replay_records / r.replay_s if r.replay_s else 0:,.0f}) "
            f"| {_cell(gui.get('first_frame_s') if gui else None, '{:.1f}')} | {frame} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="64,256,1024", help="rank counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds of streaming per rank count")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of streaming before the measurement")
    parser.add_argument("--rate", type=float, default=2.0, help="steps per second per rank")
    parser.add_argument("--gui-seconds", type=float, default=8.0, help="seconds of GUI frames")
    parser.add_argument("--phase-timeout", type=float, default=180.0,
                        help="seconds the history replay, and the GUI's first frame, may take before giving up")
    parser.add_argument("--without-stragglers", dest="stragglers", action="store_false",
                        help="the runner without its straggler monitor (what the rest of it costs)")
    parser.add_argument("--no-replay", action="store_true", help="leave the history replay out")
    parser.add_argument("--no-gui", action="store_true", help="leave the GUI measurement out")
    parser.add_argument("--gui-ab", type=int, default=0, metavar="N",
                        help="attach the GUI 2N times, alternating: the charts' history read from the store, "
                             "and replayed by the hub (as before)")
    parser.add_argument("--keep", action="store_true", help="keep each run's folder (store, sent counts)")
    parser.add_argument("--profile", metavar="PATH",
                        help="cProfile the runner's event loop thread into PATH.<ranks> (pstats format)")
    parser.add_argument("--end-timeout", type=float, default=END_TIMEOUT_S,
                        help="seconds the runner may take to end the run once its ranks exit")
    parser.add_argument("--gui-profile", metavar="PATH",
                        help="cProfile the GUI's frames (scale_gui.py --profile-frames) into PATH.<ranks>, and its "
                             "history load into PATH.<ranks>.history (pstats format)")
    args = parser.parse_args()
    python = sys.executable
    print("command: " + shlex.join([Path(python).name, "tests/bench/bench_scale.py", *sys.argv[1:]]), flush=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    results = []
    for ranks in (int(count) for count in args.ranks.split(",")):
        result = one_scale(ranks, args, python)
        results.append(result)
        print(json.dumps({key: value for key, value in vars(result).items() if key != "check"}
                         | {"check": vars(result.check) if result.check else None}, default=str), flush=True)
    print(f"load average after: {os.getloadavg()}")
    print()
    print("\n".join(table(results)))
    failed = []
    for r in results:
        if r.check is None or r.check.ranks_short:
            failed.append(f"{r.ranks} ranks: records or lines lost")
        if r.fresh_p95_ms is None or r.fresh_p95_ms > 1000:
            failed.append(f"{r.ranks} ranks: freshness p95 {r.fresh_p95_ms} ms > 1 s")
        if r.cores > 1.0:
            failed.append(f"{r.ranks} ranks: hub above one core ({r.cores:.2f})")
        failed.extend(f"{r.ranks} ranks: {note}" for note in r.notes)
    print("\n" + ("did not hold:\n  " + "\n  ".join(failed) if failed else "all held"))
    print(f"median hub CPU per record: {statistics.median(r.cpu_us_per_record for r in results):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
