"""The records the hub validates and stores, and the names of the metrics they carry.

One definition each, in the same order on the wire, in the hub's pending batch, in the store's
reads and in the GUI: ``MetricRecord`` (and the zero-code instrumentation's step rows that expand
into them), ``LogLine``, ``GpuSample``, ``ProcessSample``.
"""

from __future__ import annotations

from rankwatch.protocol.numbers import (
    INT64_MAX,
    INT64_MIN,
    LATEST_PLAUSIBLE_TIME,
    MAX_NAME_CHARS,
    MAX_SOURCE_CHARS,
    as_float,
    as_int,
    as_text,
    as_time,
    clean_text,
    is_storable_text,
)

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

SOURCE_AUTO = "auto"
SOURCE_LOG = "log"
SOURCE_PARSED = "parsed"
SOURCE_PRIORITY = {SOURCE_AUTO: 0, SOURCE_LOG: 1, SOURCE_PARSED: 2}
"""When a rank reports one metric from several sources, the lowest number is shown."""

# Metric names the bootstrap measures without code changes.
LOSS = "loss"
STEP_TIME = "step_time"
"""Seconds between consecutive optimizer steps."""
DATA_WAIT = "data_wait"
"""Seconds of a step spent waiting for the DataLoader iterator."""
SAMPLES_PER_SECOND = "samples_per_s"
STEPS_PER_SECOND = "steps_per_s"
"""``1 / step_time``: a rank row's field (``RankRow.steps_per_s``), derived by the hub from
``step_time``. Not sent or stored as a series (one row less per step);
stores written before keep theirs."""
DATA_WAIT_SHARE = "data_wait_share"
"""Share (0..1) of a step spent waiting for data: ``data_wait_share`` of the same step's records."""
CPU_WAIT = "cpu_wait"
"""Seconds of a step the training thread was ready to run but waited for a CPU (Linux run queue)."""
COMPUTE_TIME = "compute_time"
"""Seconds of a step the rank worked on its own, on the step's clock: its phases less the waits for
data and for communication (and, on the CPU clock, for a CPU): ``compute_time``."""
COMM_WAIT = "comm_wait"
"""Seconds of a step in collectives, as stores written before the step phases kept it (the CPU
thread's time; a GPU job's was not the GPU's). Read only to show such runs; now ``PHASE_COMM``."""
SKIPPED_STEP = "skipped_step"
"""1 for an optimizer step that ``GradScaler`` skipped (inf/NaN gradients): counted as a step, its
loss kept, and shown as skipped. Only skipped steps carry the record."""

PHASES = ("data", "h2d", "forward", "backward", "comm", "optimizer", "rest")
"""Where an optimizer step's time goes, on the step's own clock (``rankwatch._phases``):

* ``data``: waiting for the DataLoader's next batch (on a GPU: the time the GPU waited for it);
* ``h2d``: from the batch to the first module call (copying it to the device, preparing it);
* ``forward``: from the first module call to the backward (the loss included);
* ``backward``: the backward, until the rank's own gradients are computed;
* ``comm``: exposed communication: waiting for collectives that did not overlap (the end of
  DDP's gradient all-reduce, synchronous ``torch.distributed`` calls);
* ``optimizer``: inside ``optimizer.step``;
* ``rest``: everything else (``zero_grad``, logging, gradient clipping, the loop itself).

A measured step's phases add up to its span on its clock, exactly; a phase that did not happen
in the step (no DataLoader, no process group, no module call) is None (not measured), and its
time is in the phase that was running."""
COMPUTING_PHASES = ("h2d", "forward", "backward", "optimizer")
"""The phases in which a rank works on the step itself (the verdict's "computing" share, the GUI's
sort key); ``rest`` is the loop's own work around it."""
PHASE_METRICS = tuple(f"phase_{phase}" for phase in PHASES)
"""The metric name of each phase, in ``PHASES`` order: seconds on the step's clock."""
PHASE_DATA, PHASE_H2D, PHASE_FORWARD, PHASE_BACKWARD, PHASE_COMM, PHASE_OPTIMIZER, PHASE_REST = PHASE_METRICS
CLOCK_GPU = "gpu"
"""Phases timed with CUDA events on the training stream, read later: what the GPU spent."""
CLOCK_CPU = "cpu"
"""Phases timed with the training thread's clock (a CPU job)."""
CLOCKS = frozenset({CLOCK_GPU, CLOCK_CPU})
PHASE_CLOCK = "phase_clock"
"""The clock a step's phases were timed on, as a record of each measured step: 1 for the GPU's
(``CLOCK_GPU``), 0 for the CPU's (``clock_name`` reads it back)."""
_CLOCK_VALUES = {CLOCK_GPU: 1, CLOCK_CPU: 0}


