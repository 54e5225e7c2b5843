"""Launcher mismatches seen from inside a rank: a script that does not fit torchrun's contract.

torchrun starts one process per rank and tells each its rank through the
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT``). Scripts
written for other launchers break under it in ways that look like hangs or
unrelated errors. Two of them can only be seen from inside the rank, as they
happen, so this module watches for them and sends a ``notice`` to the runner
(which words the diagnosis, ``runner.diagnosis.launcher``):

* ``self_spawn``: the script starts its own processes with
  ``torch.multiprocessing.spawn`` / ``start_processes``. Under torchrun the
  children inherit ``TORCHELASTIC_USE_AGENT_STORE=True``; their
  ``init_process_group`` then waits for a store that nobody serves (or joins
  torchrun's store with clashing ranks). Seen by wrapping the two functions once
  torch is imported; the call itself goes on unchanged. The same for a
  ``multiprocessing.Process`` whose target reaches ``init_process_group`` (PyTorch's
  "Writing Distributed Applications" harness, ``_rank_starters``), seen at its ``start``.
* ``local_rank_unpassed``: the script's argparse parser declares ``--local_rank``
  (or ``--local-rank``, torch.distributed.launch's argument), the runner's legacy
  option is off so nothing passed it, and the value the script got differs from
  this process's ``LOCAL_RANK``: every rank silently uses the same local rank.

And one it fixes: with the legacy option on, the bootstrap passes
``--local_rank=N``; a parser that only declares ``--local-rank`` (the spelling
torch >= 2.0's launch passes) is given ``--local-rank=N`` instead, and a
``local_rank_spelling`` notice says so.

The argparse part wraps ``ArgumentParser.parse_known_args`` (``parse_args`` and
the intermixed variants go through it): it only reads the parser's declared
options, may rewrite the one token the bootstrap itself added, and never raises
into the script. Parsers of frameworks (subclasses of ``ArgumentParser``, such as
transformers' ``HfArgumentParser``) declare ``--local_rank`` for compatibility and
read ``LOCAL_RANK`` themselves, so only plain ``ArgumentParser`` instances are
checked for the unpassed option.

Standard library only (this runs in the user's interpreter).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from rankwatch import _rank_starters, _torch_hook

Notify = Callable[..., None]
"""``notify(key, **facts)``: sends a ``notice`` message (``WorkerSession.notice``)."""

LOCAL_RANK_OPTIONS = ("--local_rank", "--local-rank")
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
"""Set by torchrun for its workers; inherited by processes they spawn, which then look for its store."""
SPAWN_FUNCTIONS = ("spawn", "start_processes")

_lock = threading.Lock()
_installed = False


def install(notify: Notify | None, legacy_argument: str | None) -> None:
    """Watch for the mismatches above; ``legacy_argument`` is the token the bootstrap put in argv.

    ``notify`` None (telemetry off): only the spelling fix is applied. Idempotent.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    checker = _ArgumentCheck(notify, legacy_argument)
    original = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, args=None, namespace=None):
        args = checker.before(self, args)
        result = original(self, args, namespace)
        checker.after(self, args, result)
        return result

    parse_known_args.__wrapped__ = original  # type: ignore[attr-defined]
    parse_known_args.__doc__ = original.__doc__
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    if notify is not None:
        _torch_hook.call_when_imported(lambda torch: _wrap_spawn(torch, notify))
        _torch_hook.call_when_imported(lambda torch: _wrap_process_start(notify))


# ---- argparse ---------------------------------------------------------------------------------


