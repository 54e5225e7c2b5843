"""A small fake runner: a real Unix socket server that speaks the hub's side of the protocol.

It streams ``ranks`` simulated ranks of a training job to every subscriber with
the real ``rankwatch._protocol.encode``: ``snapshot``, the history so far replayed
as ``update`` messages, ``history_end``, live ``update`` messages at ``rate_hz``,
and ``bye`` when the run ends. It obeys ``stop`` (graceful, then ``force``) and
records every subscriber message it receives, so tests can assert on them.
With ``store=True`` it also records the run in the run store (the row with its
socket and pid, and every metric and log line), like the real runner does.

Used in-process by the GUI tests (``FakeRunner(...).start()``), and as a program:

    python tests/gui/fake_runner.py serve --socket PATH [--ranks 64 --rate 10 --gpus 8]
    python tests/gui/fake_runner.py run --detach --json SPEC.toml   # stands in for `python -m runner run`
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (str(REPO_ROOT), str(REPO_ROOT / "runner" / "worker_path")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from rankwatch import _protocol  # noqa: E402

GIB = 1024**3


class FakeRunner:
    """Simulated ranks behind a real socket. Thread-safe; ``start()`` returns at once."""

    def __init__(self, socket_path: str | Path, ranks: int = 8, rate_hz: float = 10.0, gpus: int = 0,
                 total_steps: int | None = None, store: bool = False, profile: str = "fake",
                 steps_per_epoch: int = 50, slow_rank: int | None = 5, stop_delay_s: float = 0.3,
                 seed: int = 0, start_step: int = 0) -> None:
        self.socket_path = str(socket_path)
        self.world_size = ranks
        self.rate_hz = rate_hz
        self.gpus = gpus
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.slow_rank = slow_rank if slow_rank is not None and slow_rank < ranks else None
        self.stop_delay_s = stop_delay_s
        self.received: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] | None = None
        """NODE rows for the snapshot; ``None``: one node, ``fakehost``, running."""
        self.stacks_capture: dict[str, Any] | None = None
        """The ``stacks`` event (the runner's real analysis) to answer ``dump_stacks`` with;
        ``None``: one simple ``stacks`` event per rank."""
        self.step = start_step - 1
        self._keep_history = True
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._stop_event = threading.Event()
        self._history: list[dict[str, Any]] = []
        self._subscribers: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._stop_requested_at: float | None = None
        self._force = False
        self._ended = False
        self._use_store = store
        self._store = None
        now = time.time()
        self.run: dict[str, Any] = {
            "id": 1, "run_key": f"fake-{os.getpid()}-{int(now * 1000)}", "profile": profile,
            "status": "running", "created": now, "started": now, "ended": None, "exit_code": None,
            "world_size": ranks, "host": socket.gethostname(), "command": "torchrun (fake)",
            "workdir": str(REPO_ROOT), "summary": None,
        }
        self.spec = {"version": 1, "script": "fake_train.py", "args": ["--epochs", "4"],
                     "nproc_per_node": ranks}
        self.ranks: dict[int, dict[str, Any]] = {
            rank: {"rank": rank, "local_rank": rank % 8, "node_rank": rank // 8, "host": "fakehost",
                   "pid": 40_000 + rank, "gpu_index": (rank % gpus) if gpus else None, "state": "running",
                   "exit_code": None, "step": None, "loss": None, "step_time": None, "data_wait_share": None,
                   "samples_per_s": None, "steps_per_s": None, "last_seen": now, "cpu_percent": None,
                   "rss_bytes": None, "gpu_util": None, "gpu_mem_used": None}
            for rank in range(ranks)}

    # ---- life ------------------------------------------------------------------------

    def start(self) -> FakeRunner:
        if self._use_store:
            self._open_store()
        Path(self.socket_path).unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.socket_path)
        server.listen(8)
        server.settimeout(0.2)
        self._server = server
        for target, name in ((self._accept_forever, "fake-runner-accept"), (self._tick_forever, "fake-runner-tick")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _open_store(self) -> None:
        from runner.store.store import RunStore

        self._store = RunStore()
        self.run["id"] = self._store.create_run(
            run_key=self.run["run_key"], profile=self.run["profile"], spec_toml='script = "fake_train.py"\n',
            command=self.run["command"], host=self.run["host"], workdir=self.run["workdir"],
            runner_pid=os.getpid(), socket=self.socket_path, world_size=self.world_size, status="running")
        self._store.update_run(self.run["id"], started=self.run["started"])
        for rank, row in self.ranks.items():
            self._store.upsert_rank(self.run["id"], rank, host=row["host"], pid=row["pid"],
                                    gpu_index=row["gpu_index"], state=row["state"], local_rank=row["local_rank"],
                                    node_rank=row["node_rank"])

    @property
    def run_id(self) -> int:
        return int(self.run["id"])

    @property
    def ended(self) -> bool:
        return self._ended

    def close(self) -> None:
        """Stop everything without a ``bye`` (as if the runner were killed)."""
        self._stop_event.set()
        with self._lock:
            for connection in self._subscribers:
                _close_quietly(connection)
            self._subscribers.clear()
        if self._server is not None:
            _close_quietly(self._server)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2)
        Path(self.socket_path).unlink(missing_ok=True)
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def finish(self, status: str = "succeeded", exit_code: int = 0) -> None:
        """End the run: every rank exits, the run gets ``status``, subscribers get ``bye``."""
        with self._lock:
            if self._ended:
                return
            now = time.time()
            state = {"succeeded": "exited", "stopped": "stopped"}.get(status, "failed")
            for row in self.ranks.values():
                if row["state"] not in ("failed", "exited"):
                    row["state"] = state
                    row["exit_code"] = exit_code if state != "stopped" else -15
                row["last_seen"] = now
            self.run.update(status=status, ended=now, exit_code=exit_code)
            event = {"kind": "run_finished", "t": now, "rank": None, "message": f"run {status}"}
            self._send_update({"run": dict(self.run), "ranks": list(self.ranks.values()), "events": [event]})
            self._ended = True
            if self._store is not None:
                self._store.update_run(self.run_id, ended=now, status=status, exit_code=exit_code)
                for rank, row in self.ranks.items():
                    self._store.upsert_rank(self.run_id, rank, state=row["state"], exit_code=row["exit_code"])
            self._broadcast(_protocol.encode("bye", reason=f"run {status}"))
        self.close()

    def fail_rank(self, rank: int, exit_code: int = 1) -> None:
        with self._lock:
            now = time.time()
            self.ranks[rank].update(state="failed", exit_code=exit_code, last_seen=now)
            event = {"kind": "rank_failed", "t": now, "rank": rank,
                     "message": f"rank {rank} failed with exit code {exit_code}"}
            log = [rank, now, "stderr", "RuntimeError: CUDA out of memory (simulated)", None]
            self._send_update({"ranks": [self.ranks[rank]], "events": [event], "logs": [log]})

    # ---- subscribers -------------------------------------------------------------------

    def _accept_forever(self) -> None:
        while not self._stop_event.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(None)
            thread = threading.Thread(target=self._serve, args=(connection,), name="fake-runner-client",
                                      daemon=True)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        reader = connection.makefile("rb")
        subscribed = False
        try:
            for line in reader:
                try:
                    message = _protocol.decode(line, _protocol.SUBSCRIBER_TYPES)
                except _protocol.ProtocolError:
                    continue
                with self._lock:
                    self.received.append(message)
                kind = message["type"]
                if kind == "subscribe" and not subscribed:
                    subscribed = True
                    self._subscribe(connection, bool(message.get("history", True)))
                elif kind == "stop":
                    self._on_stop(bool(message.get("force")))
                elif kind == "dump_stacks":
                    self._on_dump_stacks()
                elif kind == "ping":
                    _send(connection, _protocol.encode("pong"))
        except OSError:
            pass
        finally:
            with self._lock:
                if connection in self._subscribers:
                    self._subscribers.remove(connection)
            _close_quietly(connection)

    def _subscribe(self, connection: socket.socket, history: bool) -> None:
        with self._lock:
            nodes = self.nodes if self.nodes is not None else [
                {"node_rank": 0, "host": "fakehost", "state": "running", "processes": self.world_size,
                 "changed": time.time(), "detail": None}]
            snapshot = _protocol.encode("snapshot", run=dict(self.run), ranks=list(self.ranks.values()),
                                        nodes=nodes, spec=self.spec)
            ok = _send(connection, snapshot)
            if ok and history:
                for message in self._history:
                    if not _send(connection, _protocol.encode("update", **message)):
                        ok = False
                        break
                ok = ok and _send(connection, _protocol.encode("history_end"))
            if ok and self._ended:
                _send(connection, _protocol.encode("bye", reason=f"run {self.run['status']}"))
            elif ok:
                self._subscribers.append(connection)

    def _on_stop(self, force: bool) -> None:
        with self._lock:
            if self._ended:
                return
            self._force = self._force or force
            if self._stop_requested_at is None:
                self._stop_requested_at = time.time()
                self.run["status"] = "stopping"
                event = {"kind": "warning", "t": time.time(), "rank": None, "message": "stop requested"}
                self._send_update({"run": dict(self.run), "events": [event]})

    def _on_dump_stacks(self) -> None:
        with self._lock:
            now = time.time()
            if self.stacks_capture is not None:
                capture = {**self.stacks_capture, "kind": "stacks", "t": now, "rank": None, "reason": "requested"}
                self._send_update({"events": [capture]})
                return
            events = [{"kind": "stacks", "t": now, "rank": rank, "message": f"rank {rank} stacks dumped",
                       "path": f"/tmp/stacks-{rank}.txt"} for rank in self.ranks]
            self._send_update({"events": events})

    # ---- streaming ---------------------------------------------------------------------

    def _tick_forever(self) -> None:
        period = 1.0 / self.rate_hz
        next_tick = time.monotonic()
        while not self._stop_event.is_set():
            stop_at = self._stop_requested_at
            if stop_at is not None and (self._force or time.time() - stop_at >= self.stop_delay_s):
                threading.Thread(target=self.finish, args=("stopped", -15), daemon=True).start()
                return
            self.tick()
            if self.total_steps is not None and self.step + 1 >= self.total_steps:
                threading.Thread(target=self.finish, daemon=True).start()
                return
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay > 0:
                self._stop_event.wait(delay)
            else:
                next_tick = time.monotonic()

    def tick(self) -> None:
        """One step of every running rank: metrics, samples, a log line now and then."""
        with self._lock:
            if self._ended:
                return
            self.step += 1
            step, now = self.step, time.time()
            metrics, logs, procs, gpus = [], [], [], []
            for rank, row in self.ranks.items():
                if row["state"] != "running":
                    continue
                loss = 2.3 * math.exp(-step / 150.0) + 0.05 * rank / self.world_size + 0.08 * self._random.random()
                step_time = 0.1 * (1.6 if rank == self.slow_rank else 1.0) * (1 + 0.15 * self._random.random())
                data_wait = step_time * (0.55 if rank == self.slow_rank else 0.08 + 0.05 * self._random.random())
                samples = 32 / step_time
                metrics += [[rank, now, step, _protocol.LOSS, loss, "auto"],
                            [rank, now, step, _protocol.STEP_TIME, step_time, "auto"],
                            [rank, now, step, _protocol.DATA_WAIT, data_wait, "auto"],
                            [rank, now, step, _protocol.SAMPLES_PER_SECOND, samples, "auto"]]
                if step % self.steps_per_epoch == 0:
                    metrics.append([rank, now, step, "epoch", step // self.steps_per_epoch, "log"])
                row.update(step=step, loss=loss, step_time=step_time,
                           data_wait_share=_protocol.data_wait_share(step_time, data_wait),
                           samples_per_s=samples, steps_per_s=1 / step_time, last_seen=now)
                if not self.gpus and step % 5 == 0:
                    cpu = 95 + 5 * self._random.random()
                    rss = int((1.2 + 0.01 * rank) * GIB + step * 1024 * 64)
                    procs.append([now, rank, row["pid"], cpu, rss, 12])
                    row.update(cpu_percent=cpu, rss_bytes=rss)
                if step % 10 == 0 and (rank == 0 or self.world_size <= 8):
                    logs.append([rank, now, "stdout", f"epoch {step // self.steps_per_epoch} step {step} "
                                 f"loss: {loss:.4f}", None])
            if self.gpus and step % 5 == 0:
                for index in range(self.gpus):
                    util = 80 + 20 * self._random.random() if index != self.slow_rank else 45.0
                    used = int((10 + index * 0.5 + min(step, 200) / 100) * GIB)
                    gpus.append([now, index, util, used, 40 * GIB, 250.0, 65.0, 1410.0])
            if step == 0:
                logs.insert(0, [None, now, "stdout", f"fake torchrun: {self.world_size} ranks, "
                                f"{self.steps_per_epoch} steps per epoch", None])
            update = {"metrics": metrics, "logs": logs, "procs": procs, "gpus": gpus,
                      "ranks": [r for r in self.ranks.values() if r["state"] == "running"]}
            self._send_update(update)

    def _send_update(self, fields: dict[str, Any]) -> None:
        fields = {"t": time.time(), "events": [], "logs": [], "metrics": [], "gpus": [], "procs": [],
                  "ranks": [], "run": None, "nodes": [], "decimated": False, **fields}
        if self._keep_history:
            self._history.append(fields)
        if self._store is not None:
            self._record(fields)
        self._broadcast(_protocol.encode("update", **fields))

    def _record(self, fields: dict[str, Any]) -> None:
        from runner.store.store import RecordBatch

        batch = RecordBatch(
            metrics=[_protocol.MetricRecord(*m) for m in fields["metrics"]],
            logs=[_protocol.LogLine(*lg) for lg in fields["logs"]],
            events=[_protocol.Event(e["t"], e["kind"], e.get("rank"), e.get("message", "")) for e in fields["events"]],
            gpu_samples=[_protocol.GpuSample(*g) for g in fields["gpus"]],
            process_samples=[_protocol.ProcessSample(*p) for p in fields["procs"]])
        self._store.write_batch(self.run_id, batch)

    def _broadcast(self, data: bytes) -> None:
        for connection in list(self._subscribers):
            if not _send(connection, data):
                self._subscribers.remove(connection)


def _send(connection: socket.socket, data: bytes) -> bool:
    try:
        connection.sendall(data)
        return True
    except OSError:
        return False


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


# ---- as a program --------------------------------------------------------------------------


def _serve_main(args: argparse.Namespace) -> int:
    runner = FakeRunner(args.socket, ranks=args.ranks, rate_hz=args.rate, gpus=args.gpus,
                        total_steps=args.steps, store=args.store, profile=args.profile, start_step=args.start_step)
    runner._keep_history = not args.no_history
    runner.start()
    print(json.dumps({"run_id": runner.run_id, "socket": runner.socket_path, "pid": os.getpid()}), flush=True)
    if args.detached:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        while not runner.ended and not runner._stop_event.is_set():
            time.sleep(0.2)
    except KeyboardInterrupt:
        runner.close()
    return 0


def _run_main(args: argparse.Namespace) -> int:
    """Stand-in for ``python -m runner run --detach --json SPEC``: start ``serve`` in its own session."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    spec = tomllib.loads(Path(args.spec).read_text(encoding="utf-8"))
    script = str(spec.get("script") or "")
    if "invalid" in script:
        print(json.dumps({"error": "the launch spec is invalid",
                          "errors": [{"field": "script", "message": f"no such file: {script}"}]}))
        return 2
    ranks = int(os.environ.get("FAKE_RUNNER_RANKS") or spec.get("nproc_per_node") or 2)
    socket_dir = Path(os.environ.get("RANKWATCH_SOCKET_DIR") or "/tmp")
    socket_path = socket_dir / f"fake-{os.getpid()}.sock"
    steps = os.environ.get("FAKE_RUNNER_STEPS")
    command = [sys.executable, str(Path(__file__).resolve()), "serve", "--socket", str(socket_path),
               "--ranks", str(ranks), "--store", "--detached", "--profile", Path(args.spec).stem]
    if steps:
        command += ["--steps", steps]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    line = child.stdout.readline()
    child.stdout.close()
    try:
        info = json.loads(line)
    except ValueError:
        print(json.dumps({"error": "the fake runner did not start", "errors": []}))
        return 1
    info["log"] = str(socket_dir / "fake-runner.log")
    print(json.dumps(info), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve")
    serve.add_argument("--socket", required=True)
    serve.add_argument("--ranks", type=int, default=8)
    serve.add_argument("--rate", type=float, default=10.0)
    serve.add_argument("--gpus", type=int, default=0)
    serve.add_argument("--steps", type=int, default=None)
    serve.add_argument("--store", action="store_true")
    serve.add_argument("--detached", action="store_true")
    serve.add_argument("--profile", default="fake")
    serve.add_argument("--start-step", type=int, default=0, help="first step (continue a history)")
    serve.add_argument("--no-history", action="store_true", help="keep nothing for late subscribers (benchmarks)")
    run = commands.add_parser("run")
    run.add_argument("spec")
    run.add_argument("--detach", action="store_true")
    run.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    return _serve_main(args) if args.command == "serve" else _run_main(args)


if __name__ == "__main__":
    sys.exit(main())