def clock_name(value: float | None) -> str | None:
    """``CLOCK_GPU`` or ``CLOCK_CPU`` from a ``PHASE_CLOCK`` record's value; None when unknown."""
    if value == 1:
        return CLOCK_GPU
    if value == 0:
        return CLOCK_CPU
    return None

GPU_MEMORY_ALLOCATED = "gpu_mem_allocated"
"""Bytes of GPU memory the rank's tensors hold (torch's caching allocator), read about once a second."""
GPU_MEMORY_RESERVED = "gpu_mem_reserved"
"""Bytes the allocator holds from the driver (allocated plus its cache)."""
GPU_MEMORY_PEAK = "gpu_mem_peak"
"""The most bytes the rank's tensors held at once since it started."""
GPU_MEMORY_METRICS = (GPU_MEMORY_ALLOCATED, GPU_MEMORY_RESERVED, GPU_MEMORY_PEAK)


# ---- records -------------------------------------------------------------------------------


MetricRow = tuple[int, float, "int | None", str, "float | None", str]
"""A metric record as a plain tuple ``(rank, t, step, name, value, source)``: what the hub's hot
path keeps and hands to SQLite. ``MetricRecord`` is the same row with its fields named."""


class MetricRecord(tuple[int, float, int | None, str, float | None, str]):
    """One value of one named series of one rank: ``(rank, t, step, name, value, source)``.

    The order is the same everywhere (wire, pending batch, store, replay, GUI). A tuple:
    the hub makes 200k of these a second and hands them to SQLite as they are.
    """

    __slots__ = ()

    def __new__(cls, rank: int, t: float, step: int | None, name: str, value: float | None,
                source: str) -> MetricRecord:
        return tuple.__new__(cls, (rank, t, step, name, value, source))

    @property
    def rank(self) -> int:
        return self[0]

    @property
    def t(self) -> float:
        return self[1]

    @property
    def step(self) -> int | None:
        return self[2]

    @property
    def name(self) -> str:
        return self[3]

    @property
    def value(self) -> float | None:
        """None: reported but not finite (a NaN loss), shown as a gap."""
        return self[4]

    @property
    def source(self) -> str:
        """``SOURCE_AUTO``, ``SOURCE_LOG`` or ``SOURCE_PARSED``."""
        return self[5]

    def to_wire(self) -> list[object]:
        return list(self)

    @classmethod
    def from_wire(cls, item: object) -> MetricRecord | None:
        """A published record ``[rank, t, step, name, value, source]``; None when malformed."""
        if not isinstance(item, (list, tuple)) or len(item) != 6:
            return None
        rank, t, step, name, value, source = item
        rank, t = as_int(rank), as_float(t)
        if rank is None or t is None or type(name) is not str:
            return None
        return cls(rank, t, as_int(step), name, as_float(value), source if type(source) is str else SOURCE_AUTO)

    def __repr__(self) -> str:
        return "MetricRecord(rank={!r}, t={!r}, step={!r}, name={!r}, value={!r}, source={!r})".format(*self)


class MetricRejection:
    """Why metric items were dropped at ingest: counts by reason (``reasons``)."""

    MALFORMED = "malformed item"
    TIME = "time not a plausible timestamp"
    STEP = "step out of range"
    NAME = "name not text"
    NAME_TOO_LONG = f"name longer than {MAX_NAME_CHARS} characters"
    NOT_A_NUMBER = "value not a number"
    VALUE = "value out of range"
    SOURCE = "source not text"


KNOWN_SOURCES = frozenset({SOURCE_AUTO, SOURCE_LOG, SOURCE_PARSED})


def metric_records(rank: int, items: object, rejected: dict[str, int],
                   examples: dict[str, str] | None = None) -> list[MetricRow]:
    """The records of one ``metrics`` message's items, as plain ``MetricRow`` tuples; what
    cannot be stored is left out and counted in ``rejected`` by reason (``MetricRejection``),
    and ``examples`` gets the name of the first item left out for each reason (where it has one).

    The hot path of the hub (200k records/s): the usual item (a float time, an int step, a
    short ASCII name, a float value, a known source) passes one combined check and becomes
    a tuple; anything else goes through ``_unusual_metric``, which decides slowly.
    """
    records: list[MetricRow] = []
    if type(items) is not list:
        rejected[MetricRejection.MALFORMED] = rejected.get(MetricRejection.MALFORMED, 0) + 1
        return records
    append = records.append
    latest, low, high, longest, sources = LATEST_PLAUSIBLE_TIME, INT64_MIN, INT64_MAX, MAX_NAME_CHARS, KNOWN_SOURCES
    for item in items:
        if type(item) is list:
            length = len(item)
            if length == 5:
                t, step, name, value, source = item
                if (type(t) is float and 0.0 < t < latest
                        and (step is None or (type(step) is int and low <= step <= high))
                        and type(name) is str and name.isascii() and 0 < len(name) <= longest
                        and source in sources):
                    kind = type(value)
                    if kind is float:
                        append((rank, t, step, name, value if value - value == 0 else None, source))
                        continue
                    if kind is int and low <= value <= high:
                        append((rank, t, step, name, value, source))
                        continue
            elif length == STEP_ROW_LENGTH:
                records += _step_row_records(rank, item, rejected)
                continue
        record = _unusual_metric(rank, item, rejected, examples)
        if record is not None:
            append(record)
    return records


