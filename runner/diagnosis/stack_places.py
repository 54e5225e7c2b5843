"""Where one rank is, read from its main-thread stack: in a collective, in the data loader, or in its own code.

A hung job is answered by where each rank waits: the ranks inside a collective
wait for the one that is not (``hang_verdict``). faulthandler gives file:line and
function of every Python frame; this module names the *kind* of place from the
library frames (torch's own files) and finds the deepest frame of the user's own
code, whose source line it reads, as py-spy shows it.

Kinds (``Place.kind``)::

    collective   inside torch.distributed (barrier, all_reduce, broadcast, ...);
                 ``op`` is the c10d function the user's code called
    init         waiting for peers through the store: init_process_group, new_group
    work_wait    the user's line waits on an async collective's handle (``work.wait()``:
                 C code, no Python frame below the user's)
    backward     inside autograd's backward: under DDP the gradient all-reduce waits there
    cuda_sync    a CUDA synchronise (torch.cuda.synchronize, a stream's or event's)
    spawn_wait   waiting for processes it started (torch.multiprocessing.spawn)
    data_loader  inside torch.utils.data (the DataLoader iterator, a worker's queue)
    user         anywhere else: the user's own code (a sleep, a loop, a lock, I/O)

The first five are *waits for other ranks* (``WAITING_KINDS``). A kind that only
runs library code (a collective, a CUDA sync) counts when it is the innermost
library frame; the data loader and backward also count with the user's code
running inside them (a dataset's ``__getitem__``, a custom backward).

Raises nothing; an unreadable source line is ``None``.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass, field

from runner.diagnosis.stack_dumps import Frame
from runner.runstate.messages import JsonObject

COLLECTIVE, INIT, WORK_WAIT, BACKWARD, CUDA_SYNC, SPAWN_WAIT, DATA_LOADER, USER = (
    "collective", "init", "work_wait", "backward", "cuda_sync", "spawn_wait", "data_loader", "user")
WAITING_KINDS = frozenset({COLLECTIVE, INIT, WORK_WAIT, BACKWARD, CUDA_SYNC})
"""Kinds where a rank waits for other ranks (or for the GPU running their collective)."""

LIBRARY_PATH = re.compile(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d+(?:\.\d+)?t?[/\\]|"
                          r"^<frozen |[/\\]rankwatch[/\\]_\w+\.py$")
"""Installed packages, the standard library, frozen modules, Rankwatch's worker-side modules."""
TORCH_FILE = re.compile(r"[/\\]torch[/\\](?P<inner>(?P<top>[\w.]+)(?:[/\\].*)?)$")
TORCH_TOP_LEVEL = frozenset({
    "distributed", "utils", "autograd", "cuda", "multiprocessing", "nn", "optim", "amp", "_dynamo", "_inductor",
    "fx", "jit", "profiler", "backends", "_tensor.py", "functional.py", "serialization.py", "__init__.py",
    "_ops.py", "overrides.py", "_compile.py", "library.py", "_utils.py", "random.py", "storage.py"})
"""torch's own files (a folder named ``torch`` in the user's project is not torch unless it looks like it)."""
INIT_FUNCTIONS = ("init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration",
                  "init_device_mesh", "_store_based_barrier")
CUDA_SYNC_FUNCTIONS = frozenset({"synchronize", "wait_stream", "wait_event", "wait"})
WORK_WAIT_LINE = re.compile(r"\.wait\(\s*(?:timeout\s*=.*)?\)")
SYNCHRONIZE_LINE = re.compile(r"\.synchronize\(\s*\)")
MAX_CODE_CHARS = 160

WHAT = {
    COLLECTIVE: "waits in {op}",
    INIT: "waits for peers in {op}",
    WORK_WAIT: "waits on a collective's handle ({op})",
    BACKWARD: "waits in backward (DDP all-reduces gradients there)",
    CUDA_SYNC: "waits for the GPU ({op})",
    SPAWN_WAIT: "waits for spawned processes ({op})",
    DATA_LOADER: "is in the data loader",
    USER: "is in its own code",
}


def plural(what: str) -> str:
    """A place's words for several ranks: ``waits in barrier`` -> ``wait in barrier``, ``is in its own code`` ->
    ``are in their own code``."""
    what = what.replace(" its ", " their ")
    if what.startswith("is "):
        return "are " + what[3:]
    first, _, rest = what.partition(" ")
    return (first[:-1] if first.endswith("s") else first) + (" " + rest if rest else "")


def source_line(file: str, line: int | None) -> str | None:
    """The text of ``file``'s line ``line``, stripped, or None when it cannot be read."""
    if line is None or not file or file.startswith("<"):
        return None
    try:
        linecache.checkcache(file)
        text = linecache.getline(file, line).strip()
    except Exception:  # a file that changed under us, a decoding problem: no text, not a failure
        return None
    if not text:
        return None
    return text if len(text) <= MAX_CODE_CHARS else text[: MAX_CODE_CHARS - 1] + "…"


def is_user_code(frame: Frame) -> bool:
    """A frame of the user's own code: not the standard library, an installed package or torch itself."""
    return not (LIBRARY_PATH.search(frame.file) or _torch_inner(frame) is not None)


