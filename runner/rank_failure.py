"""How one rank ended, as failure triage found it (``RankFailure``), how a stall ended, and what
a run's store lacks: the runner's side of the contract (its words are ``runner.exit_status``'s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankwatch.protocol.numbers import MAX_LONG_TEXT_CHARS, as_float, as_int, as_text

# ---- how a rank ended (its words: runner.exit_status) ----------------------------------------------


class Evidence:
    """How triage knows when and how a rank ended (``RankFailure.evidence``)."""

    EXCEPTION = "exception"
    CONNECTION_LOST = "connection lost"
    EXIT_CODE = "exit code"
    TORCHRUN_REPORT = "torchrun report"


def stall_outcome(stall: Mapping[str, Any]) -> str:
    """How a stall (a ``stalls`` record of a run's diagnostics) ended, as the tail of its summary line."""
    return stall_end_words(as_float(stall.get("resumed_after")), as_float(stall.get("finished_after")))


def stall_end_words(resumed_after: float | None, finished_after: float | None) -> str:
    """``; resumed after 12 s``: how a stall ended (seconds from its rank's last progress to its next,
    or to its exit 0), as the tail of its summary line."""
    if resumed_after is not None:
        return f"; resumed after {resumed_after:.0f} s"
    if finished_after is not None:
        return (f"; then it finished by itself {finished_after:.0f} s after its last progress (exit code 0): "
                "not a hang")
    return "; never resumed"


class RankFailure:
    """How one rank ended, as failure triage found it (``runner.diagnosis.triage``), and its words."""

    __slots__ = ("rank", "host", "exit_code", "signal", "exc_type", "exc_message", "exception_line", "traceback",
                 "when", "evidence", "pid", "traceback_source", "error_file", "kernel_log", "after")

    def __init__(self, rank: int | None, host: str | None = None, exit_code: int | None = None,
                 signal: str | None = None, exc_type: str | None = None, exc_message: str | None = None,
                 exception_line: str | None = None, traceback: str | None = None, when: float | None = None,
                 evidence: str = "", pid: int | None = None, traceback_source: str | None = None,
                 error_file: str | None = None, kernel_log: str | None = None, after: int | None = None) -> None:
        self.rank = rank
        self.host = host
        self.exit_code = exit_code
        self.signal = signal
        """The signal's name when it died of one (``SIGKILL``)."""
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.exception_line = exception_line
        self.traceback = traceback
        self.when = when
        self.evidence = evidence
        """How we know: an ``Evidence`` value."""
        self.pid = pid
        self.traceback_source = traceback_source
        """Where the traceback came from: "bootstrap", "error file", "torchrun report"."""
        self.error_file = error_file
        self.kernel_log = kernel_log
        """The kernel's OOM-killer line for this rank's pid (SIGKILL only), when found."""
        self.after = after
        """The rank whose failure this one's end followed (torchrun's SIGTERM, or its peer went away):
        it did not fail by itself (``runner.exit_status.rank_end_words``)."""

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RankFailure.__slots__}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RankFailure:
        """Lenient: a field that is missing or of the wrong type is unknown."""
        def text(name: str) -> str | None:
            return as_text(data.get(name), MAX_LONG_TEXT_CHARS)

        return cls(rank=as_int(data.get("rank")), host=text("host"), exit_code=as_int(data.get("exit_code")),
                   signal=text("signal"), exc_type=text("exc_type"), exc_message=text("exc_message"),
                   exception_line=text("exception_line"), traceback=text("traceback"),
                   when=as_float(data.get("when")), evidence=text("evidence") or "", pid=as_int(data.get("pid")),
                   traceback_source=text("traceback_source"), error_file=text("error_file"),
                   kernel_log=text("kernel_log"), after=as_int(data.get("after")))

    @property
    def who(self) -> str:
        """``rank 1 on node-a``."""
        rank = "an unknown rank" if self.rank is None else f"rank {self.rank}"
        return rank + (f" on {self.host}" if self.host else "")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RankFailure) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RankFailure({self.who!r}, exit_code={self.exit_code!r}, signal={self.signal!r})"


@dataclass(frozen=True)
class RankLosses:
    """A rank whose records did not all reach the store (``summary["losses"]``, ``Hub.losses``)."""

    rank: int | None
    dropped: int = 0
    """Dropped by the worker itself (its queue was full, or the runner unreachable)."""
    rejected: int = 0
    """Dropped by the runner: values the store cannot hold."""
    not_received: int = 0
    """Sent by the worker, never received (a connection broke)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Keys a newer Rankwatch adds, kept as stored."""

    def to_wire(self) -> dict[str, Any]:
        return {"rank": self.rank, "dropped": self.dropped, "rejected": self.rejected,
                "not_received": self.not_received, **self.extra}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RankLosses:
        """Lenient: a count that is missing or not a number is 0."""
        return cls(rank=as_int(data.get("rank")), dropped=as_int(data.get("dropped")) or 0,
                   rejected=as_int(data.get("rejected")) or 0, not_received=as_int(data.get("not_received")) or 0,
                   extra={key: value for key, value in data.items() if key not in _LOSS_KEYS})


_LOSS_KEYS = frozenset({"rank", "dropped", "rejected", "not_received"})


def _records(count: int) -> str:
    return f"{count} record{'s' if count != 1 else ''}"


def describe_losses(losses: Sequence[RankLosses], store_incomplete: str | None) -> list[str]:
    """What a run's store lacks, one line per rank (``rank 3: 120 records dropped (...)``), from the
    summary's ``losses`` and ``store_incomplete`` (``runner.hub.Hub.losses``)."""
    lines = []
    for row in losses:
        parts = []
        if row.dropped:
            parts.append(f"{_records(row.dropped)} dropped by the worker (its queue was full or the runner unreachable)")
        if row.rejected:
            parts.append(f"{_records(row.rejected)} dropped by the runner (values the store cannot hold)")
        if row.not_received:
            parts.append(f"{_records(row.not_received)} sent but never received (a connection broke)")
        if parts:
            lines.append(f"rank {row.rank}: " + "; ".join(parts))
    if store_incomplete:
        lines.append(f"store incomplete: {store_incomplete}; what followed was shown live but not stored")
    return lines
