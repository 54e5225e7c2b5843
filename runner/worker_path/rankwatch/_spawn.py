"""Self-spawning scripts: the processes a script starts itself are its ranks.

In the ``self-spawn`` launch mode (``RANKWATCH_LAUNCH_MODE=self-spawn``) the runner starts
the script once, with the interpreter and this bootstrap, no torchrun. Two cases:

* **The script starts its ranks** (``_rank_starters``): with ``torch.multiprocessing.spawn``
  / ``start_processes`` (the official DDP tutorial's ``mp.spawn(demo_basic, nprocs=N)``),
  or with ``multiprocessing.Process(target=F)`` where ``F`` reaches ``init_process_group``
  (the "Writing Distributed Applications" tutorial's harness). The main process is the
  launcher. Its output is attached *pending* (``_output``) and declared the launcher's
  when it starts the first rank. Each rank's function is wrapped (``SpawnedRank``,
  ``ProcessRank``; a ``Process`` whose target does not reach a process group is a helper
  and left alone): the child dies with the main process (SIGTERM, so a stop ends it
  cleanly), attaches its own output pending, prepares its telemetry session at once (its
  steps are measured from the first one) and begins it as the rank it turns out to be
  (``LateRank``).
* **The script does not** (``DataParallel``: one process drives every GPU): the main
  process is rank 0 of 1, from the start.

A child learns its rank by watching, not by wrapping ``init_process_group``: the DDP
tutorial series' ``multigpu.py`` imports it by name (``from torch.distributed import
init_process_group``) in a module the child re-imports before any wrapper could exist. A
watcher thread looks every ``WATCH_INTERVAL`` at the process group (``get_rank()`` once it
exists) and at the running ``init_process_group`` frames (the explicit ``rank=`` at once, so
a hang in the rendezvous is seen as that rank's); a process not in a group
``STANDALONE_AFTER_SECONDS`` after it started is its start index's rank (a script without a
process group), and so is one that ends first. Its failure and exit are reported as that
rank's. Should the main process end without starting a rank (a failure before the call),
it reports it as rank 0.

Standard library only; torch is reached through the modules the script imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rankwatch import _output, _process, _rank_starters, _torch_hook
from rankwatch._environment import WorkerEnvironment

STANDALONE_AFTER_SECONDS = 3.0
"""A spawned process that is not in (nor entering) a process group this long after it started
is its start index's rank (a script without a process group)."""
WATCH_INTERVAL = 0.05
"""How often a spawned process that does not know its rank yet looks for it (``LateRank``)."""
SPAWN_FUNCTIONS = ("spawn", "start_processes")
SPAWN_CALL = re.compile(rb"\b(?:spawn|start_processes)\s*\(")
MAX_SCRIPT_BYTES = 2 * 1024 * 1024
C10D_FILE = "distributed_c10d.py"
"""``init_process_group``'s source file: its frames are found by name and file, whatever
decorators wrap it and whatever name the script imported it under."""

PrepareSession = Callable[[WorkerEnvironment], Any]
"""Prepares telemetry for an environment (``WorkerSession.prepare``: measures, sends nothing
until its ``begin(environment)``); returns the session."""
StartSession = Callable[[WorkerEnvironment], Any]
"""Starts telemetry for an environment (``_bootstrap``: ``WorkerSession.start``); returns the session."""


