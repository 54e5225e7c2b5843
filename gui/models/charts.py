"""Which charts the monitor shows, and what an empty one says (Qt-free).

The built-in charts come first (loss, step time, data wait, throughput, then GPU or
CPU use); after them, one chart for every other key the run's scripts report --
with ``rankwatch.log(step=..., lr=..., grad_norm=...)`` or read from printed lines
with ``--parse-stdout`` -- in the order the keys first appeared, the way TensorBoard
and W&B add a panel per tag. A chart with nothing to draw says why
(:func:`empty_chart_note`) instead of showing a bare 0..1 box.
"""

from __future__ import annotations

from dataclasses import dataclass

from gui.models import monitor
from gui.models.monitor import MonitorModel
from rankwatch import protocol

GIB = float(1 << 30)

METRICS, GPU, CPU = "metrics", "gpu", "cpu"
RANK_KEYS, GPU_KEYS = "rank", "GPU"


@dataclass(frozen=True)
class ChartDef:
    series: str
    """The model's series name (a metric key, or one of ``monitor``'s sample series)."""
    title: str
    scale: float = 1.0
    """Multiplies values at draw time (seconds to ms, share to %, bytes to GiB)."""
    time_only: bool = False
    """Samples without a step (GPU, process): always drawn against time."""
    group: str = METRICS
    """``metrics`` always shown; ``gpu`` with GPU samples; ``cpu`` in CPU mode."""
    key_label: str = RANK_KEYS
    smoothable: bool = True
    """Training metrics take the smoothing control; samples (a memory step stays a step) do not."""
    logged: bool = False
    """A key the script reported (not one Rankwatch measures)."""


BUILT_IN_CHARTS = (
    ChartDef(protocol.LOSS, "Loss"),
    ChartDef(protocol.STEP_TIME, "Step time (ms)", scale=1000.0),
    ChartDef(monitor.DATA_WAIT_SHARE, "Data wait (% of step)", scale=100.0),
    ChartDef(protocol.COMPUTE_TIME, "Compute time (ms, without waits)", scale=1000.0),
    ChartDef(protocol.SAMPLES_PER_SECOND, "Samples/s"),
    ChartDef(monitor.GPU_UTILIZATION, "GPU utilisation (%)", time_only=True, group=GPU, key_label=GPU_KEYS,
             smoothable=False),
    ChartDef(monitor.GPU_MEMORY, "GPU memory (GiB)", scale=1 / GIB, time_only=True, group=GPU, key_label=GPU_KEYS,
             smoothable=False),
    ChartDef(protocol.GPU_MEMORY_ALLOCATED, "GPU memory per rank (torch allocator, GiB)", scale=1 / GIB, group=GPU,
             smoothable=False),
    ChartDef(monitor.CPU_PERCENT, "CPU per rank (%)", time_only=True, group=CPU, smoothable=False),
    ChartDef(monitor.RSS_BYTES, "Memory per rank (RSS, GiB)", scale=1 / GIB, time_only=True, group=CPU,
             smoothable=False),
)

NOT_CHARTED = frozenset({protocol.DATA_WAIT, protocol.STEPS_PER_SECOND, protocol.COMM_WAIT, protocol.CPU_WAIT,
                         protocol.PHASE_CLOCK, protocol.SKIPPED_STEP, *protocol.PHASE_METRICS,
                         protocol.GPU_MEMORY_RESERVED, protocol.GPU_MEMORY_PEAK})
"""Measured keys drawn through another chart (data wait as a share of the step, the waits through the
compute time and the rank table's comm wait), shown elsewhere (the step phases as the rank table's
bars, their clock in its legend, skipped steps beside the step count, the allocator's reserved and peak
bytes in ``runs show``) or not worth one."""
BUILT_IN_SERIES = frozenset(definition.series for definition in BUILT_IN_CHARTS) | NOT_CHARTED


def logged_chart(name: str) -> ChartDef:
    """The chart of a key the script reported: titled with the key itself."""
    return ChartDef(name, name, logged=True)


def logged_metric_names(model: MonitorModel) -> list[str]:
    """Keys that get a chart of their own, in the order they first appeared."""
    return [name for name in model.series_names() if name not in BUILT_IN_SERIES]


def _has_points(model: MonitorModel, name: str) -> bool:
    return any(len(series) for series in model.series(name).values())


def _instrumented(model: MonitorModel) -> bool:
    telemetry = model.spec.get("telemetry") if isinstance(model.spec, dict) else None
    return not (isinstance(telemetry, dict) and telemetry.get("instrument") is False)


def empty_chart_note(definition: ChartDef, model: MonitorModel, has_finite_points: bool) -> str | None:
    """Why the chart of ``definition`` has nothing to draw; ``None`` when it has.

    ``has_finite_points`` is what the chart holds now (the model may have points
    that are all NaN: a loss that was never finite).
    """
    if has_finite_points:
        return None
    if model.run is None:
        return "No run yet"
    finished = model.finished
    name = definition.series
    stepped = _has_points(model, protocol.STEP_TIME) or _has_points(model, protocol.LOSS)
    if _has_points(model, name):
        return "No finite values (every value was NaN or infinite)"
    if definition.time_only:
        return "No samples were recorded" if finished else "Waiting for the first sample…"
    if not _instrumented(model) and not definition.logged:
        return "Not measured: instrumentation is off (telemetry.instrument = false)"
    if name == monitor.DATA_WAIT_SHARE and stepped:
        return "Not measured: no PyTorch DataLoader was seen"
    if name == protocol.COMPUTE_TIME and stepped:
        return "Not measured: no torch.distributed process group (nothing to wait for)"
    if name == protocol.SAMPLES_PER_SECOND and stepped:
        return "Not measured: the batch size is unknown (no PyTorch DataLoader was seen)"
    if name in protocol.GPU_MEMORY_METRICS and stepped and model.ranks and all(
            row.gpu_index is None for row in model.ranks.values()):
        # a CPU run on a machine with GPUs: NVML's charts fill, torch's CUDA allocator never reports
        return "Not measured: the ranks run on the CPU (torch's CUDA allocator has nothing to report)"
    if finished:
        if name in (protocol.LOSS, protocol.STEP_TIME):
            return "Not measured: no optimizer step was seen"
        return "Nothing was recorded"
    return "Waiting for the first step…"


HIDDEN_NOTE = "Every curve is hidden: click a rank in the legend to show it"

MIN_CHART_HEIGHT = 150
"""Below this a chart stops shrinking and the chart area scrolls: a chart stays readable."""
COLUMN_WIDTHS = ((1150, 3), (600, 2))
"""(at least this many pixels wide, columns): three columns on a wide window, one on a narrow one."""


def chart_columns(width: int) -> int:
    """How many charts side by side at this width of the chart area."""
    for minimum, columns in COLUMN_WIDTHS:
        if width >= minimum:
            return columns
    return 1
