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

Without ``RANKWATCH_SOCKET`` it only runs the script (``rankwatch.log`` stays a
no-op). It never imports torch: the instrumentation waits for the script's own
``import torch``.
"""

from __future__ import annotations

import signal
import sys

from rankwatch import _failures, _flight_recorder, _launch_checks, _output, _script
from rankwatch._environment import WorkerEnvironment, error_file_path, legacy_local_rank_argument
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
    legacy_argument = legacy_local_rank_argument()
    if legacy_argument is not None:
        args = [legacy_argument, *args]
    session = _start_session(["-m", name, *args] if is_module else [name, *args])
    if session is not None:
        _flight_recorder.enable()  # before the script creates its first process group
    if session is not None or legacy_argument is not None:
        _launch_checks.install(session.notice if session is not None else None, legacy_argument)
    try:
        if is_module:
            _script.run_module(name, args)
        else:
            _script.run_file(name, args)
    except _script.ScriptNotFound as exc:
        sys.stderr.write(_script.cannot_open_message(exc) + "\n")
        _finish(session, 2)
        return 2
    except SystemExit as exc:
        _finish(session, exit_code(exc.code))
        raise
    except BaseException as exc:
        _report_failure(session, exc)
        raise
    _finish(session, 0)
    return 0


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


def exit_code(code: object) -> int:
    """The process exit status ``SystemExit(code)`` produces (``sys.exit("text")`` gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _start_session(command: list[str]) -> WorkerSession | None:
    environment = WorkerEnvironment.from_environ()
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


if __name__ == "__main__":
    _output.attach_output()  # first: every line the process writes from here on is attributed to its rank
    sys.exit(main())
