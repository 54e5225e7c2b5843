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

So the runner (or a node's agent) starts ``python -m runner.launch.keeper`` (in a session
of its own) and the keeper starts torchrun. The keeper:

* gives torchrun a parent-death signal (SIGTERM) of its own, which a single-threaded
  parent sends once;
* on its first SIGTERM, SIGINT or SIGHUP, however many arrive after it, arms its
  deadline: ``grace`` seconds later it SIGKILLs every process still carrying the run's
  marker (torchrun older than 2.11 waits 30 s before its own SIGKILL), except the
  process that started it;
* once torchrun has exited, however it ended (its job succeeded or failed, it was stopped,
  it was SIGKILLed), ends what it left behind: a rank's child that ignores SIGTERM or lives
  in a session of its own, or the ranks themselves when torchrun was killed. Without a stop,
  they get one SIGTERM then; whatever still carries the marker when the grace period ends
  gets SIGKILL. Only then does the keeper exit, so its exit means the node's processes are
  gone;
* passes that first stop on to torchrun (one SIGTERM) only when it came from the process
  that started it: the runner's or agent's stop, or their death (a parent-death signal
  carries the dead parent's pid). A stop sent by anyone else was sent to torchrun too:
  Slurm signals every process of a job step at once, as ``rankwatch stop`` of a lost run
  does, so a SIGTERM of the keeper's own would be torchrun's second;
* ends with torchrun's exit status, or dies of the signal torchrun died of, so the
  runner reads torchrun's status through it.

It tells who sent a signal by waiting for its signals (``sigwaitinfo``: they are blocked,
so none is lost or handled halfway) instead of handling them. It never starts a thread.
torchrun gets the signal mask the keeper started with. Its stdin, stdout, stderr,
working directory and umask are torchrun's; so is its environment, except ``PYTHONPATH``
(the keeper needs Rankwatch's modules, torchrun's workers only the ``rankwatch`` folder).

Usage: ``python -m runner.launch.keeper GRACE PYTHONPATH -- TORCHRUN ARGV...``
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from runner.launch.process_tree import (
    NODE_VARIABLE,
    find_job_pids,
    set_parent_death_signal,
    signal_pids,
)
from runner.processes import MARKER_VARIABLE

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
AWAITED_SIGNALS = STOP_SIGNALS | {signal.SIGCHLD}
LEFTOVER_POLL_SECONDS = 0.1
"""After torchrun's exit, how often the keeper looks whether what it left behind has ended."""


class Keeper:
    """The keeper's state: torchrun's process, who started the keeper, and its deadline."""

    def __init__(self, grace: float, parent: int):
        self.grace = grace
        self.parent = parent
        """The pid of the runner or agent that started the keeper: the one whose stop it passes on."""
        self.child: subprocess.Popen | None = None
        self.deadline: float | None = None
        """When whatever is left of the run gets SIGKILL (``time.monotonic``); ``None`` until a stop."""
        self.swept = False
        """Whether the deadline passed and what was left got SIGKILL."""

    def on_stop(self, sender: int) -> None:
        """A stop from ``sender`` (a pid): only the first one counts."""
        if self.deadline is not None:
            return
        self.deadline = time.monotonic() + self.grace
        if sender == self.parent and self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child.pid, signal.SIGTERM)

    def what_is_left(self) -> set[int]:
        """The node's processes of the run still alive, but for the keeper and its parent (an agent
        carries the marker too). Only this node's: another node of the run on the same machine
        (``--hosts localhost:2,127.0.0.1:2``) is its own keeper's to end."""
        run_key = os.environ.get(MARKER_VARIABLE)
        left = set(find_job_pids(run_key, os.environ.get(NODE_VARIABLE))) if run_key else set()
        left.discard(self.parent)
        return left

    def end_what_is_left(self) -> None:
        """The grace period is over: SIGKILL whatever of the run is left."""
        stubborn = self.what_is_left()
        if self.child is not None:
            stubborn.add(self.child.pid)
        signal_pids(stubborn, signal.SIGKILL)

    def end_leftovers(self) -> None:
        """torchrun has exited: end what it left behind before the keeper exits.

        torchrun waits only for the ranks themselves, so a rank's child that ignores SIGTERM
        (a helper, a server, a stuck DataLoader-like worker) or one in a session of its own
        outlives it, as do the ranks when torchrun itself was SIGKILLed. After a stop, the grace
        period already runs (torchrun passed the stop on); otherwise nobody asked them yet, so
        they get one SIGTERM now and the grace period starts. Either way, what is left when it
        ends gets SIGKILL. Stop signals that arrive meanwhile stay pending: nothing is left to
        pass them on to.
        """
        if self.swept or not self.what_is_left():
            return
        if self.deadline is None:
            signal_pids(self.what_is_left(), signal.SIGTERM)
            self.deadline = time.monotonic() + self.grace
        while time.monotonic() < self.deadline:
            time.sleep(min(LEFTOVER_POLL_SECONDS, max(0.0, self.deadline - time.monotonic())))
            if not self.what_is_left():
                return
        self.end_what_is_left()
        self.swept = True

    def run(self, argv: list[str], child_pythonpath: str) -> int:
        """Start torchrun, wait for it; returns its raw wait status.

        Raises:
            OSError: torchrun's interpreter cannot be executed.
        """
        original_mask = signal.pthread_sigmask(signal.SIG_BLOCK, AWAITED_SIGNALS)
        env = dict(os.environ)
        if child_pythonpath:
            env["PYTHONPATH"] = child_pythonpath
        else:
            env.pop("PYTHONPATH", None)
        keeper_pid = os.getpid()

        def prepare_torchrun() -> None:  # between fork and exec, in torchrun's process
            signal.pthread_sigmask(signal.SIG_SETMASK, original_mask)
            set_parent_death_signal(signal.SIGTERM, keeper_pid)

        self.child = child = subprocess.Popen(argv, env=env, preexec_fn=prepare_torchrun)
        while True:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            if pid:
                self.child = None
                self.end_leftovers()
                return status
            received: signal.struct_siginfo | None
            if self.deadline is None or self.swept:
                received = signal.sigwaitinfo(AWAITED_SIGNALS)
            else:
                received = signal.sigtimedwait(AWAITED_SIGNALS, max(0.0, self.deadline - time.monotonic()))
            if received is None:  # the deadline passed
                self.end_what_is_left()
                self.swept = True
            elif received.si_signo in STOP_SIGNALS:
                self.on_stop(received.si_pid)


def mirror(status: int) -> int:
    """End as torchrun ended: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        os.kill(os.getpid(), number)
        return 128 + number
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m runner.launch.keeper GRACE PYTHONPATH -- ARGV...", file=sys.stderr)
        return 2
    keeper = Keeper(float(argv[0]), os.getppid())
    try:
        status = keeper.run(argv[3:], argv[1])
    except OSError as error:  # torchrun's interpreter cannot be executed
        print(f"rankwatch: cannot start {argv[3]}: {error.strerror or error}", file=sys.stderr)
        return 127
    return mirror(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
