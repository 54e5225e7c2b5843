"""PyTorch's Flight Recorder in every rank: switched on, and read when the runner asks for stacks.

torch (>= 2.5) keeps a ring of the last collectives each process group ran (sequence
id, op, sizes, state) when ``TORCH_FR_BUFFER_SIZE`` (gloo, and NCCL in torch >= 2.8)
or ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (NCCL, older torch) is set before the first
process group is created. The bootstrap sets both, unless the user did, from
``RANKWATCH_FLIGHT_RECORDER`` (entries, default ``DEFAULT_ENTRIES``; ``0`` turns it
off), and points NCCL's dump-on-timeout files (``TORCH_FR_DUMP_TEMP_FILE``) into
the run's stacks folder. A ring of 2,000 entries costs well under a MiB and a few hundred ns per
collective.

Reading it needs Python, which a rank blocked inside a collective still runs on
other threads (``Work.wait`` releases the GIL). The reporter thread reads it when
the rank's stack file grew (the runner sent ``STACK_SIGNAL``, on a stall or on
demand) and sends it as a ``FlightRecord`` message: the rank's process groups, the
last collective each enqueued and completed, and its last ``MAX_ENTRIES`` entries
(without stack traces). ``torch._C._distributed_c10d._dump_fr_trace`` returns a
pickle made by torch itself in this process.
"""

from __future__ import annotations

import os
import pickle
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import MutableMapping

SETTING = "RANKWATCH_FLIGHT_RECORDER"
"""Entries per process group to record; ``0`` leaves the Flight Recorder off."""
DEFAULT_ENTRIES = 2000
TORCH_SETTINGS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
LEGACY_SETTING = "TORCH_NCCL_TRACE_BUFFER_SIZE"
"""NCCL's name before torch 2.8; set only for such a torch (newer ones warn that it is deprecated)."""
STACKS_DIR = "RANKWATCH_STACKS_DIR"
NCCL_DUMP_PREFIX = "nccl-trace-rank-"
"""``TORCH_FR_DUMP_TEMP_FILE`` is a prefix: torch appends the rank (``runner.diagnosis.flight_records``)."""
MAX_ENTRIES = 64
"""Entries sent per dump: the newest ones, where a hang is."""
ENTRY_FIELDS = (
    "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
    "state", "retired", "is_p2p", "input_sizes", "input_dtypes", "output_sizes", "time_created_ns",
    "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms",
)  # fmt: skip


def enable(environ: MutableMapping[str, str] | None = None) -> int:
    """Switch the Flight Recorder on for this process; returns the entries set (0: off).

    A value the user set for torch's own variables is left as it is.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(SETTING, "").strip()
    try:
        entries = int(text) if text else DEFAULT_ENTRIES
    except ValueError:
        _warn(f"{SETTING}={text!r} is not a number of entries; the Flight Recorder keeps {DEFAULT_ENTRIES}")
        entries = DEFAULT_ENTRIES
    if entries <= 0:
        return 0
    for name in TORCH_SETTINGS:
        if name == LEGACY_SETTING and not _torch_before((2, 8)):
            continue  # torch >= 2.8 warns on every rank that this name is deprecated
        environ.setdefault(name, str(entries))
    stacks_dir = environ.get(STACKS_DIR)
    if stacks_dir:  # NCCL's own dump on a watchdog timeout goes next to the stack dumps
        environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(stacks_dir, NCCL_DUMP_PREFIX))
    return entries


def _torch_before(version: tuple[int, int]) -> bool:
    """Whether the torch this interpreter would import is older than ``version``.

    Read from ``torch/version.py`` without importing torch (seconds) before the script
    does; an unreadable version counts as new (the current variable name only).
    """
    # Not importlib's find_spec: it would ask every meta path finder, the bootstrap's
    # torch-import hook (``_torch_hook``) included, which then sees "torch" and is spent.
    for entry in sys.path:
        path = os.path.join(entry or os.curdir, "torch", "version.py")
        try:
            with open(path, encoding="utf-8") as source:
                for line in source:
                    if line.startswith("__version__"):
                        text = line.split("=", 1)[1].strip().strip("'\"")
                        major, minor = (int(part) for part in text.split(".")[:2])
                        return (major, minor) < version
        except OSError:
            continue  # not in this folder of sys.path
        except ValueError:
            return False
    return False


def snapshot() -> dict[str, object] | None:
    """This rank's Flight Recorder, as plain JSON values; None without torch or a process group.

    Never raises: a torch without the recorder, or one whose dump changed shape,
    gives ``{"error": ...}`` so the runner can say why it is missing.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        distributed = torch.distributed
        if not distributed.is_available() or not distributed.is_initialized():
            return None
        dump = torch._C._distributed_c10d._dump_fr_trace
    except Exception:
        return {"error": "this torch has no Flight Recorder (torch >= 2.5 with torch.distributed)"}
    try:
        trace = pickle.loads(dump(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    except Exception as exc:
        return {"error": f"the Flight Recorder could not be read ({type(exc).__name__}: {exc})"}
    return from_trace(trace)


def from_trace(trace: object) -> dict[str, object]:
    """The fields the runner reads, from torch's dump (a dict; tuples become lists)."""
    if not isinstance(trace, dict):
        return {"error": "the Flight Recorder's dump is not a mapping"}
    entries = trace.get("entries") or []
    kept = [{name: _plain(entry.get(name)) for name in ENTRY_FIELDS} for entry in entries[-MAX_ENTRIES:]
            if isinstance(entry, dict)]
    return {
        "version": _plain(trace.get("version")),
        "pg_config": _plain(trace.get("pg_config") or {}),
        "pg_status": _plain(trace.get("pg_status") or {}),
        "entries": kept,
        "total_entries": len(entries),
        "buffer_size": os.environ.get(TORCH_SETTINGS[0]),
    }


def _plain(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"rankwatch: {message}\n")
    except Exception:
        pass