# ---- step rows: one step of the zero-code instrumentation in one item ------------------------

STEP_ROW_LENGTH = 9
"""A ``metrics`` item of this length is a **step row**, ``[t, step, loss, step_time, data_wait,
samples, cpu_wait, skipped, phases]``: everything the zero-code instrumentation measured of one
optimizer step (``rankwatch._instrument``), each value None when not measured, ``samples`` the
batch sizes counted (0: none), ``skipped`` true when ``GradScaler`` skipped the step, ``phases``
None or ``[clock, data, h2d, forward, backward, comm, optimizer, rest]`` (``CLOCKS``, then
``PHASES`` in seconds, each None when not measured). The hub expands it into the step's records
(``step_row_records``), deriving ``samples_per_s`` and ``compute_time``. Why not one
``[t, step, name, value, source]`` item per value: a step was then up to 14 items to format on the
worker's reporter thread, which shares the GIL with training, and to parse on the hub."""
PHASE_ROW_LENGTH = 1 + len(PHASES)


def compute_time(clock: str, phases: Sequence[float | None], cpu_wait: float | None = None) -> float | None:
    """Seconds of a step's span not spent waiting, on its clock: the span (its phases' sum) less the
    data phase, the exposed communication and, on the CPU clock, the time the thread waited for a
    CPU (the GPU does not wait for the host's run queue). None when a phase is not finite.

    ``phases`` is ``PHASES`` in order (seconds or None); a phase not measured counts as none.
    """
    span = 0.0
    for value in phases:
        if value is not None:
            span += value
    if span - span != 0:
        return None
    waited = (phases[0] or 0.0) + (phases[4] or 0.0)
    if clock == CLOCK_CPU and cpu_wait is not None:
        waited += cpu_wait
    return max(0.0, span - waited)


def step_row_records(rank: int, row: list[Any] | tuple[Any, ...]) -> list[MetricRow]:
    """The records of a well-formed step ``row`` (``STEP_ROW_LENGTH``), in the order a step's records
    always have: loss, step time, samples per second, data wait, cpu wait, skipped step, the phases'
    clock, the phases (``PHASES`` order), compute time.

    A value that is not finite (a NaN loss) is a record whose value is None (shown as a gap), as
    for any metric item; nothing is derived from it.
    """
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    auto = SOURCE_AUTO
    records: list[MetricRow] = []
    if loss is not None:
        records.append((rank, t, step, LOSS, _finite(loss), auto))
    if step_time is not None:
        step_time = _finite(step_time)
        records.append((rank, t, step, STEP_TIME, step_time, auto))
        if samples and step_time is not None and step_time > 0:
            records.append((rank, t, step, SAMPLES_PER_SECOND, _finite(samples / step_time), auto))
    if data_wait is not None:
        records.append((rank, t, step, DATA_WAIT, _finite(data_wait), auto))
    if cpu_wait is not None:
        cpu_wait = _finite(cpu_wait)
        records.append((rank, t, step, CPU_WAIT, cpu_wait, auto))
    if skipped:
        records.append((rank, t, step, SKIPPED_STEP, 1, auto))
    if phases is not None:
        clock, *values = phases
        records.append((rank, t, step, PHASE_CLOCK, _CLOCK_VALUES[clock], auto))
        for name, value in zip(PHASE_METRICS, values, strict=False):
            if value is not None:
                records.append((rank, t, step, name, _finite(value), auto))
        records.append((rank, t, step, COMPUTE_TIME, compute_time(clock, values, cpu_wait), auto))
    return records