def _torch_inner(frame: Frame) -> str | None:
    """``distributed/distributed_c10d.py`` for a frame in torch (installed or a source tree), else None."""
    found = TORCH_FILE.search(frame.file)
    if found is None or found.group("top") not in TORCH_TOP_LEVEL:
        return None
    return found.group("inner").replace("\\", "/")


@dataclass(frozen=True)
class Place:
    """Where one rank's main thread is."""

    kind: str
    op: str | None = None
    """The collective or wait: ``barrier``, ``init_process_group``, ``torch.cuda.synchronize``."""
    frame: Frame | None = None
    """The deepest frame of the user's own code (None: no user frame in the stack)."""
    code: str | None = None
    """That frame's source line."""
    chain: tuple[str, ...] = ()
    """The user's functions that led there, outermost first (``<module>``, ``main``, ``helper``)."""
    innermost: Frame | None = None
    """The innermost frame of all (the library function it is in, when that is not the user's)."""
    library_code: str | None = field(default=None, compare=False)

    @property
    def waiting(self) -> bool:
        return self.kind in WAITING_KINDS

    @property
    def what(self) -> str:
        """``waits in barrier``, ``is in the data loader``, ``is in its own code``."""
        return WHAT[self.kind].format(op=self.op or "?")

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "op": self.op, "what": self.what,
                "frame": None if self.frame is None else {**self.frame.to_json(), "code": self.code},
                "chain": list(self.chain),
                "innermost": None if self.innermost is None else self.innermost.to_json()}


def place_of(frames: list[Frame]) -> Place:
    """Classify one rank's main-thread stack (oldest call first, launcher frames removed)."""
    if not frames:
        return Place(USER)
    user_indices = [index for index, frame in enumerate(frames) if is_user_code(frame)]
    deepest = user_indices[-1] if user_indices else None
    user_frame = frames[deepest] if deepest is not None else None
    code = source_line(user_frame.file, user_frame.line) if user_frame is not None else None
    chain = tuple(frames[index].function for index in user_indices)

    def at(kind: str, op: str | None) -> Place:
        return Place(kind, op, frame=user_frame, code=code, chain=chain, innermost=frames[-1])

    tail = frames[deepest + 1:] if deepest is not None else frames
    found = _library_wait(tail)
    if found is not None:
        return at(found[0], found[1])
    container = _container(frames[:deepest] if deepest is not None else [])
    if container is not None:
        return at(container, None)
    if not tail and code is not None:  # the user's line is the innermost frame: a C call
        if WORK_WAIT_LINE.search(code):
            return at(WORK_WAIT, "Work.wait")
        if SYNCHRONIZE_LINE.search(code):
            return at(CUDA_SYNC, "synchronize")
    return at(USER, None)


def _library_wait(tail: list[Frame]) -> tuple[str, str | None] | None:
    """The kind of wait of the library frames below the user's deepest frame, innermost first."""
    inner_paths = [_torch_inner(frame) for frame in tail]
    if any(path and path.startswith("distributed/") for path in inner_paths):
        functions = [frame.function for frame, path in zip(tail, inner_paths, strict=True)
                     if path and path.startswith("distributed/")]
        for name in INIT_FUNCTIONS:
            if name in functions:
                return INIT, name.lstrip("_")
        c10d = [frame.function for frame, path in zip(tail, inner_paths, strict=True)
                if path == "distributed/distributed_c10d.py" and not frame.function.startswith("_")]
        return COLLECTIVE, (c10d[0] if c10d else functions[-1])
    for frame, path in zip(reversed(tail), reversed(inner_paths), strict=True):
        if path is None:
            continue
        if path == "multiprocessing/spawn.py":
            return SPAWN_WAIT, "torch.multiprocessing.spawn"
        if path.startswith("cuda/") and frame.function in CUDA_SYNC_FUNCTIONS:
            return CUDA_SYNC, f"torch.cuda.{frame.function}" if path == "cuda/__init__.py" else frame.function
        if path == "nn/parallel/distributed.py":
            return COLLECTIVE, f"DistributedDataParallel.{frame.function}"
        if path.startswith("autograd/") or (path == "_tensor.py" and frame.function == "backward"):
            return BACKWARD, "backward"
        if path.startswith("utils/data/"):
            return DATA_LOADER, None
    return None


def _container(outer: list[Frame]) -> str | None:
    """A library region that runs the user's code inside it (the data loader, backward), innermost first."""
    for frame in reversed(outer):
        path = _torch_inner(frame)
        if path is None:
            continue
        if path.startswith("utils/data/"):
            return DATA_LOADER
        if path.startswith("autograd/") or (path == "_tensor.py" and frame.function == "backward"):
            return BACKWARD
    return None


def frame_text(frame: JsonObject | Frame | None, full: bool = True) -> str:
    """``/abs/train.py:36 in main`` (``train.py:36 in main`` when not ``full``)."""
    if frame is None:
        return "?"
    if isinstance(frame, Frame):
        frame = frame.to_json()
    path = str(frame.get("file") or "?")
    line = frame.get("line")
    return f"{path if full else os.path.basename(path)}:{'?' if line is None else line} in {frame.get('function')}"
