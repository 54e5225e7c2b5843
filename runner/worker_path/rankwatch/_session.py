"""One worker's telemetry session: everything the bootstrap turns on, and turns off at exit.

Order matters and is fixed here:

1. die with torchrun (PR_SET_PDEATHSIG);
2. install the stack-dump handler, *before* ``hello`` (the runner only signals
   ranks that said hello);
3. activate ``rankwatch.log`` and start the reporter (which sends ``hello``);
4. report exceptions that end other threads, and flush before ``os._exit`` (scripts call it
   to skip torch's teardown; without the flush their last steps would never reach the hub);
5. arm the torch post-import hook for the zero-code instrumentation;
6. in forked children (DataLoader workers), switch telemetry off: nobody drains
   their copy of the queue and the hub socket belongs to the parent.

A process spawned by a self-spawning script (``_spawn``) prepares its session at once
(steps 5 and 6: its steps are measured from the first) and begins it (steps 2 to 4)
once it knows its rank; it watches its parent itself (step 1 is skipped).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any

import rankwatch
from rankwatch import _failures, _process, _stacks, _torch_hook, protocol
from rankwatch._buffer import RecordBuffer
from rankwatch._environment import WorkerEnvironment
from rankwatch._reporter import Reporter

EXIT_FLUSH_TIMEOUT = 2.0
"""Longest a worker's exit waits for the last telemetry to reach the hub."""


class WorkerSession:
    """Telemetry for one worker process, from ``start`` to ``finish``."""

    def __init__(self, environment: WorkerEnvironment, reporter: Reporter, buffer: RecordBuffer,
                 argv: list[str] | None = None):
        self.environment = environment
        self._argv = list(argv or [])
        self.reporter = reporter
        self.buffer = buffer
        self._pid = os.getpid()
        self._finished = False

    @classmethod
    def start(cls, environment: WorkerEnvironment, argv: list[str], watch_parent: bool = True) -> WorkerSession:
        """Turn telemetry on for this process (see the module docstring for the order);
        ``watch_parent`` False: the caller chose how this process dies with its parent (``_spawn``)."""
        session = cls.prepare(environment, argv, watch_parent)
        session.begin()
        return session

    @classmethod
    def prepare(cls, environment: WorkerEnvironment, argv: list[str], watch_parent: bool = True) -> WorkerSession:
        """Steps 1, 5 and 6, and ``rankwatch.log``: from now on records gather in the buffer,
        but nothing is sent (no ``hello``) until ``begin``. A spawned process measures its
        training from its first step while it learns which rank it is (``_spawn.LateRank``)."""
        if watch_parent:
            _process.die_with_parent()
        buffer = RecordBuffer(environment.queue_limit)
        reporter = Reporter(environment.address, hello_fields(environment, argv), buffer, environment.rank)
        reporter.hold_until_identified()
        session = cls(environment, reporter, buffer, argv)
        rankwatch._activate(buffer)
        if environment.instrument:
            _torch_hook.call_when_imported(session._instrument)
        os.register_at_fork(after_in_child=session._after_fork_in_child)
        return session

    def begin(self, environment: WorkerEnvironment | None = None) -> None:
        """Steps 2 to 4, as ``environment``'s rank when given (the rank learned after ``prepare``)."""
        if environment is not None:
            self.environment = environment
        environment = self.environment
        stacks_path = None
        if environment.stacks_dir:
            stacks_path = _stacks.install_stack_dumps(environment.stacks_dir, environment.rank)
        self.reporter.identify(hello_fields(environment, self._argv), environment.rank, stacks_path)
        self.reporter.start()
        _failures.install_thread_excepthook(self._report_thread_exception)
        self._flush_before_os_exit()

    def report_exception(self, exc: BaseException, traceback_text: str, fatal: bool = True) -> None:
        """Send an ``exception`` message for ``exc`` (the one ending the process when ``fatal``)."""
        self.reporter.send(
            protocol.ExceptionReport(
                self.environment.rank,
                time.time(),
                type(exc).__name__,
                str(exc),
                traceback_text,
                threading.current_thread().name,
                fatal,
            )
        )

    def notice(self, key: str, **facts: Any) -> None:
        """Send a ``notice``: something about how the script was launched (``_launch_checks``)."""
        self.reporter.send(protocol.Notice(self.environment.rank, time.time(), key, facts))

    def finish(self, code: int) -> None:
        """Send ``exit`` and flush, waiting at most ``EXIT_FLUSH_TIMEOUT``; never raises."""
        if self._finished or os.getpid() != self._pid:
            return
        self._finished = True
        try:
            farewell = protocol.Exit(self.environment.rank, time.time(), code)
            self.reporter.close(EXIT_FLUSH_TIMEOUT, last_message=farewell.encode())
        except Exception:
            pass

    def _flush_before_os_exit(self) -> None:
        """Make ``os._exit(code)`` send ``exit`` and the records still queued first, as a return
        from the script does. In a forked child ``finish`` does nothing (another pid)."""
        real_exit = os._exit

        def flushed_exit(code: int) -> None:
            self.finish(code)
            real_exit(code)

        flushed_exit.__wrapped__ = real_exit  # type: ignore[attr-defined]
        os._exit = flushed_exit  # type: ignore[assignment]

    def _report_thread_exception(self, args: threading.ExceptHookArgs) -> None:
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        self.reporter.send(
            protocol.ExceptionReport(
                self.environment.rank,
                time.time(),
                getattr(args.exc_type, "__name__", str(args.exc_type)),
                str(args.exc_value),
                text,
                args.thread.name if args.thread is not None else None,
                fatal=False,
            )
        )

    def _instrument(self, torch: Any) -> None:
        try:
            from rankwatch import _instrument

            _instrument.install(torch, self.buffer, self.reporter, self.environment.hash_every)
        except Exception as exc:  # never break the user's `import torch`
            sys.stderr.write(f"rankwatch: instrumentation disabled ({type(exc).__name__}: {exc})\n")

    def _after_fork_in_child(self) -> None:
        rankwatch._activate(None)
        self.buffer.disable()
        self.reporter.forget_in_child()


def hello_fields(environment: WorkerEnvironment, argv: list[str]) -> protocol.Hello:
    """The ``hello`` message; ``torch`` is filled in by the reporter thread (metadata lookup)."""
    return protocol.Hello(
        rank=environment.rank,
        token=environment.token,
        run_key=environment.run_key,
        local_rank=environment.local_rank,
        node_rank=environment.node_rank,
        world_size=environment.world_size,
        local_world_size=environment.local_world_size,
        host=environment.host,
        pid=os.getpid(),
        python=sys.executable,
        python_version="{}.{}.{}".format(*sys.version_info[:3]),
        torch=None,
        restart=environment.restart,
        argv=list(argv),
    )