class _ArgumentCheck:
    def __init__(self, notify: Notify | None, legacy_argument: str | None):
        self.notify = notify
        self.legacy_argument = legacy_argument
        self.reported = False

    def before(self, parser: argparse.ArgumentParser, args: Any) -> Any:
        """``args`` with the bootstrap's ``--local_rank=N`` respelled to what ``parser`` declares."""
        if self.legacy_argument is None:
            return args
        try:
            tokens = sys.argv[1:] if args is None else args
            if not isinstance(tokens, list) or self.legacy_argument not in tokens:
                return args
            declared = _declared(parser)
            given, value = self.legacy_argument.split("=", 1)
            if given in declared or not declared:
                return args
            spelling = declared[0]
            respelled = f"{spelling}={value}"
            tokens = [respelled if token == self.legacy_argument else token for token in tokens]
            if self.legacy_argument in sys.argv:
                sys.argv[sys.argv.index(self.legacy_argument)] = respelled
            self.legacy_argument = respelled
            if self.notify is not None:
                self.notify("local_rank_spelling", passed=spelling, instead_of=given)
            return tokens
        except Exception:
            return args

    def after(self, parser: argparse.ArgumentParser, args: Any, result: Any) -> None:
        if self.legacy_argument is not None or self.notify is None or self.reported:
            return
        try:
            if type(parser) is not argparse.ArgumentParser or "LOCAL_RANK" not in os.environ:
                return
            declared = _declared(parser)
            if not declared:
                return
            tokens = sys.argv[1:] if args is None else list(args)
            if any(token == option or token.startswith(option + "=") for token in tokens for option in declared):
                return  # the script was given one explicitly
            action = parser._option_string_actions[declared[0]]
            namespace = result[0] if isinstance(result, tuple) else result
            value = getattr(namespace, action.dest, None)
            local_rank = int(os.environ["LOCAL_RANK"])
            if value == local_rank:
                return
            self.reported = True
            self.notify("local_rank_unpassed", option=declared[0],
                        value=value if isinstance(value, (int, float, str, type(None))) else repr(value),
                        local_rank=local_rank)
        except Exception:
            pass


def _declared(parser: argparse.ArgumentParser) -> list[str]:
    """The local-rank spellings ``parser`` accepts, in the order it declares them."""
    options = getattr(parser, "_option_string_actions", None) or {}
    return [option for option in options if option in LOCAL_RANK_OPTIONS]


# ---- torch.multiprocessing.spawn --------------------------------------------------------------


def _wrap_spawn(torch: Any, notify: Notify) -> None:
    multiprocessing = getattr(torch, "multiprocessing", None) or sys.modules.get("torch.multiprocessing")
    if multiprocessing is None:
        return
    for name in SPAWN_FUNCTIONS:
        original = getattr(multiprocessing, name, None)
        if callable(original) and not getattr(original, "_rankwatch_wrapped", False):
            setattr(multiprocessing, name, _spawn_wrapper(original, f"torch.multiprocessing.{name}", notify))


def _spawn_wrapper(original: Callable, qualified_name: str, notify: Notify) -> Callable:
    def wrapper(*args, **kwargs):
        if AGENT_STORE in os.environ:
            try:
                caller = sys._getframe(1)
                nprocs = kwargs.get("nprocs", args[2] if len(args) > 2 else 1)
                notify("self_spawn", function=qualified_name,
                       nprocs=nprocs if isinstance(nprocs, int) else None,
                       file=caller.f_code.co_filename, line=caller.f_lineno, function_name=caller.f_code.co_name)
            except Exception:
                pass
        return original(*args, **kwargs)

    wrapper._rankwatch_wrapped = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", "spawn")
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper


# ---- multiprocessing.Process ------------------------------------------------------------------


def _wrap_process_start(notify: Notify) -> None:
    """Report the first ``Process`` started under torchrun whose target starts a rank. Installed
    once torch is imported: importing ``multiprocessing`` before the script runs would make the
    bootstrap its ``__mp_main__`` (``_spawn.Launcher.install``)."""
    import multiprocessing.process

    base = multiprocessing.process.BaseProcess
    original = base.start
    if getattr(original, "_rankwatch_wrapped", False):
        return
    reported = [False]

    def start(process):
        if not reported[0] and AGENT_STORE in os.environ:
            try:
                target = getattr(process, "_target", None)
                if target is not None and _rank_starters.starts_a_rank(target):
                    reported[0] = True
                    caller = sys._getframe(1)
                    notify("self_spawn", function="multiprocessing.Process", nprocs=None,
                           file=caller.f_code.co_filename, line=caller.f_lineno,
                           function_name=caller.f_code.co_name)
            except Exception:
                pass
        return original(process)

    start._rankwatch_wrapped = True  # type: ignore[attr-defined]
    start.__wrapped__ = original  # type: ignore[attr-defined]
    start.__doc__ = original.__doc__
    base.start = start  # type: ignore[method-assign]
