"""Self-spawning scripts: the processes a script starts with ``torch.multiprocessing.spawn`` are its ranks.

In the ``self-spawn`` launch mode (``RANKWATCH_LAUNCH_MODE=self-spawn``) the runner starts
the script once, with the interpreter and this bootstrap, no torchrun. Two cases:

* **The script spawns** (its text calls ``spawn(`` or ``start_processes(``, the official
  DDP tutorial's ``mp.spawn(demo_basic, args=(world_size,), nprocs=world_size)``): the
  main process is the launcher. Its output is attached *pending* (``_output``) and
  declared the launcher's when it calls spawn. Each spawned function is wrapped
  (``SpawnedRank``): the child dies with the main process (SIGTERM, so a stop ends it
  cleanly), attaches its own output pending, and turns telemetry on as the rank it
  turns out to be: its ``init_process_group`` rank (the explicit ``rank=`` when given,
  at once, so a hang in the rendezvous is seen; else ``get_rank()`` once it returns), or
  its spawn index when it has not entered a process group ``STANDALONE_AFTER_SECONDS``
  after it started, or when it ends first. Its failure and exit are reported as that
  rank's. Should the main process end without spawning (a failure before the call),
  it reports it as rank 0.
* **The script does not spawn** (``DataParallel``: one process drives every GPU): the
  main process is rank 0 of 1, from the start.

Standard library only; torch is reached through the modules the script imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rankwatch import _output, _process, _torch_hook
from rankwatch._environment import WorkerEnvironment

STANDALONE_AFTER_SECONDS = 3.0
"""A spawned process that has not entered ``init_process_group`` this long after it started
is its spawn index's rank (a script without a process group)."""
SPAWN_FUNCTIONS = ("spawn", "start_processes")
SPAWN_CALL = re.compile(rb"\b(?:spawn|start_processes)\s*\(")
MAX_SCRIPT_BYTES = 2 * 1024 * 1024

StartSession = Callable[[WorkerEnvironment], Any]
"""Starts telemetry for an environment (``_bootstrap``: ``WorkerSession.start``); returns the session."""