def step_row_size(row: list[Any] | tuple[Any, ...]) -> int:
    """How many records ``step_row_records`` makes of the well-formed step ``row``, without making
    them: the worker counts what it sent (its heartbeats' ``sent``) in records, as the hub counts
    what it received."""
    _t, _step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    size = (loss is not None) + (data_wait is not None) + (cpu_wait is not None) + bool(skipped)
    if step_time is not None:
        step_time = _finite(step_time)
        size += 1 + bool(samples and step_time is not None and step_time > 0)
    if phases is not None:
        size += 2 + sum(value is not None for value in phases[1:])
    return size


def _finite(value: float) -> float | None:
    """``value``, or None when it is not finite."""
    return value if value - value == 0 else None


def _usual_phases(phases: object) -> bool:
    """Whether a step row's ``phases`` is None or of the usual shape (a clock, then floats or None)."""
    if phases is None:
        return True
    if type(phases) is not list or len(phases) != PHASE_ROW_LENGTH or phases[0] not in CLOCKS:
        return False
    return all(not (value is not None and type(value) is not float) for value in phases[1:])


def _step_row_records(rank: int, row: list[Any], rejected: dict[str, int]) -> list[MetricRow]:
    """The records of a step row from the wire (the hub's hot path: one combined check)."""
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    if (type(t) is float and 0.0 < t < LATEST_PLAUSIBLE_TIME and type(step) is int and INT64_MIN <= step <= INT64_MAX
            and type(samples) is int and 0 <= samples <= INT64_MAX
            and (loss is None or type(loss) is float) and (step_time is None or type(step_time) is float)
            and (data_wait is None or type(data_wait) is float) and (cpu_wait is None or type(cpu_wait) is float)
            and type(skipped) is bool and _usual_phases(phases)):
        return step_row_records(rank, row)
    return _unusual_step_row(rank, row, rejected)


def _is_number(value: object) -> bool:
    return value is None or type(value) is float or (type(value) is int and INT64_MIN <= value <= INT64_MAX)


def _unusual_step_row(rank: int, row: list[Any], rejected: dict[str, int]) -> list[MetricRow]:
    """A step row that is not of the usual shape: integers where floats are usual are taken as
    floats; a row with a field of any other kind is left out whole, its records counted in
    ``rejected`` (one, when even that cannot be told)."""
    t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases = row
    measured = (loss, step_time, data_wait, cpu_wait)
    reason = None
    if as_time(t) is None or type(t) not in (int, float):
        reason = MetricRejection.TIME
    elif type(step) is not int or not INT64_MIN <= step <= INT64_MAX:
        reason = MetricRejection.STEP
    elif (type(samples) is not int or not 0 <= samples <= INT64_MAX or type(skipped) is not bool
          or not all(_is_number(value) for value in measured)
          or not (phases is None or (type(phases) is list and len(phases) == PHASE_ROW_LENGTH
                                     and phases[0] in CLOCKS and all(_is_number(value) for value in phases[1:])))):
        reason = MetricRejection.VALUE
    if reason is None:
        loss, step_time, data_wait, cpu_wait = (value if value is None else float(value) for value in measured)
        if phases is not None:
            phases = [phases[0], *(value if value is None else float(value) for value in phases[1:])]
        return step_row_records(rank, [float(t), step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases])
    try:
        count = max(1, step_row_size(row))
    except TypeError:  # values that cannot even be compared or counted
        count = 1
    rejected[reason] = rejected.get(reason, 0) + count
    return []


def _unusual_metric(rank: int, item: object, rejected: dict[str, int],
                    examples: dict[str, str] | None = None) -> MetricRow | None:
    """The record of an item that is not of the usual shape, or None (counted in ``rejected``).

    A name is never cut short (two long names could become one key) and a value that is not a
    number (a string, a list) is never taken as "not measured": either item is left out, alone.
    """
    reason = MetricRejection.MALFORMED
    name: object = None
    if type(item) is list and len(item) == 5:
        t, step, name, value, source = item
        time_value = as_time(t)
        if time_value is None:
            reason = MetricRejection.TIME
        elif step is not None and (type(step) in (int, float)) and as_int(step) is None:
            reason = MetricRejection.STEP
        elif type(name) is not str or not name or not is_storable_text(name):
            reason = MetricRejection.NAME
        elif len(name) > MAX_NAME_CHARS:
            reason = MetricRejection.NAME_TOO_LONG
        elif type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            reason = MetricRejection.VALUE
        elif value is not None and type(value) not in (int, float, bool):  # a boolean: a gap, as before
            reason = MetricRejection.NOT_A_NUMBER
        elif type(source) is not str or not source or not source.isascii():
            reason = MetricRejection.SOURCE
        else:
            step_value = as_int(step) if type(step) in (int, float) else None  # other types: no step
            return (rank, time_value, step_value, name, as_float(value), source[:MAX_SOURCE_CHARS])
    rejected[reason] = rejected.get(reason, 0) + 1
    if examples is not None and reason not in examples and type(name) is str and name:
        examples[reason] = clean_text(name, EXAMPLE_NAME_CHARS) + ("…" if len(name) > EXAMPLE_NAME_CHARS else "")
    return None


