"""``python -m rankwatch._bootstrap [-m MODULE | SCRIPT] [ARGS...]``: run a training script under Rankwatch.

torchrun starts every worker with this module in front of the user's script.
It turns telemetry on when the runner asked for it (``RANKWATCH_SOCKET`` is set,
see ``_environment``), runs the script unmodified, and reports how it ended:

* normal end or ``SystemExit``: an ``exit`` message with the exit code;
* an uncaught exception: an ``exception`` message (type, message, traceback),
  torchrun's error file (so its failure summary shows the traceback even
  without ``@record``), then ``exit``; the exception is re-raised so the
  printed traceback and the exit status are exactly those of a plain run.

Before anything else it sends the process's stdout and stderr to the runner's
output socket (``_output``), when the runner gave one.

Per-rank argument templates (``--rank {rank}``) are expanded first, when the runner
says the arguments hold some (``_templates``). In the self-spawn launch mode the script
was started once, without torchrun; ``_spawn`` then makes the processes it spawns ranks
(or this process rank 0 of 1, when the script does not spawn).

Without ``RANKWATCH_SOCKET`` it only runs the script (``rankwatch.log`` stays a
no-op). It never imports torch: the instrumentation waits for the script's own
``import torch``.
"""

from __future__ import annotations

import signal
import sys

from rankwatch import (
    _failures,
    _flight_recorder,
    _group_check,
    _launch_checks,
    _output,
    _script,
    _spawn,
    _templates,
)
from rankwatch._environment import (
    WorkerEnvironment,
    error_file_path,
    is_self_spawn,
    legacy_local_rank_argument,
)
from rankwatch._session import WorkerSession

USAGE = "usage: python -m rankwatch._bootstrap [-m MODULE | SCRIPT] [ARGS...]"


def main(argv: list[str] | None = None) -> int:
    """Run the script or module named in ``argv``; returns its exit code or raises what it raised."""
    argv = sys.argv[1:] if argv is None else argv
    target = parse_target(argv)
    if target is None:
        sys.stderr.write(USAGE + "\n")
        return 2
    is_module, name, args = target
    args = expand_arguments(args)
    if args is None:
        return 2
    legacy_argument = legacy_local_rank_argument()
    if legacy_argument is not None:
        args = [legacy_argument, *args]
    command = ["-m", name, *args] if is_module else [name, *args]
    launcher: _spawn.Launcher | None = None
    if is_self_spawn() and _spawn.target_spawns(is_module, name):
        launcher = _spawn.Launcher(lambda environment: _start_session(command, environment))
        launcher.install()
        session = None
    elif is_self_spawn():
        session = _start_session(command, WorkerEnvironment.from_environ(_spawn.rank_environ(0, 1)))
    else:
        session = _start_session(command, WorkerEnvironment.from_environ())
    if session is not None or launcher is not None:
        _flight_recorder.enable()  # before the script (or the ranks it spawns) creates a process group
    if session is not None or legacy_argument is not None:
        _launch_checks.install(session.notice if session is not None else None, legacy_argument)
    _group_check.install(session)  # a rank of a multi-rank job that trains without a process group
    try:
        if is_module:
            _script.run_module(name, args)
        else:
            _script.run_file(name, args)
    except _script.ScriptNotFound as exc:
        sys.stderr.write(_script.cannot_open_message(exc) + "\n")
        _finish(_unspawned(launcher, session), 2)
        return 2
    except SystemExit as exc:
        _finish(_unspawned(launcher, session), exit_code(exc.code))
        raise
    except BaseException as exc:
        _report_failure(_unspawned(launcher, session), exc)
        raise
    _finish(_unspawned(launcher, session), 0)
    return 0


def _unspawned(launcher: _spawn.Launcher | None, session: WorkerSession | None) -> WorkerSession | None:
    """The session to report the script's end in: a self-spawning script's main process that
    ended without spawning is rank 0 after all (its failure is explained, not lost)."""
    if launcher is None:
        return session
    return launcher.session_without_spawn()


def parse_target(argv: list[str]) -> tuple[bool, str, list[str]] | None:
    """``(is_module, script_or_module, args)`` from the command line, or None when empty."""
    if not argv:
        return None
    if argv[0] == "-m":
        if len(argv) < 2:
            return None
        return True, argv[1], list(argv[2:])
    if argv[0].startswith("-m") and len(argv[0]) > 2:  # python accepts -mMODULE too
        return True, argv[0][2:], list(argv[1:])
    return False, argv[0], list(argv[1:])


def expand_arguments(args: list[str]) -> list[str] | None:
    """The script's arguments with their per-rank templates expanded (``_templates``) when the
    runner said they hold some; ``None`` (after saying why on stderr) when one cannot be."""
    if not _templates.expansion_requested():
        return args
    try:
        return _templates.expand(args, _templates.values_from_environment())
    except _templates.TemplateError as error:
        sys.stderr.write(f"rankwatch: cannot expand the script's argument {error}\n")
        return None


def exit_code(code: object) -> int:
    """The process exit status ``SystemExit(code)`` produces (``sys.exit("text")`` gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _start_session(command: list[str], environment: WorkerEnvironment | None) -> WorkerSession | None:
    if environment is None:
        return None
    try:
        return WorkerSession.start(environment, command)
    except Exception as exc:  # telemetry is optional, the training is not
        sys.stderr.write(f"rankwatch: telemetry disabled ({type(exc).__name__}: {exc})\n")
        return None


def _report_failure(session: WorkerSession | None, exc: BaseException) -> None:
    """Report an exception that ends the script; the caller re-raises it."""
    try:
        _failures.install_trimming_excepthook()
        text = _failures.format_exception(exc)
        if isinstance(exc, Exception):  # like torch's @record: not KeyboardInterrupt
            _failures.write_error_file(error_file_path(), exc, text)
        if session is not None:
            session.report_exception(exc, text)
            _finish(session, -int(signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else 1)
    except Exception:
        pass


def _finish(session: WorkerSession | None, code: int) -> None:
    if session is not None:
        session.finish(code)


def _attach_output() -> None:
    """Send stdout and stderr to the runner, attributed to this process's rank: torchrun's
    ``RANK``; in the self-spawn mode rank 0, or pending when the script spawns its ranks."""
    if not is_self_spawn():
        _output.attach_output()
        return
    target = parse_target(sys.argv[1:])
    if target is not None and not _spawn.target_spawns(*target[:2]):
        _output.attach_output(_spawn.rank_environ(0, 1))
    else:
        _output.attach_output(pending=True)


if __name__ == "__main__":
    _attach_output()  # first: every line the process writes from here on is attributed to its rank
    sys.exit(main())
