"""The contract between the runner (and torchrun) and a worker, read from the environment.

The runner passes what a worker needs the way torchrun passes ``RANK``: by
environment variables. This module is the one place that reads them, so the
contract is written down once:

================================  ==================================================
``RANKWATCH_SOCKET``              hub address: a Unix socket path or ``tcp://HOST:PORT``;
                                  absent means "not launched by Rankwatch"
``RANKWATCH_TOKEN``               the job's token, sent in ``hello``
``RANKWATCH_RUN_KEY``           the run key (also a marker the runner looks for in
                                  process environments: never removed)
``RANKWATCH_RUN``                 run id (int)
``RANKWATCH_NODE_RANK``           node rank when torchrun's ``GROUP_RANK`` is missing
``RANKWATCH_NODE_HOST``           host name to report (default: ``socket.gethostname()``)
``RANKWATCH_INSTRUMENT``          "1": zero-code instrumentation when torch is imported
``RANKWATCH_LEGACY_LOCAL_RANK``   "1": pass ``--local_rank=<LOCAL_RANK>`` to the script
``RANKWATCH_STACKS_DIR``          folder for faulthandler stack dumps
``RANKWATCH_HASH_EVERY``          N > 0: parameter fingerprint every N optimizer steps
``RANKWATCH_QUEUE_LIMIT``         records held in memory before dropping (default
                                  ``_buffer.DEFAULT_LIMIT``; a knob for tests)
``RANKWATCH_LAUNCH_MODE``         "self-spawn": the script was started directly, to start
                                  its own ranks or be the only one (``_spawn``); absent:
                                  under torchrun
``RANKWATCH_EXPAND_ARGS``         "1": the script's arguments hold per-rank templates
                                  (``_templates``), expanded in each process
``RANKWATCH_INIT_FILE``           the file ``{init_method:file}`` names
================================  ==================================================

plus torchrun's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``TORCHELASTIC_RESTART_COUNT`` and ``TORCHELASTIC_ERROR_FILE``.

A malformed value falls back to its default: a typo in the launcher must not
stop the user's training.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from rankwatch._buffer import DEFAULT_LIMIT

BOOTSTRAP_MODULE = "rankwatch._bootstrap"
"""torchrun runs ``python -u -m rankwatch._bootstrap SCRIPT ARGS...`` for each worker."""

# Variable names, for the runner to import instead of spelling them again.
SOCKET = "RANKWATCH_SOCKET"
TOKEN = "RANKWATCH_TOKEN"
RUN_KEY = "RANKWATCH_RUN_KEY"
RUN = "RANKWATCH_RUN"
NODE_RANK = "RANKWATCH_NODE_RANK"
NODE_HOST = "RANKWATCH_NODE_HOST"
INSTRUMENT = "RANKWATCH_INSTRUMENT"
LEGACY_LOCAL_RANK = "RANKWATCH_LEGACY_LOCAL_RANK"
STACKS_DIR = "RANKWATCH_STACKS_DIR"
HASH_EVERY = "RANKWATCH_HASH_EVERY"
QUEUE_LIMIT = "RANKWATCH_QUEUE_LIMIT"
LAUNCH_MODE = "RANKWATCH_LAUNCH_MODE"
SELF_SPAWN = "self-spawn"
"""``LAUNCH_MODE``'s value for a script that starts its own ranks."""


def is_self_spawn(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the runner started the script directly, to start its own ranks (``_spawn``)."""
    environ = os.environ if environ is None else environ
    return environ.get(LAUNCH_MODE, "").strip() == SELF_SPAWN


@dataclass(frozen=True)
class WorkerEnvironment:
    """What this worker was told by the runner and torchrun."""

    address: str
    token: str
    run_key: str
    run: int | None
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    host: str
    restart: int
    instrument: bool
    stacks_dir: str | None
    hash_every: int
    queue_limit: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> WorkerEnvironment | None:
        """The worker's environment, or None when ``RANKWATCH_SOCKET`` is not set."""
        environ = os.environ if environ is None else environ
        address = environ.get(SOCKET, "").strip()
        if not address:
            return None
        node_rank = _integer(environ, "GROUP_RANK", None)
        if node_rank is None:
            node_rank = _integer(environ, NODE_RANK, 0)
        return cls(
            address=address,
            token=environ.get(TOKEN, ""),
            run_key=environ.get(RUN_KEY, ""),
            run=_integer(environ, RUN, None),
            rank=_integer(environ, "RANK", 0),
            local_rank=_integer(environ, "LOCAL_RANK", 0),
            node_rank=node_rank,
            world_size=_integer(environ, "WORLD_SIZE", 1),
            local_world_size=_integer(environ, "LOCAL_WORLD_SIZE", 1),
            host=environ.get(NODE_HOST) or socket.gethostname(),
            restart=_integer(environ, "TORCHELASTIC_RESTART_COUNT", 0),
            instrument=environ.get(INSTRUMENT, "1").strip() == "1",
            stacks_dir=environ.get(STACKS_DIR) or None,
            hash_every=max(0, _integer(environ, HASH_EVERY, 0)),
            queue_limit=max(0, _integer(environ, QUEUE_LIMIT, DEFAULT_LIMIT)),
        )


def legacy_local_rank_argument(environ: Mapping[str, str] | None = None) -> str | None:
    """``--local_rank=<LOCAL_RANK>`` when the runner asked for torch.distributed.launch's flag.

    Independent of ``RANKWATCH_SOCKET``: it changes what the script sees, not telemetry.
    """
    environ = os.environ if environ is None else environ
    if environ.get(LEGACY_LOCAL_RANK, "").strip() != "1":
        return None
    return f"--local_rank={_integer(environ, 'LOCAL_RANK', 0)}"


def error_file_path(environ: Mapping[str, str] | None = None) -> str | None:
    """Where torchrun wants this worker's failure written (``TORCHELASTIC_ERROR_FILE``)."""
    environ = os.environ if environ is None else environ
    return environ.get("TORCHELASTIC_ERROR_FILE") or None


def _integer(environ: Mapping[str, str], name: str, default):
    try:
        return int(environ[name])
    except (KeyError, ValueError):
        return default
