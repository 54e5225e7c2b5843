"""The contract (``rankwatch.protocol``): one definition per message, record, event kind and wording."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from rankwatch import protocol
from rankwatch.protocol import EventKind, MetricRecord
from runner.rank_failure import Evidence, RankFailure, RankLosses, describe_losses

REPO = Path(__file__).resolve().parents[2]


def emitted_event_kinds() -> dict[str, list[str]]:
    """Every event kind the code emits (``add_event(KIND, ...)``, ``Event(t, KIND, ...)``), with where."""
    found: dict[str, list[str]] = {}

    def note(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.IfExp):
            note(node.body, where)
            note(node.orelse, where)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.setdefault(node.value, []).append(where)
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("EventKind", "protocol.EventKind"):
            found.setdefault(f"EventKind.{node.attr}", []).append(where)
        else:
            found.setdefault(f"<not a literal: {ast.unparse(node)}>", []).append(where)

    for folder in ("runner", "gui"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for call in ast.walk(tree):
                if not isinstance(call, ast.Call):
                    continue
                name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                where = f"{path.relative_to(REPO)}:{call.lineno}"
                if name == "add_event" and call.args:
                    note(call.args[0], where)
                elif name == "Event" and len(call.args) >= 2:
                    note(call.args[1], where)
    return found


def test_every_event_kind_emitted_anywhere_is_defined_by_the_contract():
    emitted = emitted_event_kinds()
    assert len(emitted) >= 20  # the scan found the emitters
    members = {f"EventKind.{kind.name}" for kind in EventKind} | {kind.value for kind in EventKind}
    undefined = {kind: where for kind, where in emitted.items() if kind not in members}
    # the hub's own add_event passes its argument on (it is checked where it is called, and by Event)
    allowed_variables = {"<not a literal: kind>"}
    assert set(undefined) <= allowed_variables, undefined


def test_an_event_of_a_kind_the_contract_does_not_define_is_refused():
    with pytest.raises(ValueError, match="made_up"):
        protocol.Event(1.0, "made_up", None, "")
    assert protocol.Event(1.0, "stalled", 0, "m").kind is EventKind.STALLED


def test_the_gui_takes_its_event_kinds_from_the_contract():
    from gui.models import diagnosis

    assert diagnosis.EventKind is EventKind  # one enum of kinds: the GUI re-declares none
    assert not {"STALLED", "STACKS", "CONNECTION_LOST"} & set(vars(diagnosis))


def test_a_metric_record_has_one_column_order_from_wire_to_store_to_replay(tmp_path):
    from runner.store.store import RecordBatch, RunStore

    record = MetricRecord(3, 1_700_000_000.5, 7, "loss", 0.25, "auto")
    metrics = protocol.Metrics.from_wire(json.loads(protocol.encode_metric_items(3, [list(record[1:])])))
    assert metrics.records == [record]
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_key="k", profile=None, spec_toml="", command=None, host="h", workdir=None,
                                  runner_pid=1, socket=None, world_size=1, status="running")
        store.write_batch(run_id, RecordBatch(metrics=metrics.records))
        assert store.metrics(run_id) == [record]
        assert store.read_chunk("metrics", run_id, 0, None, 10)[0] == [record]
    published = protocol.Update.from_wire(json.loads(protocol.Update(1.0, metrics=[record]).encode()))
    assert published.metrics == [record] and (record.rank, record.t, record.step) == (3, 1_700_000_000.5, 7)


@pytest.mark.parametrize("item, reason", [
    ([float("nan"), 1, "x", 1.0, "log"], protocol.MetricRejection.TIME),
    ([float("inf"), 1, "x", 1.0, "log"], protocol.MetricRejection.TIME),
    ([1.7e9, 2**63, "x", 1.0, "log"], protocol.MetricRejection.STEP),
    ([1.7e9, 1, "x\ud800y", 1.0, "log"], protocol.MetricRejection.NAME),
    ([1.7e9, 1, "x", 2**64 - 1, "log"], protocol.MetricRejection.VALUE),
    ([1.7e9, 1, "x", -(2**63) - 1, "log"], protocol.MetricRejection.VALUE),
    ([1.7e9, 1, 7, 1.0, "log"], protocol.MetricRejection.NAME),
    (["now", 1, "x", 1.0, "log"], protocol.MetricRejection.TIME),
    ([1.7e9, 1, "x"], protocol.MetricRejection.MALFORMED),
])
def test_a_value_the_store_cannot_hold_is_rejected_with_its_reason(item, reason):
    good = [1.7e9, 1, "loss", 0.5, "auto"]
    rejected: dict[str, int] = {}
    records = protocol.metric_records(0, [good, item, good], rejected)
    assert records == [MetricRecord(0, 1.7e9, 1, "loss", 0.5, "auto")] * 2
    assert rejected == {reason: 1}


def test_values_that_are_not_finite_are_kept_as_gaps_not_rejected():
    rejected: dict[str, int] = {}
    records = protocol.metric_records(0, [[1.7e9, 1, "loss", float("nan"), "auto"], [1.7e9, 2, "loss", True, "auto"]],
                                      rejected)
    assert [record[4] for record in records] == [None, None] and rejected == {}


PHASES = ["cpu", 0.0004, 0.0001, 0.0005, 0.0006, 0.0002, 0.0001, 0.0001]
"""``[clock, data, h2d, forward, backward, comm, optimizer, rest]``: 2 ms in all."""
STEP_ROW = [1.7e9, 4, 0.5, 0.002, 0.0005, 64, 0.0001, False, PHASES]
"""``[t, step, loss, step_time, data_wait, samples, cpu_wait, skipped, phases]``: a timed step of a DDP rank."""


def _decoded(items: list[list]) -> protocol.Metrics:
    """What the hub makes of ``items`` sent by a worker of rank 2: encoded, framed, decoded."""
    return protocol.Metrics.from_wire(protocol.decode(protocol.encode_metric_items(2, items)), 2)


def test_a_step_row_is_the_records_of_its_step_in_their_order_with_the_derived_ones():
    t, step, loss, step_time, data_wait, samples, cpu_wait, _skipped, phases = STEP_ROW
    log_item = [t + 1, 4, "lr", 0.1, "log"]
    metrics = _decoded([STEP_ROW, log_item])
    assert [(record[3], record[4]) for record in metrics.records] == [
        ("loss", loss), ("step_time", step_time), ("samples_per_s", samples / step_time), ("data_wait", data_wait),
        ("cpu_wait", cpu_wait), ("phase_clock", 0),
        *zip(protocol.PHASE_METRICS, phases[1:], strict=True),
        ("compute_time", pytest.approx(0.002 - 0.0004 - 0.0002 - 0.0001)), ("lr", 0.1)]
    assert all(record[:3] == (2, t, step) and record[5] == "auto" for record in metrics.records[:-1])
    assert metrics.records[-1] == (2, t + 1, 4, "lr", 0.1, "log") and metrics.rejected == {}


def test_compute_time_is_the_span_less_the_waits_and_on_the_cpu_clock_the_cpu_wait():
    values = [0.001, None, 0.002, 0.003, 0.004, 0.001, 0.001]  # 12 ms, no h2d
    assert protocol.compute_time("cpu", values, 0.0005) == pytest.approx(0.012 - 0.001 - 0.004 - 0.0005)
    assert protocol.compute_time("gpu", values, 0.0005) == pytest.approx(0.012 - 0.001 - 0.004)  # a GPU has no run queue


def test_a_skipped_step_is_one_record_more():
    row = [*STEP_ROW[:7], True, None]
    records = _decoded([row]).records
    assert ("skipped_step", 1) in [(record[3], record[4]) for record in records]
    assert protocol.step_row_size(row) == len(records)


@pytest.mark.parametrize("present", range(1 << 8))
def test_the_worker_counts_a_step_row_as_the_records_the_hub_makes_of_it(present):
    """Every combination of measured and not measured values (the heartbeat's ``sent`` is in records)."""
    row = list(STEP_ROW)
    row[8] = list(PHASES)
    for bit, index in enumerate((2, 3, 4, 6)):
        if not present & (1 << bit):
            row[index] = None
    row[5] = 64 if present & (1 << 4) else 0
    row[7] = bool(present & (1 << 5))
    if present & (1 << 6):
        row[8] = None
    elif present & (1 << 7):
        row[8][2] = row[8][5] = None  # no h2d, no process group
    records = _decoded([row]).records
    assert protocol.step_row_size(row) == len(records) == len(protocol.step_row_records(2, row))
    names = [record[3] for record in records]
    assert ("samples_per_s" in names) == (row[3] is not None and row[5] > 0)
    assert ("compute_time" in names) == (row[8] is not None)


def test_a_step_row_with_a_loss_that_is_not_finite_keeps_the_loss_as_a_gap_and_the_rest():
    """JSON has no NaN, and null in a row means "not measured": such a row goes as its records' items."""
    row = [*STEP_ROW[:2], float("nan"), *STEP_ROW[3:]]
    metrics = _decoded([STEP_ROW, row, [1.7e9, 5, float("inf"), None, None, 0, None, False, None]])
    by_step = [[(record[3], record[4]) for record in metrics.records if record[2] == step] for step in (4, 5)]
    assert len(by_step[0]) == 2 * protocol.step_row_size(row) and ("loss", None) in by_step[0]
    assert sum(value is None for _name, value in by_step[0]) == 1  # nothing derived from the loss
    assert by_step[1] == [("loss", None)] and metrics.rejected == {}


def test_a_phase_that_is_not_finite_is_a_gap_and_the_compute_time_not_measured():
    row = [*STEP_ROW[:8], ["gpu", float("nan"), *PHASES[2:]]]
    values = {record[3]: record[4] for record in _decoded([row]).records}
    assert values["phase_data"] is None and values["compute_time"] is None and values["phase_forward"] == 0.0005


@pytest.mark.parametrize("field, value, reason", [
    (0, "now", protocol.MetricRejection.TIME),
    (0, -1.0, protocol.MetricRejection.TIME),
    (1, None, protocol.MetricRejection.STEP),
    (1, 2**63, protocol.MetricRejection.STEP),
    (2, "0.5", protocol.MetricRejection.VALUE),
    (3, True, protocol.MetricRejection.VALUE),
    (5, -1, protocol.MetricRejection.VALUE),
    (5, 1.5, protocol.MetricRejection.VALUE),
    (7, None, protocol.MetricRejection.VALUE),
    (8, ["tpu", *PHASES[1:]], protocol.MetricRejection.VALUE),
    (8, ["cpu", "1", *PHASES[2:]], protocol.MetricRejection.VALUE),
    (8, PHASES[:4], protocol.MetricRejection.VALUE),
])
def test_a_step_row_the_store_cannot_hold_is_left_out_whole_and_counted_in_records(field, value, reason):
    bad = list(STEP_ROW)
    bad[field] = value
    rejected: dict[str, int] = {}
    records = protocol.metric_records(0, [STEP_ROW, bad, STEP_ROW], rejected)
    assert records == protocol.step_row_records(0, STEP_ROW) * 2
    assert sum(rejected.values()) >= 1 and set(rejected) == {reason}


def test_what_the_hub_derives_from_a_step_row_is_finite_or_not_measured():
    rows = [[1.7e9, 1, None, 5e-324, None, 2**63 - 1, None, False, None]]  # a row no worker sends: samples/s overflows
    assert protocol.metric_records(0, rows, {})[1] == (0, 1.7e9, 1, "samples_per_s", None, "auto")


def test_rows_that_are_not_finite_are_sent_as_lines_the_hub_takes_whole():
    """2,000 rows of NaN losses become their items: several lines, none over the line bound."""
    rows = [[1.7e9, 10**12 + index, float("nan"), 0.002, 0.0005, 64, 0.0001, False, PHASES] for index in range(2000)]
    lines = protocol.encode_metric_items(2, rows).splitlines()
    assert len(lines) > 1 and all(len(line) < protocol.MAX_LINE_BYTES for line in lines)
    records = [record for line in lines for record in protocol.Metrics.from_wire(protocol.decode(line), 2).records]
    assert len(records) == sum(map(protocol.step_row_size, rows)) == 2000 * 14
    assert [record[4] for record in records if record[3] == "loss"] == [None] * 2000


def test_integers_in_a_step_row_are_taken_as_numbers():
    row = [1_700_000_000, 4, 1, 2, None, 3, None, False, ["cpu", 1, None, None, None, None, None, 1]]
    assert protocol.metric_records(0, [row], {}) == [(0, 1.7e9, 4, "loss", 1.0, "auto"),
                                                     (0, 1.7e9, 4, "step_time", 2.0, "auto"),
                                                     (0, 1.7e9, 4, "samples_per_s", 1.5, "auto"),
                                                     (0, 1.7e9, 4, "phase_clock", 0, "auto"),
                                                     (0, 1.7e9, 4, "phase_data", 1.0, "auto"),
                                                     (0, 1.7e9, 4, "phase_rest", 1.0, "auto"),
                                                     (0, 1.7e9, 4, "compute_time", 1.0, "auto")]


def test_phase_shares_add_up_to_one_and_a_phase_never_measured_has_none():
    shares = protocol.phase_shares([[0.001, None, 0.002, 0.003, None, 0.001, 0.003], [0.001, None, 0.002, 0.003, None,
                                                                                      0.001, 0.003]])
    assert shares is not None and sum(value for value in shares.values() if value is not None) == pytest.approx(1.0)
    assert shares["h2d"] is None and shares["comm"] is None and shares["data"] == pytest.approx(0.1)
    assert protocol.phase_shares([]) is None


def test_deeply_nested_json_is_a_bad_line_not_a_recursion_error():
    with pytest.raises(protocol.ProtocolError) as error:
        protocol.decode(b"[" * 5000 + b"\n")
    assert error.value.reason == "too_deep"


def test_lenient_numbers_are_defined_once():
    assert protocol.as_int(3.9) == 3 and protocol.as_int(True) is None and protocol.as_int(2**63) is None
    assert protocol.as_float(float("nan")) is None and protocol.as_float(2) == 2.0 and protocol.as_float("1") is None


def test_the_data_wait_share_pairs_each_step_in_either_order():
    pairs = protocol.StepPairs()
    assert pairs.add(5, 1.0, protocol.DATA_WAIT, 0.05) is None
    assert pairs.add(5, 1.1, protocol.STEP_TIME, 0.2) == (5, 1.1, 0.25)
    assert pairs.add(6, 1.2, protocol.STEP_TIME, 0.0) is None
    assert pairs.add(6, 1.2, protocol.DATA_WAIT, 0.1) == (6, 1.2, None)  # not measurable: shown as "-"


def test_a_ranks_fate_travels_whole_and_its_wording_is_the_runners():
    from runner import exit_status

    killed = RankFailure(rank=1, host="node-a", exit_code=-9, signal="SIGKILL")
    assert exit_status.describe_end_of(killed.exit_code, killed.signal) == "signal SIGKILL"  # in a headline
    assert exit_status.failure_end_words(killed) == "SIGKILL"  # in a table or a panel
    assert killed.who == "rank 1 on node-a"
    assert RankFailure.from_wire(killed.to_wire()) == killed
    stopped = RankFailure(rank=0, exit_code=-15, signal="SIGTERM", after=1)
    assert RankFailure.from_wire(stopped.to_wire()).after == 1
    assert exit_status.failure_end_words(stopped.to_wire()) == "SIGTERM, stopped after rank 1 failed"
    lost = RankFailure(rank=2, evidence=Evidence.CONNECTION_LOST)
    assert exit_status.failure_end_words(lost) == exit_status.describe_end_of(None, None, lost.evidence) == (
        "its connection dropped without an exit: killed, or its node went away")
    assert [exit_status.ended_by(code) for code in (0, 1, -15, None)] == ["exit code 0", "exit code 1", "SIGTERM", "–"]
    assert exit_status.signal_name(-9) == "SIGKILL" and exit_status.signal_name(3) is None
    assert not hasattr(protocol, "ended_by")  # one wording: the runner's, not a second in the contract


def test_losses_are_worded_per_rank():
    lines = describe_losses([RankLosses(rank=3, dropped=0, rejected=120, not_received=0)], "disk full")
    assert lines[0].startswith("rank 3: 120 records dropped by the runner")
    assert "disk full" in lines[1]


def test_every_message_survives_the_wire():
    samples = [
        protocol.Hello(rank=2, token="t", host="h", pid=7, argv=["train.py"]),
        protocol.Heartbeat(2, 1_700_000_000.0, 9, 1, 40),
        protocol.ExceptionReport(2, 1_700_000_000.0, "ValueError", "x", "tb", "MainThread", True),
        protocol.Exit(2, 1_700_000_000.0, 1),
        protocol.ParamHash(2, 1_700_000_000.0, 4, "abc"),
        protocol.StacksWritten(2, 1_700_000_000.0, "/tmp/s"),
        protocol.AgentHello(1, token="t", host="node-b"),
        protocol.WorkerLost(2, 1_700_000_000.0),
        protocol.NodeExit(1, 1_700_000_000.0, 0, None, 0),
        protocol.Subscribe(history=False, logs=True),
        protocol.Bye("succeeded"),
        protocol.Error("no"),
    ]
    for message in samples:
        assert protocol.decode_message(message.encode()) == message, message


def test_the_hub_refuses_an_observer_that_is_not_a_hub_observer():
    # one that defines only some methods would fail on every other call, at run time
    import pytest

    from runner.hub.observer import HubObserver, Observers

    class OnlyMessages:
        def on_message(self, message):
            pass

    observers = Observers()
    with pytest.raises(TypeError, match="OnlyMessages is not a HubObserver"):
        observers.add(OnlyMessages())
    observers.add(HubObserver())


def test_a_no_process_group_notice_survives_the_wire_with_its_facts():
    facts = {"steps": 5, "world_size": 2, "local_world_size": 2, "fabric": "lightning_fabric",
             "fabric_environment": "LT_DEVICES=2", "fabric_strategy": "SingleDeviceStrategy", "fabric_world_size": 1,
             "fabric_accelerator": "cpu", "fabric_launched": False}
    notice = protocol.Notice(1, 1_700_000_000.0, protocol.NO_PROCESS_GROUP, facts)
    decoded = protocol.decode_message(notice.encode())
    assert decoded == notice
    assert isinstance(decoded, protocol.Notice) and decoded.key == "no_process_group" and decoded.facts == facts