def rank_environ(rank: int, world_size: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` as torchrun would have given it to ``rank`` of ``world_size`` on one node
    (for Rankwatch's own reading only: the script's ``os.environ`` is left alone)."""
    environ = os.environ if environ is None else environ
    return {**environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0"}


def target_spawns(is_module: bool, name: str) -> bool:
    """Whether the script (or module, ``-m``) starts its own ranks (``_rank_starters``): its
    main process is then a launcher, not a rank. One that cannot be found or read: assumed to."""
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
    """Whether the file's text calls ``spawn(`` / ``start_processes(`` or starts a ``Process``
    whose target reaches ``init_process_group``; ``None`` or an unreadable file: assumed to."""
    if path is None:
        return True
    try:
        if os.path.getsize(path) > MAX_SCRIPT_BYTES:
            return True
        with open(path, "rb") as source:
            text = source.read()
    except OSError:
        return True
    if SPAWN_CALL.search(text) is not None:
        return True
    return _rank_starters.find_process_rank_start(text.decode("utf-8", errors="replace")) is not None


class Launcher:
    """The main process of a script that starts its ranks."""

    def __init__(self, start_session: StartSession) -> None:
        self.start_session = start_session
        self.spawned = False
        self._lock = threading.Lock()
        self._process_ranks = 0
        """Ranks started with ``Process`` so far: the next one's start index."""

    def install(self) -> None:
        """Wrap torch's spawn functions and ``Process.start`` once the script imports torch (not
        before: importing ``multiprocessing`` while the bootstrap is ``__main__`` would make the
        bootstrap multiprocessing's ``__mp_main__``, where spawned children's classes are looked up)."""
        _torch_hook.call_when_imported(self._wrap_spawn)
        _torch_hook.call_when_imported(lambda torch: self._wrap_process_start())

    def session_without_spawn(self) -> Any:
        """The main process ended (or failed) without spawning: it was rank 0 of 1 after all."""
        with self._lock:
            if self.spawned:
                return None
            self.spawned = True  # one session at most
        environment = WorkerEnvironment.from_environ(rank_environ(0, 1))
        return None if environment is None else self.start_session(environment)

    def _declare(self) -> None:
        """The first rank is being started: this process's output is the launcher's."""
        with self._lock:
            first = not self.spawned
            self.spawned = True
        if first:
            _output.declare_launcher()

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
            launcher._declare()
            return original(SpawnedRank(fn, nprocs if isinstance(nprocs, int) else 1, os.getpid()),
                            args, nprocs, *rest, **kwargs)

        spawn._rankwatch_spawn = True  # type: ignore[attr-defined]
        spawn.__wrapped__ = original  # type: ignore[attr-defined]
        spawn.__name__ = getattr(original, "__name__", "spawn")
        spawn.__doc__ = getattr(original, "__doc__", None)
        return spawn

    def _wrap_process_start(self) -> None:
        """``Process.start`` of every context (fork, spawn, forkserver): a process whose target
        reaches ``init_process_group`` runs as a rank (``ProcessRank``); others are untouched."""
        import multiprocessing.process

        base = multiprocessing.process.BaseProcess
        original = base.start
        if getattr(original, "_rankwatch_spawn", False):
            return
        launcher = self

        def start(process):
            target = getattr(process, "_target", None)
            if target is not None and not isinstance(target, (ProcessRank, SpawnedRank)) \
                    and _rank_starters.starts_a_rank(target):
                launcher._declare()
                with launcher._lock:
                    index = launcher._process_ranks
                    launcher._process_ranks += 1
                process._target = ProcessRank(target, index, os.getpid())
            return original(process)

        start._rankwatch_spawn = True  # type: ignore[attr-defined]
        start.__wrapped__ = original  # type: ignore[attr-defined]
        start.__doc__ = original.__doc__
        base.start = start  # type: ignore[method-assign]


class AsRank:
    """``with AsRank(index, nprocs, parent):`` the body is this started process's rank's work.

    Entering: the process dies with its parent (SIGTERM, so a stop ends it cleanly), its
    output is attached pending, its session prepared and its rank watched for (``LateRank``).
    Leaving: its exit, or its failure with Rankwatch's frames hidden from the traceback that
    the process prints and that ``torch.multiprocessing.spawn`` sends its parent (a context
    manager rather than a wrapping function: no frame of ours sits between the caller and
    the user's function).
    """

    def __init__(self, index: int, nprocs: int | None, parent: int) -> None:
        self.index = index
        self.nprocs = nprocs
        self.parent = parent
        self.rank: LateRank | None = None

    def __enter__(self) -> AsRank:
        from rankwatch._session import WorkerSession

        _process.die_with_parent(signal.SIGTERM, parent=self.parent)
        _output.attach_output(pending=True)
        argv = list(sys.argv)
        self.rank = LateRank(self.index, self.nprocs,
                             lambda environment: WorkerSession.prepare(environment, argv, watch_parent=False))
        self.rank.arm()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        rank = self.rank
        if rank is None:
            return False
        if exc is None:
            rank.finish(0)
        elif isinstance(exc, SystemExit):
            code = exc.code
            rank.finish(0 if code is None else code if isinstance(code, int) else 1)
        else:
            from rankwatch import _failures

            _failures.hide_own_frames(exc)
            rank.fail(exc)
        return False


class SpawnedRank:
    """The function ``torch.multiprocessing.spawn`` runs, wrapped: ``fn(index, *args)`` as one rank.

    Pickled to the child by reference (this class) with the user's ``fn``, as ``fn`` alone
    would have been.
    """

    def __init__(self, fn: Callable, nprocs: int, parent: int) -> None:
        self.fn = fn
        self.nprocs = nprocs
        self.parent = parent

    def __call__(self, index: int, *args: Any) -> Any:
        with AsRank(index, self.nprocs, self.parent):
            return self.fn(index, *args)


class ProcessRank:
    """The target of a ``multiprocessing.Process`` that is a rank, wrapped: ``target(*args)``.

    The number of ranks is not known when one starts (the script starts them one by one):
    the process group says it; without one, the start index's rank is one of ``index + 1``.
    """

    def __init__(self, target: Callable, index: int, parent: int) -> None:
        self.target = target
        self.index = index
        self.parent = parent

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with AsRank(self.index, None, self.parent):
            return self.target(*args, **kwargs)


class LateRank:
    """Telemetry for a started process whose rank is learned late (see the module docstring)."""

    def __init__(self, index: int, nprocs: int | None, prepare_session: PrepareSession) -> None:
        self.index = index
        self.nprocs = nprocs
        self.session: Any = None
        self._started = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        environment = WorkerEnvironment.from_environ(rank_environ(index, self._fallback_world_size()))
        if environment is None:
            return
        try:
            self.session = prepare_session(environment)
        except Exception as exc:  # telemetry is optional, the training is not
            sys.stderr.write(f"rankwatch: telemetry disabled ({type(exc).__name__}: {exc})\n")

    def arm(self) -> None:
        """Watch for the rank in the background (the training thread is never paused)."""
        if self.session is None:
            return
        threading.Thread(target=self._watch, name="rankwatch-rank", daemon=True).start()

    def start(self, rank: int, world_size: int | None) -> None:
        """Begin sending as ``rank`` of ``world_size`` (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        self._stop.set()
        if self.session is None:
            return
        world_size = world_size if world_size is not None and world_size > 0 else self._fallback_world_size()
        environment = WorkerEnvironment.from_environ(rank_environ(rank, world_size))
        try:
            self.session.begin(environment)
        except Exception as exc:  # telemetry is optional, the training is not
            sys.stderr.write(f"rankwatch: telemetry disabled ({type(exc).__name__}: {exc})\n")
            self.session = None

    def finish(self, code: int) -> None:
        self.start(*self._rank_now(include_frames=False) or (self.index, None))
        if self.session is not None:
            self.session.finish(code)

    def fail(self, exc: BaseException) -> None:
        """Report the exception that ends this rank (the caller re-raises it)."""
        from rankwatch import _failures

        self.start(*self._rank_now(include_frames=False) or (self.index, None))
        if self.session is None:
            return
        try:
            self.session.report_exception(exc, _failures.format_exception(exc))
        except Exception:
            pass
        self.session.finish(-int(signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else 1)

    def _fallback_world_size(self) -> int:
        return self.nprocs if self.nprocs is not None else self.index + 1

    def _watch(self) -> None:
        standalone_at = time.monotonic() + STANDALONE_AFTER_SECONDS
        while not self._stop.is_set():
            try:
                found = self._rank_now(include_frames=True)
                if found is not None:
                    self.start(*found)
                elif time.monotonic() >= standalone_at and not self._entering_group():
                    self.start(self.index, None)
            except Exception:
                self.start(self.index, None)
            self._stop.wait(WATCH_INTERVAL)

    def _rank_now(self, include_frames: bool) -> tuple[int, int | None] | None:
        """``(rank, world size)`` from the process group, or from a running ``init_process_group``'s
        explicit ``rank=``; None while neither says."""
        distributed = sys.modules.get("torch.distributed")
        try:
            if distributed is not None and distributed.is_available() and distributed.is_initialized():
                return int(distributed.get_rank()), int(distributed.get_world_size())
        except Exception:
            pass
        if not include_frames:
            return None
        for frame in _init_process_group_frames():
            arguments = frame.f_locals
            rank, world_size = arguments.get("rank"), arguments.get("world_size")
            if isinstance(rank, int) and rank >= 0:
                return rank, world_size if isinstance(world_size, int) else None
        return None

    def _entering_group(self) -> bool:
        return bool(_init_process_group_frames())


def _init_process_group_frames() -> list[Any]:
    """The frames of ``init_process_group`` running in any thread of this process, innermost
    first (found by code name and file: the name the script imported it under does not matter)."""
    frames = []
    for frame in list(sys._current_frames().values()):
        while frame is not None:
            code = frame.f_code
            if code.co_name == "init_process_group" and code.co_filename.endswith(C10D_FILE):
                frames.append(frame)
            frame = frame.f_back
    return frames
