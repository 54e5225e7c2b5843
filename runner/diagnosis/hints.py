"""The catalogue of known failure causes, each with what to do about it.

A hint is a pure function of the evidence (the first failure, the other ranks'
failures, the tails of their stderr, torchrun's own lines, the launch settings,
the kernel log). Each rule has a unit test on the real text of a real failing
job (``tests/diagnosis/test_hints.py``); the common ones also have an end-to-end
test with a real torchrun job.

Rules look at the first failure's own text when there is one (its exception,
traceback and stderr): after a rank dies, the survivors print errors of their own
("Connection closed by peer", NCCL aborts) that are consequences, not causes.
Launcher-level causes (a taken port, a rendezvous timeout) are searched in every
line, torchrun's included. Rules are tried in catalogue order; the summary lists
every hint that matched, the first one leading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from rankwatch.protocol import NO_PROCESS_GROUP
from runner.diagnosis.findings import LauncherFinding
from runner.diagnosis.stack_dumps import Frame
from runner.diagnosis.stack_places import BACKWARD, Place, is_user_code, place_of
from runner.exit_status import PEER_GONE
from runner.format import format_bytes, ranks_text
from runner.rank_failure import RankFailure
from runner.runstate.messages import JsonObject


class HintKey(str, Enum):
    """What a hint is about: one value per known cause, for its producers (the rules below, the
    launcher checks, ``independent_ranks``) and its readers (triage's headline, the GUI). A launcher
    mismatch's key is the worker's notice key (``rankwatch._launch_checks``, ``_group_check``).

    ``OTHER`` is what a reader makes of a key it does not know (a summary stored by another version).
    """

    ADDRESS_IN_USE = "address_in_use"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    CRASH_AFTER_THE_SCRIPT_RETURNED = "crash_after_the_script_returned"
    CUDA_OUT_OF_MEMORY = "cuda_out_of_memory"
    CUDA_UNAVAILABLE = "cuda_unavailable"
    DDP_DEVICE_IDS_ON_CPU = "ddp_device_ids_on_cpu"
    DUPLICATE_RANK = "duplicate_rank"
    KILLED = "killed"
    LEGACY_LOCAL_RANK = "legacy_local_rank"
    LOCAL_RANK_SPELLING = "local_rank_spelling"
    LOCAL_RANK_UNPASSED = "local_rank_unpassed"
    MISMATCHED_COLLECTIVE = "mismatched_collective"
    MISSING_MODULE = "missing_module"
    NATIVE_CRASH = "native_crash"
    NCCL_ERROR = "nccl_error"
    NO_PROCESS_GROUP = NO_PROCESS_GROUP
    NO_RANK_REPORTED = "no_rank_reported"
    NO_STEP_MEASURED = "no_step_measured"
    NODE_LOST = "node_lost"
    OOM_KILLER = "oom_killer"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    SELF_SPAWN = "self_spawn"
    TWO_RANKS_ONE_GPU = "two_ranks_one_gpu"
    UNEXPECTED_LOCAL_RANK = "unexpected_local_rank"
    OTHER = "other"


@dataclass(frozen=True)
class Hint:
    """A known cause and what to do about it: in the summary's ``hints`` (``to_json``), read back by
    the CLI and the GUI (``from_json``)."""

    key: HintKey
    cause: str
    advice: str

    def to_json(self) -> JsonObject:
        return {"key": self.key.value, "cause": self.cause, "advice": self.advice}

    @classmethod
    def from_json(cls, data: JsonObject) -> Hint:
        """Lenient: a key this version does not know is ``OTHER``; missing texts are empty."""
        try:
            key = HintKey(str(data.get("key") or ""))
        except ValueError:
            key = HintKey.OTHER
        return cls(key, str(data.get("cause") or ""), str(data.get("advice") or ""))

    @property
    def text(self) -> str:
        """``cause → advice``, as one line."""
        return f"{self.cause} → {self.advice}" if self.advice else self.cause


@dataclass(frozen=True)
class GpuMemory:
    """A GPU's memory as NVML sampled it (bytes; None where NVML did not say)."""

    gpu_index: int
    used: int | None
    total: int | None
    t: float

    @property
    def free(self) -> int | None:
        return None if self.used is None or self.total is None else max(0, self.total - self.used)


@dataclass(frozen=True)
class RunPortHolder:
    """Who held a port while the run went on, looked up at once (after the run it is gone)."""

    pid: int
    command: str | None
    rank: int | None
    """The rank of this run that holds it; None: a process of no rank."""


@dataclass
class Evidence:
    first: RankFailure | None
    others: list[RankFailure] = field(default_factory=list)
    launcher_lines: list[str] = field(default_factory=list)
    stderr_tails: dict[int, list[str]] = field(default_factory=dict)
    legacy_local_rank: bool = False
    backend: str | None = None
    cpu_mode: bool = False
    interpreter: str | None = None
    kernel_log: list[str] | None = None
    """The kernel's messages, or None when they could not be read (only read after a SIGKILL)."""
    rank_gpus: dict[int, tuple[str | None, int]] = field(default_factory=dict)
    """rank -> (host, GPU index) as sampled while the job ran."""
    port_holder: Callable[[int], str | None] | None = None
    """port -> the process listening on it now, when known."""
    first_is_remote: bool = False
    """The first failure ran on another machine (its kernel log is there)."""
    launcher: list[LauncherFinding] = field(default_factory=list)
    """Launcher mismatches seen while the run went on (``launcher``)."""
    script_args: list[str] = field(default_factory=list)
    """The script's arguments (torchrun passes the same ones to every rank)."""
    port_holders: dict[int, RunPortHolder] = field(default_factory=dict)
    """port -> its holder while the run went on."""
    world_size: int | None = None
    script_returned: bool = False
    """The first failure's script ran to its end (its bootstrap reported exit code 0) before the
    process died: the failure came after, while Python shut down."""
    rank_gpu_memory: dict[int, GpuMemory] = field(default_factory=dict)
    """rank -> its GPU's memory at the last NVML sample that saw the rank's process on it."""
    gpu_mem_peaks: dict[int, int] = field(default_factory=dict)
    """rank -> the most its tensors held at once (torch's allocator; its newest ``gpu_mem_peak`` record)."""
    finished: dict[int, float] = field(default_factory=dict)
    """rank -> when its script ran to its end (its bootstrap reported exit code 0)."""
    run_id: int | None = None
    """The run's id, for the commands a hint names (``rankwatch runs logs 12``)."""

    def first_text(self) -> str:
        """Everything known about the first failure, as one searchable text."""
        parts = []
        if self.first is not None:
            parts += [self.first.exception_line or "", self.first.traceback or ""]
            parts += self.stderr_tails.get(self.first.rank, []) if self.first.rank is not None else []
        return "\n".join(parts)

    def all_text(self) -> str:
        lines = list(self.launcher_lines)
        for tail in self.stderr_tails.values():
            lines += tail
        return "\n".join([self.first_text(), *lines])

    def cause_text(self) -> str:
        """The first failure's own text, or everything when no rank failed first with any text."""
        text = self.first_text()
        return text if text.strip() else self.all_text()


Rule = Callable[[Evidence], Hint | None]
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    RULES.append(function)
    return function


def launcher_hint(launcher: list[LauncherFinding], key: str) -> Hint | None:
    """The hint for a launcher mismatch seen while the run went on (worded by ``runner.diagnosis.launcher``)."""
    for record in launcher:
        if record.key == key:
            return Hint.from_json({"key": key, "cause": record.cause or key, "advice": record.advice})
    return None


def run_reference(run_id: int | None) -> str:
    """How a command names this run: its id (``RUN``, the commands' own placeholder, only where no
    run was recorded)."""
    return "RUN" if run_id is None else str(run_id)


def find_hints(evidence: Evidence) -> list[Hint]:
    hints: list[Hint] = []
    for check in RULES:
        hint = check(evidence)
        if hint is not None and all(h.key != hint.key for h in hints):
            hints.append(hint)
    return hints


def no_rank_reported(self_spawn: bool, spawn_call: str | None, cpu_mode: bool, run_id: int | None = None) -> Hint:
    """A job that exited 0 without one rank saying hello: it trained nothing Rankwatch saw.

    Seen: the PyTorch DDP tutorial series' ``multigpu.py`` takes ``nprocs`` from
    ``torch.cuda.device_count()``, which is 0 in CPU mode, so ``mp.spawn`` starts nobody
    and the script exits 0 at once.
    """
    if self_spawn:
        spawn = f"its {spawn_call}" if spawn_call else "its spawn call"
        without_gpus = (": a count taken from torch.cuda.device_count() is 0 in CPU mode (no GPU for the ranks)"
                        if cpu_mode else "")
        return Hint(HintKey.NO_RANK_REPORTED, f"the script started no rank: {spawn} started no process, or the script "
                    f"ended before it{without_gpus}",
                    "give the spawn a number of processes that fits this machine (nprocs=...), or pick GPUs "
                    "(--gpus all) on a machine that has them; the script's own output is in "
                    f"`rankwatch runs logs {run_reference(run_id)}`")
    return Hint(HintKey.NO_RANK_REPORTED, "every process ended before its rank reported (before torch was imported, "
                "or the script has no work to do)",
                f"check the script's own output (`rankwatch runs logs {run_reference(run_id)}`): a usage message, "
                "an early exit")


def no_step_measured(run_id: int | None = None) -> Hint:
    """Every rank said hello and exited 0, and not one step or value came: the script trained nothing.

    Seen: PyTorch's FSDP2 example prints "Unable to locate sufficient 2 gpus" and
    exits 0 on a machine without two GPUs; Rankwatch said "all ranks finished".
    """
    return Hint(HintKey.NO_STEP_MEASURED, "no rank stepped an optimizer or ran a backward pass: the script ended "
                "before training (a check that failed, nothing to do) or trains without autograd",
                f"read the script's own output (`rankwatch runs logs {run_reference(run_id)}`); a loop Rankwatch "
                "cannot see can report its own values with rankwatch.log(loss=...)")


@rule
def self_spawn(evidence: Evidence) -> Hint | None:
    return launcher_hint(evidence.launcher, "self_spawn")


ADDRESS_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use|address is already in use")
TAKEN_PORT = re.compile(r"port[:= ]+(\d{2,5})|:(\d{2,5})\b.*in use")
RANK_ARGUMENT = re.compile(r"^--rank(?:=(?P<value>-?\d+))?$")
WORLD_SIZE_ARGUMENT = re.compile(r"^--world[_-]size(?:=(?P<value>\d+))?$")
INIT_METHOD_ARGUMENT = re.compile(r"^--(?:init[_-]method|dist[_-]url)(?:=(?P<value>.+))?$")


def _taken_port(text: str) -> int | None:
    found = TAKEN_PORT.search(text)
    which = next((group for group in found.groups() if group), None) if found else None
    return int(which) if which else None


def _argument(args: list[str], pattern: re.Pattern[str]) -> str | None:
    """The value of an option in ``args`` (``--opt V`` or ``--opt=V``), or None when absent."""
    for index, token in enumerate(args):
        found = pattern.match(token)
        if found:
            value = found.group("value")
            if value is None and index + 1 < len(args):
                value = args[index + 1]
            return value
    return None


def _holder_rank(evidence: Evidence, port: int | None) -> tuple[int | None, str]:
    """The rank of this run holding ``port`` and how we know it, or (None, "")."""
    held = evidence.port_holders.get(port) if port is not None else None
    if held is not None and held.rank is not None:
        return held.rank, f"pid {held.pid}"
    if evidence.world_size and evidence.first is not None:
        could_not_listen = {evidence.first.rank} | {
            other.rank for other in evidence.others if ADDRESS_IN_USE.search(other.exception_line or "")}
        candidates = [rank for rank in range(evidence.world_size) if rank not in could_not_listen]
        if len(candidates) == 1:
            return candidates[0], "the only rank that did not fail to listen"
    return None, ""


@rule
def duplicate_rank_argument(evidence: Evidence) -> Hint | None:
    """Every process got the same ``--rank R``: the second to claim rank 0 cannot host the store."""
    claimed = _argument(evidence.script_args, RANK_ARGUMENT)
    if claimed is None or not ADDRESS_IN_USE.search(evidence.all_text()):
        return None
    port = _taken_port(evidence.all_text())
    failed = evidence.first.rank if evidence.first is not None else None
    holder, how = _holder_rank(evidence, port)
    pair = sorted(r for r in {failed, holder} if r is not None)
    who = (f"ranks {pair[0]} and {pair[1]}" if len(pair) == 2 else
           f"rank {pair[0]} and another rank" if pair else "every rank")
    world = _argument(evidence.script_args, WORLD_SIZE_ARGUMENT)
    init = _argument(evidence.script_args, INIT_METHOD_ARGUMENT)
    given = f"--rank {claimed}" + (f" --world_size {world}" if world else "")
    where = f"port {port}" if port is not None else "the store's port"
    held = (f"; {where} is held by rank {holder} of this very run ({how}), not by a leftover of an earlier run"
            if holder is not None else f"; {where} is held by another rank of this very run")
    cause = (f"{who} both claimed rank {claimed}: torchrun passes the same arguments to every process, so each got "
             f"{given}{' --init_method ' + init if init else ''}; the first hosted the store, the next could not "
             f"listen on {where} (EADDRINUSE){held}")
    advice = ("under torchrun, take the rank from the environment: dist.init_process_group(backend) without rank, "
              "world_size and init_method (env:// reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or pass "
              "rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']); to keep the script's "
              "arguments, start one process per rank yourself, each with its own --rank, not through torchrun")
    return Hint(HintKey.DUPLICATE_RANK, cause, advice)


@rule
def address_in_use(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if not ADDRESS_IN_USE.search(text) or duplicate_rank_argument(evidence) is not None:
        return None
    which = _taken_port(text)
    where = f"port {which}" if which else "the rendezvous port"
    held = evidence.port_holders.get(which) if which is not None else None
    if held is not None and held.rank is not None:
        return Hint(HintKey.ADDRESS_IN_USE, f"{where} is held by rank {held.rank} of this very run (pid {held.pid})",
                    "two ranks tried to host the same store: give every rank its own RANK (torchrun does) and let "
                    "only rank 0 host it (dist.init_process_group with init_method env://)")
    holder = evidence.port_holder(int(which)) if which and evidence.port_holder is not None else None
    by = f" by {holder}" if holder else ""
    return Hint(HintKey.ADDRESS_IN_USE, f"{where} is already in use{by} (often a leftover of an earlier run)",
                "pick another master/rendezvous port, use the standalone rendezvous (a free port is picked), "
                "or stop the process holding it (`ss -ltnp` shows it)")


NO_DRIVER = re.compile(
    r"Found no NVIDIA driver on your system|ProcessGroupNCCL is only supported with GPUs|"
    r"No CUDA GPUs are available|no CUDA-capable device is detected|"
    r"CUDA driver version is insufficient|The NVIDIA driver on your system is too old|"
    r"Torch not compiled with CUDA enabled|NCCL is not available|Distributed package doesn't have NCCL")


@rule
def cuda_unavailable(evidence: Evidence) -> Hint | None:
    match = NO_DRIVER.search(evidence.cause_text())
    if not match:
        return None
    found = match.group(0)
    if "too old" in found or "insufficient" in found:
        return Hint(HintKey.CUDA_UNAVAILABLE, "the NVIDIA driver is too old for this torch build's CUDA",
                    "update the driver, or install a torch build for an older CUDA "
                    "(`rankwatch doctor` shows both versions)")
    if "not compiled with CUDA" in found or ("NCCL" in found and "GPUs" not in found):
        return Hint(HintKey.CUDA_UNAVAILABLE, "this torch build has no CUDA/NCCL (a CPU-only build)",
                    "install a CUDA build of torch in the chosen interpreter, or run in CPU mode "
                    "(--gpus cpu --backend gloo)")
    nccl = " with the nccl backend" if "NCCL" in found or evidence.backend == "nccl" else ""
    if evidence.cpu_mode:  # Rankwatch already runs the ranks without GPUs: the script asks for CUDA itself
        place = script_place(evidence.cause_text(), NO_DRIVER)
        at = f" ({place})" if place else ""
        if nccl:
            return Hint(HintKey.CUDA_UNAVAILABLE, f"this run is in CPU mode (no GPU for the ranks), but the script asks "
                        f"for the nccl backend itself{at}",
                        "let the script pick the backend Rankwatch exports: "
                        "dist.init_process_group(os.environ.get('RANKWATCH_BACKEND', 'gloo')); or pick GPUs "
                        "(--gpus all) on a machine that has them (`rankwatch doctor` shows what this one has)")
        return Hint(HintKey.CUDA_UNAVAILABLE, f"this run is in CPU mode (no GPU for the ranks), but the script asks "
                    f"for a CUDA device itself{at}",
                    "pick GPUs (--gpus all) on a machine that has them (`rankwatch doctor` shows what this one "
                    "has), or have the script choose its device from what there is: "
                    "device = 'cuda' if torch.cuda.is_available() else 'cpu'")
    return Hint(HintKey.CUDA_UNAVAILABLE, f"CUDA is not available here (no NVIDIA GPU or driver){nccl}",
                "run in CPU mode with gloo (--gpus cpu --backend gloo) and let the script pick the backend "
                "Rankwatch exports: dist.init_process_group(os.environ.get('RANKWATCH_BACKEND', 'gloo')); "
                "or run on a machine with an NVIDIA GPU and driver (`rankwatch doctor` shows what this one has)")


TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


def script_place(text: str, error: re.Pattern[str]) -> str | None:
    """``train.py:89: torch.cuda.set_device(device)``: the innermost frame of the user's own code
    in the first traceback of ``text`` that ends in ``error``; None when there is none."""
    place = None
    lines = text.splitlines()
    for index, line in enumerate(lines):
        found = TRACEBACK_FRAME.match(line)
        if found is None:
            if place is not None and error.search(line):
                return place
            continue
        frame = Frame(found["file"], int(found["line"]), found["function"].strip())
        if is_user_code(frame):
            following = lines[index + 1] if index + 1 < len(lines) else ""
            code = "" if TRACEBACK_FRAME.match(following) else following.strip()
            place = f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}" + (f": {code}" if code else "")
    return place


DDP_DEVICE_IDS_ON_CPU = re.compile(r"DistributedDataParallel device_ids and output_device arguments only work with "
                                   r".*?but got device_ids (?P<ids>\[[^\]]*\]).*?module parameters "
                                   r"\{device\(type='cpu'\)\}")


@rule
def ddp_device_ids_on_cpu(evidence: Evidence) -> Hint | None:
    """``DDP(model, device_ids=[local_rank])``, the GPU recipe, on a model whose parameters are on the CPU.

    Seen: a script written for GPUs run in CPU mode (gloo); torch raises "device_ids and output_device
    arguments only work with single-device/multiple-device GPU modules or CPU modules".
    """
    text = evidence.cause_text()
    found = DDP_DEVICE_IDS_ON_CPU.search(text)
    if found is None:
        return None
    place = script_place(text, DDP_DEVICE_IDS_ON_CPU)
    at = f" ({place})" if place else ""
    mode = "; this run is in CPU mode (no GPU for the ranks)" if evidence.cpu_mode else ""
    return Hint(HintKey.DDP_DEVICE_IDS_ON_CPU, f"DistributedDataParallel was given device_ids={found['ids']} for a model "
                f"whose parameters are on the CPU{at}: device_ids name GPUs, for a model already on one{mode}",
                "on the CPU, wrap without them: DDP(model); with GPUs, move the model to its GPU first "
                "(model.to(local_rank)) and keep device_ids=[local_rank]; for both: "
                "DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)")


OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")


@rule
def cuda_out_of_memory(evidence: Evidence) -> Hint | None:
    text = evidence.cause_text()
    if not OOM.search(text):
        return None
    size = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", text)
    gpu = re.search(r"GPU (\d+)", text)
    what = f" allocating {size.group(1)}" if size else ""
    where = f" on GPU {gpu.group(1)}" if gpu else ""
    measured = _oom_memory(evidence, gpu.group(1) if gpu else None)
    return Hint(HintKey.CUDA_OUT_OF_MEMORY, f"CUDA ran out of memory{what}{where}{measured}",
                "lower the per-GPU batch size (and use gradient accumulation), use mixed precision or "
                "activation checkpointing; check that no other process uses the GPU (`rankwatch gpus`); "
                "for fragmentation set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def _oom_memory(evidence: Evidence, torch_index: str | None) -> str:
    """``; GPU 0 had 1.2 GiB free of 79.6 GiB (NVML, at the last sample); rank 0's own peak: 77.1 GiB
    (torch's allocator)``: what was measured of the failed rank's GPU memory, where known."""
    first = evidence.first
    if first is None:
        return ""
    parts = []
    memory = evidence.rank_gpu_memory.get(first.rank) if first.rank is not None else None
    if memory is not None and memory.free is not None:
        # torch numbers the GPUs it was given (CUDA_VISIBLE_DEVICES), NVML every GPU of the machine
        named = (f"GPU {memory.gpu_index}" if torch_index in (None, str(memory.gpu_index))
                 else f"its GPU (GPU {memory.gpu_index} to nvidia-smi)")
        parts.append(f"{named} had {format_bytes(memory.free)} free of {format_bytes(memory.total)} "
                     "(NVML, at the last sample)")
    peak = evidence.gpu_mem_peaks.get(first.rank) if first.rank is not None else None
    if peak is not None:
        parts.append(f"rank {first.rank}'s own peak: {format_bytes(peak)} (torch's allocator)")
    return "".join(f"; {part}" for part in parts)


DUPLICATE_GPU = re.compile(r"Duplicate GPU detected\s*:\s*rank (\d+) and rank (\d+) both on CUDA device (\w+)")


@rule
def two_ranks_one_gpu(evidence: Evidence) -> Hint | None:
    match = DUPLICATE_GPU.search(evidence.all_text())
    if match:
        ranks = f"ranks {match.group(2)} and {match.group(1)}" if int(match.group(2)) < int(match.group(1)) \
            else f"ranks {match.group(1)} and {match.group(2)}"
        cause = f"{ranks} use the same GPU (NCCL: duplicate GPU, device {match.group(3)})"
    else:
        shared = _shared_gpu(evidence.rank_gpus)
        if shared is None:
            return None
        (host, index), ranks_on_it = shared
        cause = f"{ranks_text(ranks_on_it)} ran on the same GPU {index}{' of ' + host if host else ''}"
    return Hint(HintKey.TWO_RANKS_ONE_GPU, cause,
                "give each rank its own GPU: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before "
                "init_process_group and DDP(model, device_ids=[local_rank]); pick at least as many GPUs as "
                "processes per node")


def _shared_gpu(rank_gpus: dict[int, tuple[str | None, int]]):
    by_gpu: dict[tuple[str | None, int], list[int]] = {}
    for rank, key in sorted(rank_gpus.items()):
        by_gpu.setdefault(key, []).append(rank)
    for key, ranks in by_gpu.items():
        if len(ranks) > 1:
            return key, ranks
    return None


COLLECTIVE_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|"
                                r"Timed out waiting \d+ms for (?:recv|send) operation")


FINISHED_SLACK_SECONDS = 0.5
"""A peer's exit up to this long after the failure still came first (the two times are two processes' clocks)."""


def traceback_place(traceback: str | None) -> Place | None:
    """Where the last traceback in ``traceback`` was raised, named as a stack capture names a rank's place
    (``runner.diagnosis.stack_places``): in a collective (which one), in backward, in its own code; None
    when it has no frame."""
    frames: list[Frame] = []
    for line in (traceback or "").splitlines():
        if line.lstrip().startswith("Traceback (most recent call last)"):
            frames = []
        found = TRACEBACK_FRAME.match(line)
        if found is not None:
            frames.append(Frame(found["file"], int(found["line"]), found["function"].strip()))
    return place_of(frames) if frames else None


@rule
def mismatched_collective(evidence: Evidence) -> Hint | None:
    """A rank failed waiting for peers (gloo: "Connection closed by peer"; NCCL: a timeout) in a
    collective that a peer never entered: the peer had already finished its script, exit code 0.

    Seen: the distributed tutorial's "wrong usage", ``if rank == 0: dist.barrier()``: rank 1 ends
    normally, gloo fails rank 0's barrier with "a remote worker crashing", and nothing crashed.
    """
    first = evidence.first
    if first is None or not evidence.finished:
        return None
    own_text = "\n".join([first.exception_line or "", first.traceback or ""])
    if not (PEER_GONE.search(own_text) or COLLECTIVE_TIMEOUT.search(own_text)):
        return None
    place = traceback_place(first.traceback)
    if place is not None and not place.waiting:
        return None  # it failed in its own code, not while it waited for its peers
    failed_at = getattr(first, "when", None)
    finished = sorted(rank for rank, ended in evidence.finished.items()
                      if rank != first.rank and (failed_at is None or ended <= failed_at + FINISHED_SLACK_SECONDS))
    if not finished:
        return None
    if place is None:
        waited = "waited in a collective"
    else:
        waited = "waited in backward (DDP all-reduces gradients there)" if place.kind == BACKWARD \
            else place.what.replace("waits", "waited", 1)
        if place.frame is not None:
            waited += f" at {place.frame.file.rsplit('/', 1)[-1]}:{place.frame.line}"
    peers = ranks_text(finished)
    had = "it had already finished its script" if len(finished) == 1 else "they had already finished their scripts"
    cause = f"mismatched collectives: rank {first.rank} {waited}, which {peers} never entered: {had} (exit code 0)"
    return Hint(HintKey.MISMATCHED_COLLECTIVE, cause,
                "every rank must call the same collectives in the same order: one inside a rank-dependent "
                "branch (`if rank == 0: dist.barrier()`) waits for ranks that never call it; call it on every "
                "rank (move it out of the branch), and keep the work only one rank does inside the branch")


@rule
def collective_timeout(evidence: Evidence) -> Hint | None:
    if not COLLECTIVE_TIMEOUT.search(evidence.cause_text()):
        return None
    return Hint(HintKey.COLLECTIVE_TIMEOUT,
                "a collective timed out: some rank never reached it (hung, much slower, or took another code path)",
                "look at the stalls and stacks above: the rank whose stack differs is the culprit; "
                f"`rankwatch stacks {run_reference(evidence.run_id)}` shows the last capture, taken when ranks "
                "stalled (while a job runs, it takes a new one)")


NCCL_ERROR = re.compile(r"NCCL error|nccl(?:System|Internal|UnhandledCuda|InvalidUsage|Remote|InvalidArgument)Error|"
                        r"ncclInvalidUsage|NCCL WARN|NCCL communicator was aborted")


@rule
def nccl_error(evidence: Evidence) -> Hint | None:
    text = evidence.cause_text()
    match = NCCL_ERROR.search(text)
    if not match or DUPLICATE_GPU.search(text) or COLLECTIVE_TIMEOUT.search(text):
        return None  # more specific rules explain those
    kind = re.search(r"(unhandled system error|unhandled cuda error|internal error|invalid usage|remote process exited"
                     r"|invalid argument)", text)
    what = f" ({kind.group(1)})" if kind else ""
    return Hint(HintKey.NCCL_ERROR, f"NCCL failed{what}",
                'rerun with NCCL_DEBUG=INFO (profile [env] NCCL_DEBUG = "INFO", or --env NCCL_DEBUG=INFO) to see '
                "which peer, transport or device failed; system errors are often the network interface "
                "(NCCL_SOCKET_IFNAME) or a small /dev/shm in containers (--shm-size)")


RENDEZVOUS_TIMEOUT = re.compile(r"RendezvousTimeoutError|\d+/\d+ clients joined|"
                                r"The client socket has timed out after|wait timeout after \d+ms, keys: /default_pg")
CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


@rule
def rendezvous_timeout(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if not RENDEZVOUS_TIMEOUT.search(text):
        return None
    count = CLIENTS_JOINED.search(text)
    joined = f" ({count.group(1)} of {count.group(2)} joined)" if count else ""
    return Hint(HintKey.RENDEZVOUS_TIMEOUT, f"the rendezvous timed out: not every node or rank joined{joined}",
                "start every node with the same node count and rendezvous endpoint (or master address and port), "
                "make sure that address and port are reachable from every node (firewall, the right interface), "
                "and that no rank failed before it could join (see its log)")


REQUIRED_LOCAL_RANK = re.compile(r"the following arguments are required: .*?(?P<option>--local[_-]rank)")
UNRECOGNIZED_LOCAL_RANK = re.compile(r"unrecognized arguments: .*?(?P<option>--local[_-]rank)")
USAGE_LINE = re.compile(r"^usage: .*$", re.MULTILINE)


def declared_local_rank(text: str) -> str | None:
    """The local-rank spelling the script's argparse usage lists (``--local-rank`` or ``--local_rank``)."""
    for usage in USAGE_LINE.findall(text):
        found = re.search(r"\[?(--local[_-]rank)\b", usage)
        if found:
            return found.group(1)
    return None


@rule
def legacy_local_rank(evidence: Evidence) -> Hint | None:
    if evidence.legacy_local_rank:
        return None
    text = evidence.all_text()
    required = REQUIRED_LOCAL_RANK.search(text)
    if required is None and not re.search(r"KeyError: 'LOCAL_RANK'|unrecognized arguments: --local[-_]rank", text):
        return None
    option = required.group("option") if required else "--local_rank"
    return Hint(HintKey.LEGACY_LOCAL_RANK, f"the script expects {option} (written for torch.distributed.launch)",
                f"turn on the legacy option (--legacy-local-rank; profile: legacy_local_rank = true): each rank then "
                f"gets {option}=<its LOCAL_RANK>; or read int(os.environ['LOCAL_RANK']) in the script")


@rule
def unexpected_local_rank(evidence: Evidence) -> Hint | None:
    if not evidence.legacy_local_rank:
        return None
    text = evidence.all_text()
    unrecognized = UNRECOGNIZED_LOCAL_RANK.search(text)
    if unrecognized is None:
        return None
    passed = unrecognized.group("option")
    declared = declared_local_rank(text)
    if declared is not None and declared != passed:
        return Hint(HintKey.LOCAL_RANK_SPELLING, f"the script takes {declared}, but the legacy option passed {passed} "
                                           "(its argument parser could not be seen to pass the right spelling)",
                    f"accept both spellings in the script: parser.add_argument('{declared}', '{passed}', type=int); "
                    "or turn the legacy option off and read int(os.environ['LOCAL_RANK'])")
    return Hint(HintKey.UNEXPECTED_LOCAL_RANK, "the script does not take --local_rank (its usage lists no local rank "
                                         "option), but the legacy option passes it",
                "turn the legacy --local_rank option off (profile: legacy_local_rank = false)")


@rule
def local_rank_unpassed(evidence: Evidence) -> Hint | None:
    return launcher_hint(evidence.launcher, "local_rank_unpassed")


@rule
def missing_module(evidence: Evidence) -> Hint | None:
    match = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", evidence.all_text())
    if match:
        module = match.group(1).split(".")[0]
        python = evidence.interpreter or "the chosen interpreter"
        return Hint(HintKey.MISSING_MODULE, f"module {module!r} is not installed in {python}",
                    f"install it there ({python} -m pip install {module}) or pick the interpreter of the "
                    "environment where it is installed")
    return None


@rule
def killed_from_outside(evidence: Evidence) -> Hint | None:
    first = evidence.first
    if first is None or first.signal != "SIGKILL":
        return None
    confirmed = getattr(first, "kernel_log", None)
    pid = getattr(first, "pid", None)
    if confirmed:
        return Hint(HintKey.OOM_KILLER, f"rank {first.rank} was killed by the kernel's OOM killer "
                                  f"(kernel log: {confirmed})",
                    "the machine ran out of RAM: lower the batch size or DataLoader num_workers/prefetch_factor, "
                    "load less into memory per rank, or run fewer processes per node")
    if evidence.first_is_remote:
        checked = f"it ran on {first.host or 'another node'}: that machine's kernel log (dmesg) can confirm it"
    elif evidence.kernel_log is None:
        checked = "the kernel log is not readable here to confirm it"
    elif pid is None:
        checked = "its pid is unknown, so the kernel log could not be checked"
    else:
        checked = f"the kernel log has no OOM record for pid {pid}: something else may have sent it"
    return Hint(HintKey.KILLED, f"rank {first.rank} was killed from outside (SIGKILL); the kernel's OOM killer "
                          f"is the usual cause ({checked})",
                "watch the RSS column while it runs (RAM per rank); if memory grows, lower the batch size or "
                "DataLoader workers; otherwise look for who sent the signal (a scheduler's memory limit, a "
                "timeout, a person)")


@rule
def lost_remote_rank(evidence: Evidence) -> Hint | None:
    first = evidence.first
    if (first is None or not evidence.first_is_remote or first.exit_code is not None
            or first.evidence != "connection lost"):
        return None
    where = first.host or "its node"
    return Hint(HintKey.NODE_LOST, f"rank {first.rank} on {where} vanished without an exit code: its node's agent "
                             "lost contact with the head (network or ssh failure, or the machine went down)",
                f"check that {where} is up and reachable (`ssh {where} true`), look at its kernel log "
                "(dmesg) for an OOM kill, and see the node's state and time in the Nodes table")


TERMINATE_WITHOUT_EXCEPTION = "terminate called without an active exception"


@rule
def crash_after_the_script_returned(evidence: Evidence) -> Hint | None:
    """The script returned, then the process died of a signal while Python shut down.

    Seen: a 2-rank gloo job (plain torchrun too) prints "terminate called without an active
    exception" after its last step and dies of SIGABRT: a C++ thread of the process group still
    running when it is torn down. Measured with plain torchrun on torch 2.14.1, one core busy
    elsewhere: 3 aborts in 14 runs without ``destroy_process_group()``, 1 in 14 with
    ``barrier()`` before it, 0 in 16 ending with ``os._exit(0)``. The training completed; saying
    "crashed in native code" alone sends people looking in their training loop.
    """
    first = evidence.first
    if first is None or first.signal is None or not evidence.script_returned:
        return None
    cause = (f"rank {first.rank}'s script ran to its end (exit code 0), then the process died of "
             f"{first.signal} while Python shut down: the failure is in the shutdown, after the script's last line")
    tail = evidence.stderr_tails.get(first.rank, []) if first.rank is not None else []
    if TERMINATE_WITHOUT_EXCEPTION in "\n".join(tail):
        return Hint(HintKey.CRASH_AFTER_THE_SCRIPT_RETURNED, cause,
                    f'"{TERMINATE_WITHOUT_EXCEPTION}": a C++ thread (the gloo/NCCL process group\'s) was '
                    "still running when the interpreter exited, a known upstream abort in torch's teardown, "
                    "with or without destroy_process_group(): the training itself finished; where the exit "
                    "code matters, end the script with sys.stdout.flush(); os._exit(0) after its last save, "
                    "which skips the teardown")
    return Hint(HintKey.CRASH_AFTER_THE_SCRIPT_RETURNED, cause,
                "look at what runs at exit: atexit handlers, extensions' destructors, threads left running "
                "(rerun with --env PYTHONFAULTHANDLER=1 to get the stack at the crash)")


@rule
def native_crash(evidence: Evidence) -> Hint | None:
    first = evidence.first
    if first is None or first.signal not in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE") \
            or evidence.script_returned:  # after the script: crash_after_the_script_returned says it
        return None
    return Hint(HintKey.NATIVE_CRASH, f"rank {first.rank} crashed in native code ({first.signal})",
                "this is a crash in C/C++/CUDA code (torch, an extension, a DataLoader worker): rerun with "
                "PYTHONFAULTHANDLER=1 (--env PYTHONFAULTHANDLER=1) to get the Python stack at the crash, and "
                "check for mismatched library versions (`rankwatch doctor`)")