def rank_environ(rank: int, world_size: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` as torchrun would have given it to ``rank`` of ``world_size`` on one node
    (for Rankwatch's own reading only: the script's ``os.environ`` is left alone)."""
    environ = os.environ if environ is None else environ
    return {**environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0"}


def target_spawns(is_module: bool, name: str) -> bool:
    """Whether the script (or module, ``-m``) calls ``spawn(`` / ``start_processes(``: its main
    process is then a launcher, not a rank. One that cannot be found or read: assumed to."""
    return script_spawns(module_path(name) if is_module else name)


def module_path(name: str) -> str | None:
    """The file ``python -m name`` runs (a package's ``__main__``), or ``None`` when not found.
    Finding it imports the parent packages, as running it would."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") else None


def script_spawns(path: str | None) -> bool:
    """Whether the file's text calls ``spawn(`` / ``start_processes(``; ``None`` or an
    unreadable file: assumed to."""
    if path is None:
        return True
    try:
        if os.path.getsize(path) > MAX_SCRIPT_BYTES:
            return True
        with open(path, "rb") as source:
            return SPAWN_CALL.search(source.read()) is not None
    except OSError:
        return True


class Launcher:
    """The main process of a script that spawns its ranks."""

    def __init__(self, start_session: StartSession) -> None:
        self.start_session = start_session
        self.spawned = False
        self._lock = threading.Lock()

    def install(self) -> None:
        """Wrap torch's spawn functions once the script imports torch."""
        _torch_hook.call_when_imported(self._wrap_spawn)

    def session_without_spawn(self) -> Any:
        """The main process ended (or failed) without spawning: it was rank 0 of 1 after all."""
        with self._lock:
            if self.spawned:
                return None
            self.spawned = True  # one session at most
        environment = WorkerEnvironment.from_environ(rank_environ(0, 1))
        return None if environment is None else self.start_session(environment)

    def _wrap_spawn(self, torch: Any) -> None:
        multiprocessing = getattr(torch, "multiprocessing", None) or sys.modules.get("torch.multiprocessing")
        if multiprocessing is None:
            return
        for name in SPAWN_FUNCTIONS:
            original = getattr(multiprocessing, name, None)
            if callable(original) and not getattr(original, "_rankwatch_spawn", False):
                setattr(multiprocessing, name, self._spawn_wrapper(original))

    def _spawn_wrapper(self, original: Callable) -> Callable:
        launcher = self

        def spawn(fn, args=(), nprocs=1, *rest, **kwargs):
            with launcher._lock:
                first = not launcher.spawned
                launcher.spawned = True
            if first:
                _output.declare_launcher()
            return original(SpawnedRank(fn, nprocs if isinstance(nprocs, int) else 1, os.getpid()),
                            args, nprocs, *rest, **kwargs)

        spawn._rankwatch_spawn = True  # type: ignore[attr-defined]
        spawn.__wrapped__ = original  # type: ignore[attr-defined]
        spawn.__name__ = getattr(original, "__name__", "spawn")
        spawn.__doc__ = getattr(original, "__doc__", None)
        return spawn


class SpawnedRank:
    """The function a spawned process runs, wrapped: ``fn(index, *args)`` as one rank.

    Pickled to the child by reference (this class) with the user's ``fn``, as ``fn`` alone
    would have been.
    """

    def __init__(self, fn: Callable, nprocs: int, parent: int) -> None:
        self.fn = fn
        self.nprocs = nprocs
        self.parent = parent

    def __call__(self, index: int, *args: Any) -> Any:
        from rankwatch._session import WorkerSession

        _process.die_with_parent(signal.SIGTERM, parent=self.parent)
        _output.attach_output(pending=True)
        rank = LateRank(index, self.nprocs, lambda environment: WorkerSession.start(
            environment, list(sys.argv), watch_parent=False))
        rank.arm()
        try:
            result = self.fn(index, *args)
        except SystemExit as exc:
            code = exc.code
            rank.finish(0 if code is None else code if isinstance(code, int) else 1)
            raise
        except BaseException as exc:
            rank.fail(exc)
            raise
        rank.finish(0)
        return result


class LateRank:
    """Telemetry for a spawned process whose rank is learned late (see the module docstring)."""

    def __init__(self, index: int, nprocs: int, start_session: StartSession) -> None:
        self.index = index
        self.nprocs = nprocs
        self.start_session = start_session
        self.session: Any = None
        self._started = False
        self._in_process_group = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        """Watch ``init_process_group``; fall back on the spawn index after a while."""
        _torch_hook.call_when_imported(self._wrap_init_process_group)
        self._timer = threading.Timer(STANDALONE_AFTER_SECONDS, self._standalone)
        self._timer.daemon = True
        self._timer.start()

    def start(self, rank: int, world_size: int) -> None:
        """Turn telemetry on as ``rank`` of ``world_size`` (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        if self._timer is not None:
            self._timer.cancel()
        environment = WorkerEnvironment.from_environ(rank_environ(rank, world_size))
        if environment is None:
            return
        try:
            self.session = self.start_session(environment)
        except Exception as exc:  # telemetry is optional, the training is not
            sys.stderr.write(f"rankwatch: telemetry disabled ({type(exc).__name__}: {exc})\n")

    def finish(self, code: int) -> None:
        self.start(self.index, self.nprocs)
        if self.session is not None:
            self.session.finish(code)

    def fail(self, exc: BaseException) -> None:
        """Report the exception that ends this rank (the caller re-raises it)."""
        from rankwatch import _failures

        self.start(self.index, self.nprocs)
        if self.session is None:
            return
        try:
            self.session.report_exception(exc, _failures.format_exception(exc))
        except Exception:
            pass
        self.session.finish(-int(signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else 1)

    def _standalone(self) -> None:
        if not self._in_process_group:
            self.start(self.index, self.nprocs)

    def _wrap_init_process_group(self, torch: Any) -> None:
        distributed = getattr(torch, "distributed", None)
        original = getattr(distributed, "init_process_group", None)
        if not callable(original) or getattr(original, "_rankwatch_spawn", False):
            return
        late = self

        def init_process_group(*args, **kwargs):
            late._in_process_group = True
            world_size = kwargs.get("world_size", args[3] if len(args) > 3 else -1)
            rank = kwargs.get("rank", args[4] if len(args) > 4 else -1)
            if isinstance(rank, int) and rank >= 0:
                late.start(rank, world_size if isinstance(world_size, int) and world_size > 0 else late.nprocs)
            try:
                return original(*args, **kwargs)
            finally:
                late._after_init(distributed)

        init_process_group._rankwatch_spawn = True  # type: ignore[attr-defined]
        init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
        init_process_group.__doc__ = getattr(original, "__doc__", None)
        distributed.init_process_group = init_process_group
        # ``from torch.distributed import init_process_group`` after this sees the wrapper too;
        # a name imported before torch finished importing cannot be reached (the index is used).

    def _after_init(self, distributed: Any) -> None:
        try:
            rank, world_size = int(distributed.get_rank()), int(distributed.get_world_size())
        except Exception:
            rank, world_size = self.index, self.nprocs
        self.start(rank, world_size)
