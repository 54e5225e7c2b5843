"""torchrun's parent: a single-threaded process that passes a stop on exactly once.

The runner is multi-threaded, and Linux sends a parent-death signal when the *thread*
that is a child's parent exits, then hands the child to another live thread of the same
process, which sends it again when it exits: a SIGKILLed runner SIGTERMs its children
once per thread. torchrun stops its workers on SIGTERM (SIGTERM to each worker's process
group, SIGKILL after its grace period), but a second SIGTERM raises inside that clean-up
and aborts it halfway: torchrun exits, its workers die of their own parent-death signal,
and their children (DataLoader workers, a user's subprocesses) are left running, or
torchrun never exits at all. That is how a runner and its sentinel killed together left
a run behind.

So the runner starts ``python -m runner.launch.keeper`` (in a session of its own) and
the keeper starts torchrun. The keeper:

* gives torchrun a parent-death signal (SIGTERM) of its own, which a single-threaded
  parent sends once;
* on its first SIGTERM, SIGINT or SIGHUP (the runner's stop, or the runner's death,
  however many times it arrives) sends torchrun one SIGTERM and, ``grace`` seconds
  later, SIGKILLs every process still carrying the run's marker (torchrun older than
  2.11 waits 30 s before its own SIGKILL);
* ends with torchrun's exit status, or dies of the signal torchrun died of, so the
  runner reads torchrun's status through it.

It never starts a thread. Its stdin, stdout, stderr, working directory and umask are
torchrun's; so is its environment, except ``PYTHONPATH`` (the keeper needs Rankwatch's
modules, torchrun's workers only the ``rankwatch`` folder).

Usage: ``python -m runner.launch.keeper GRACE PYTHONPATH -- TORCHRUN ARGV...``
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from runner.launch.process_tree import (
    MARKER_VARIABLE,
    find_job_pids,
    parent_death_signal_for,
    signal_pids,
)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Keeper:
    """The keeper's state: torchrun's process and whether a stop has been passed on."""

    def __init__(self, grace: float):
        self.grace = grace
        self.child: subprocess.Popen | None = None
        self.stopping = False

    def on_stop(self, signum, frame) -> None:
        """A stop: torchrun gets one SIGTERM, whatever arrives after."""
        if self.stopping:
            return
        self.stopping = True
        self._pass_on_stop()

    def _pass_on_stop(self) -> None:
        if self.child is None:
            return  # not started yet: ``run`` passes it on right after the start
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child.pid, signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, self.grace)

    def on_deadline(self, signum, frame) -> None:
        """The grace period is over: SIGKILL whatever of the run is left."""
        run_key = os.environ.get(MARKER_VARIABLE)
        stubborn = set(find_job_pids(run_key)) if run_key else set()
        if self.child is not None:
            stubborn.add(self.child.pid)
        signal_pids(stubborn, signal.SIGKILL)

    def run(self, argv: list[str], child_pythonpath: str) -> int:
        """Start torchrun, wait for it; returns its raw wait status."""
        for number in STOP_SIGNALS:
            signal.signal(number, self.on_stop)
        signal.signal(signal.SIGALRM, self.on_deadline)
        env = dict(os.environ)
        if child_pythonpath:
            env["PYTHONPATH"] = child_pythonpath
        else:
            env.pop("PYTHONPATH", None)
        self.child = subprocess.Popen(argv, env=env, preexec_fn=parent_death_signal_for(os.getpid()))
        if self.stopping:  # a stop came while torchrun was being started
            self._pass_on_stop()
        while True:
            try:
                _, status = os.waitpid(self.child.pid, 0)
                return status
            except ChildProcessError:
                return 0


def mirror(status: int) -> int:
    """End as torchrun ended: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.setitimer(signal.ITIMER_REAL, 0)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m runner.launch.keeper GRACE PYTHONPATH -- ARGV...", file=sys.stderr)
        return 2
    keeper = Keeper(float(argv[0]))
    try:
        status = keeper.run(argv[3:], argv[1])
    except OSError as error:  # torchrun's interpreter cannot be executed
        print(f"rankwatch: cannot start {argv[3]}: {error.strerror or error}", file=sys.stderr)
        return 127
    return mirror(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