EXAMPLE_NAME_CHARS = 40
"""How much of a rejected item's name its ``records_rejected`` event quotes."""


class LogLine(tuple[int | None, float, str, str, str | None]):
    """One line a rank (or the launcher, ``rank`` None) printed: ``(rank, t, stream, line, node)``."""

    __slots__ = ()

    def __new__(cls, rank: int | None, t: float, stream: str, line: str, node: str | None) -> LogLine:
        return tuple.__new__(cls, (rank, t, stream, line, node))

    @property
    def rank(self) -> int | None:
        return self[0]

    @property
    def t(self) -> float:
        return self[1]

    @property
    def stream(self) -> str:
        """``stdout`` or ``stderr``."""
        return self[2]

    @property
    def line(self) -> str:
        return self[3]

    @property
    def node(self) -> str | None:
        """The host label of the node it came from."""
        return self[4]

    def to_wire(self) -> list[object]:
        return list(self)

    @classmethod
    def from_wire(cls, item: object) -> LogLine | None:
        """A published line ``[rank, t, stream, line, node]``; None when malformed."""
        if not isinstance(item, (list, tuple)) or len(item) < 4:
            return None
        rank, t, stream, line = item[:4]
        node = item[4] if len(item) > 4 else None
        text = as_text(line)
        if text is None:
            return None
        return cls(as_int(rank), as_time(t) or 0.0, as_text(stream, MAX_SOURCE_CHARS) or "stdout", text,
                   as_text(node, MAX_NAME_CHARS))

    def __repr__(self) -> str:
        return "LogLine(rank={!r}, t={!r}, stream={!r}, line={!r}, node={!r})".format(*self)


class GpuSample(tuple[float, int, float | None, int | None, int | None, float | None, float | None,
                      float | None]):
    """One GPU sampled by NVML at ``t``: ``(t, gpu_index, utilization (%), memory_used (bytes),
    memory_total, power_watts, temperature_c, sm_clock_mhz)``."""

    __slots__ = ()

    def __new__(cls, t: float, gpu_index: int, utilization: float | None, memory_used: int | None,
                memory_total: int | None, power_watts: float | None, temperature_c: float | None,
                sm_clock_mhz: float | None) -> GpuSample:
        return tuple.__new__(cls, (t, gpu_index, utilization, memory_used, memory_total, power_watts,
                                   temperature_c, sm_clock_mhz))

    @property
    def t(self) -> float:
        return self[0]

    @property
    def gpu_index(self) -> int:
        return self[1]

    def to_wire(self) -> list[object]:
        return list(self)


class ProcessSample(tuple[float, int, int | None, float | None, int | None, int | None]):
    """One rank's process sampled by psutil on its node: ``(t, rank, pid, cpu_percent (% of one
    core), rss_bytes, threads)``."""

    __slots__ = ()

    def __new__(cls, t: float, rank: int, pid: int | None, cpu_percent: float | None, rss_bytes: int | None,
                threads: int | None) -> ProcessSample:
        return tuple.__new__(cls, (t, rank, pid, cpu_percent, rss_bytes, threads))

    @property
    def t(self) -> float:
        return self[0]

    @property
    def rank(self) -> int:
        return self[1]

    @property
    def cpu_percent(self) -> float | None:
        return self[3]

    @property
    def rss_bytes(self) -> int | None:
        return self[4]

    def to_wire(self) -> list[object]:
        return list(self)

    @classmethod
    def from_wire(cls, row: object) -> ProcessSample | None:
        """``[t, rank, pid, cpu_percent, rss_bytes, threads]`` (all numbers); None when malformed."""
        if not isinstance(row, (list, tuple)) or len(row) != 6:
            return None
        t, rank = as_time(row[0]), as_int(row[1])
        numbers = [as_float(value) for value in row[2:]]
        if t is None or rank is None or any(number is None for number in numbers):
            return None
        return cls(t, rank, as_int(row[2]), as_float(row[3]), as_int(row[4]), as_int(row[5]))

def data_wait_share(step_time: float | None, data_wait: float | None) -> float | None:
    """The share (0..1) of a step spent waiting (for data, or in collectives); None when not measured."""
    if step_time is None or data_wait is None or not step_time > 0:
        return None
    return min(1.0, max(0.0, data_wait / step_time))
