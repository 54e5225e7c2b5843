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
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hint:
    key: str
    cause: str
    advice: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Evidence:
    first: Any  # RankFailure | None (runner.diagnosis.triage)
    others: list = field(default_factory=list)
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

    def first_text(self) -> str:
        """Everything known about the first failure, as one searchable text."""
        parts = []
        if self.first is not None:
            parts += [self.first.exception_line or "", self.first.traceback or ""]
            parts += self.stderr_tails.get(self.first.rank, [])
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


def find_hints(evidence: Evidence) -> list[Hint]:
    hints = []
    for check in RULES:
        hint = check(evidence)
        if hint is not None and all(h.key != hint.key for h in hints):
            hints.append(hint)
    return hints


@rule
def address_in_use(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if re.search(r"EADDRINUSE|[Aa]ddress already in use|address is already in use", text):
        port = re.search(r"port[:= ]+(\d{2,5})|:(\d{2,5})\b.*in use", text)
        which = next((g for g in port.groups() if g), None) if port else None
        where = f"port {which}" if which else "the rendezvous port"
        holder = evidence.port_holder(int(which)) if which and evidence.port_holder is not None else None
        by = f" by {holder}" if holder else ""
        return Hint("address_in_use", f"{where} is already in use{by} (often a leftover of an earlier run)",
                    "pick another master/rendezvous port, use the standalone rendezvous (a free port is picked), "
                    "or stop the process holding it (`ss -ltnp` shows it)")
    return None


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
        return Hint("cuda_unavailable", "the NVIDIA driver is too old for this torch build's CUDA",
                    "update the driver, or install a torch build for an older CUDA "
                    "(`rankwatch doctor` shows both versions)")
    if "not compiled with CUDA" in found or ("NCCL" in found and "GPUs" not in found):
        return Hint("cuda_unavailable", "this torch build has no CUDA/NCCL (a CPU-only build)",
                    "install a CUDA build of torch in the chosen interpreter, or run in CPU mode "
                    "(--gpus cpu --backend gloo)")
    nccl = " with the nccl backend" if "NCCL" in found or evidence.backend == "nccl" else ""
    return Hint("cuda_unavailable", f"CUDA is not available here (no NVIDIA GPU or driver){nccl}",
                "run in CPU mode with gloo (--gpus cpu --backend gloo) and let the script pick the backend "
                "Rankwatch exports: dist.init_process_group(os.environ.get('RANKWATCH_BACKEND', 'gloo')); "
                "or run on a machine with an NVIDIA GPU and driver (`rankwatch doctor` shows what this one has)")


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
    return Hint("cuda_out_of_memory", f"CUDA ran out of memory{what}{where}",
                "lower the per-GPU batch size (and use gradient accumulation), use mixed precision or "
                "activation checkpointing; check that no other process uses the GPU (`rankwatch gpus`); "
                "for fragmentation set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


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
        cause = f"ranks {', '.join(map(str, ranks_on_it))} ran on the same GPU {index}{' of ' + host if host else ''}"
    return Hint("two_ranks_one_gpu", cause,
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


@rule
def collective_timeout(evidence: Evidence) -> Hint | None:
    if not COLLECTIVE_TIMEOUT.search(evidence.cause_text()):
        return None
    return Hint("collective_timeout",
                "a collective timed out: some rank never reached it (hung, much slower, or took another code path)",
                "look at the stalls and stacks above: the rank whose stack differs is the culprit; on a live run "
                "`rankwatch stacks RUN` shows where every rank is")


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
    return Hint("nccl_error", f"NCCL failed{what}",
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
    return Hint("rendezvous_timeout", f"the rendezvous timed out: not every node or rank joined{joined}",
                "start every node with the same node count and rendezvous endpoint (or master address and port), "
                "make sure that address and port are reachable from every node (firewall, the right interface), "
                "and that no rank failed before it could join (see its log)")


@rule
def legacy_local_rank(evidence: Evidence) -> Hint | None:
    text = evidence.all_text()
    if not evidence.legacy_local_rank and re.search(
            r"the following arguments are required: --local[_-]rank|KeyError: 'LOCAL_RANK'|"
            r"unrecognized arguments: --local[-_]rank", text):
        return Hint("legacy_local_rank", "the script expects --local_rank (written for torch.distributed.launch)",
                    "turn on the legacy --local_rank option (--legacy-local-rank; profile: legacy_local_rank = true), "
                    "or read int(os.environ['LOCAL_RANK']) in the script")
    return None


@rule
def unexpected_local_rank(evidence: Evidence) -> Hint | None:
    if evidence.legacy_local_rank and re.search(r"unrecognized arguments: --local[_-]rank", evidence.all_text()):
        return Hint("unexpected_local_rank", "the script does not take --local_rank, but the legacy option passes it",
                    "turn the legacy --local_rank option off (profile: legacy_local_rank = false)")
    return None


@rule
def missing_module(evidence: Evidence) -> Hint | None:
    match = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", evidence.all_text())
    if match:
        module = match.group(1).split(".")[0]
        python = evidence.interpreter or "the chosen interpreter"
        return Hint("missing_module", f"module {module!r} is not installed in {python}",
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
        return Hint("oom_killer", f"rank {first.rank} was killed by the kernel's OOM killer "
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
    return Hint("killed", f"rank {first.rank} was killed from outside (SIGKILL); the kernel's OOM killer "
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
    return Hint("node_lost", f"rank {first.rank} on {where} vanished without an exit code: its node's agent "
                             "lost contact with the head (network or ssh failure, or the machine went down)",
                f"check that {where} is up and reachable (`ssh {where} true`), look at its kernel log "
                "(dmesg) for an OOM kill, and see the node's state and time in the Nodes table")


@rule
def native_crash(evidence: Evidence) -> Hint | None:
    first = evidence.first
    if first is None or first.signal not in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE"):
        return None
    return Hint("native_crash", f"rank {first.rank} crashed in native code ({first.signal})",
                "this is a crash in C/C++/CUDA code (torch, an extension, a DataLoader worker): rerun with "
                "PYTHONFAULTHANDLER=1 (--env PYTHONFAULTHANDLER=1) to get the Python stack at the crash, and "
                "check for mismatched library versions (`rankwatch doctor`)")
