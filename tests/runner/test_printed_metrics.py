"""Printed metrics (``--parse-stdout``) land at the step the rank was at when it printed them,
however late its measured steps arrive (``runner.telemetry.printed_metrics``).

The messages are the real protocol's, decoded from the bytes a reporter sends; the lines
are the Hugging Face Trainer's (it prints no step: the measured one places them).
"""

from __future__ import annotations

from rankwatch import protocol
from rankwatch.protocol import LogLine
from runner.telemetry.printed_metrics import HOLD_SECONDS, Point, PrintedMetrics
from runner.telemetry.stdout_parser import StdoutMetrics

T0 = 1_700_000_000.0
STEP_SECONDS = 0.01


def step_end(step: int) -> float:
    """When the rank's optimizer step ``step`` ended."""
    return T0 + (step + 1) * STEP_SECONDS


def records(rank: int, steps: range) -> protocol.Message:
    """The reporter's batch for ``steps``: each step's time and loss, made at the step's end."""
    items = []
    for step in steps:
        items.append([step_end(step), step, protocol.STEP_TIME, STEP_SECONDS, "auto"])
        items.append([step_end(step), step, "loss", 1.0 / (step + 1), "auto"])
    return protocol.decode_message(protocol.encode_metric_items(rank, items))


def heartbeat(rank: int, t: float, step: int | None) -> protocol.Message:
    return protocol.decode_message(protocol.Heartbeat(rank, t, step, 0, 0).encode())


def hf_line(rank: int, printed_after_step: int, loss: float) -> LogLine:
    """The Trainer's log line, printed just after an optimizer step (between it and the next)."""
    text = f"{{'loss': '{loss:.4g}', 'grad_norm': '0.4', 'learning_rate': '0.001', 'epoch': '0.5'}}"
    return LogLine(rank, step_end(printed_after_step) + STEP_SECONDS / 2, "stdout", text, None)


def printed(instrumented: bool = True) -> tuple[PrintedMetrics, list[Point]]:
    points: list[Point] = []
    return PrintedMetrics(StdoutMetrics(), points.extend, ranks_report_steps=instrumented), points


def losses(points: list[Point]) -> dict[int, float]:
    return {step: value for _rank, _t, step, name, value in points if name == "loss"}


def test_lines_that_come_before_their_steps_records_are_placed_at_the_step_they_were_printed_at():
    """The Hugging Face symptom: lines reach the runner at once, the steps in the reporter's next
    batch. Read against the newest step heard, prints at steps 2, 5 and 8 all landed on step 0
    and the later two were dropped as repeats."""
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 1)))
    for step, loss in ((2, 3.91), (5, 3.90), (8, 3.89)):
        metrics.on_log(hf_line(0, step, loss))
    assert points == []  # nothing is read before the rank's telemetry caught up
    metrics.on_message(records(0, range(1, 10)))
    assert losses(points) == {2: 3.91, 5: 3.90, 8: 3.89}
    assert {rank for rank, *_ in points} == {0}
    assert [t for _rank, t, _step, name, _value in points if name == "loss"] == [
        hf_line(0, step, 0).t for step in (2, 5, 8)]  # each point keeps the time it was printed


def test_a_line_waits_only_until_a_record_made_after_it_arrives():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 4)))
    metrics.on_log(hf_line(0, 3, 3.5))  # printed after step 3; nothing newer heard yet
    metrics.on_message(records(0, range(4, 4)))  # an empty batch says nothing
    assert points == []
    metrics.on_message(records(0, range(4, 5)))
    assert losses(points) == {3: 3.5}


def test_a_line_printed_before_what_was_already_heard_is_read_at_once():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 10)))
    metrics.on_log(hf_line(0, 4, 2.5))  # a slow pipe: the rank is further already
    assert losses(points) == {4: 2.5}


def test_an_idle_ranks_heartbeat_releases_its_lines_but_one_naming_a_newer_step_does_not():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 3)))
    metrics.on_log(hf_line(0, 2, 2.0))
    metrics.on_message(heartbeat(0, step_end(2) + 1.0, step=3))  # step 3's records are still on their way
    assert points == []
    metrics.on_message(heartbeat(0, step_end(2) + 2.0, step=2))  # evaluating, say: no new step
    assert losses(points) == {2: 2.0}


def test_a_rank_that_never_reports_a_step_has_its_lines_read_at_its_heartbeat_and_counted():
    metrics, points = printed()
    line = LogLine(1, T0, "stdout", "loss: 0.75", None)
    metrics.on_log(line)
    assert points == []
    metrics.on_message(heartbeat(1, T0 + 0.5, step=None))
    assert points == [(1, T0, 0, "loss", 0.75)]  # no step anywhere: its first point


def test_the_end_of_a_rank_releases_its_lines_exit_or_lost_connection():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 6)))
    metrics.on_message(records(1, range(0, 6)))
    metrics.on_log(hf_line(0, 5, 0.5))
    metrics.on_log(hf_line(1, 5, 0.6))
    metrics.on_message(protocol.decode_message(protocol.Exit(0, step_end(5) + 0.1, 0).encode()))
    assert losses(points) == {5: 0.5}
    metrics.on_worker_lost(1, step_end(5) + 0.2)
    assert [(rank, step, value) for rank, _t, step, name, value in points if name == "loss"] == [
        (0, 5, 0.5), (1, 5, 0.6)]
    metrics.on_log(LogLine(1, step_end(6), "stdout", "step 6 loss: 0.7", None))  # nothing more will come
    assert points[-1] == (1, step_end(6), 6, "loss", 0.7)  # so it is read at once


def test_a_line_whose_rank_stays_silent_is_read_after_the_hold_with_the_steps_known():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 3)))
    line = hf_line(0, 7, 1.5)  # the reporter stopped sending after step 2
    metrics.on_log(line)
    metrics.tick(line.t + HOLD_SECONDS - 0.1)
    assert points == []
    metrics.tick(line.t + HOLD_SECONDS + 0.1)
    assert losses(points) == {2: 1.5}


def test_the_end_of_the_run_reads_every_line_left_and_later_lines_at_once():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 3)))
    metrics.on_log(hf_line(0, 4, 1.0))
    metrics.finish()
    assert losses(points) == {2: 1.0}
    metrics.on_log(LogLine(0, step_end(9), "stdout", "step 9 loss: 0.9", None))
    assert losses(points) == {2: 1.0, 9: 0.9}


def test_without_instrumentation_lines_are_read_at_once():
    metrics, points = printed(instrumented=False)
    metrics.on_log(LogLine(0, T0, "stdout", "step 40 loss: 0.25", None))
    assert points == [(0, T0, 40, "loss", 0.25)]


def test_lines_of_one_rank_are_read_in_the_order_they_were_printed():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 2)))
    for step in range(2, 8):
        metrics.on_log(LogLine(0, step_end(step) + STEP_SECONDS / 2, "stdout", f"loss: {step / 10}", None))
    metrics.on_message(records(0, range(2, 5)))
    assert list(losses(points)) == [2, 3]  # the later lines still wait for their steps
    metrics.on_message(records(0, range(5, 9)))
    assert list(losses(points).items()) == [(step, step / 10) for step in range(2, 8)]


def test_a_restarted_rank_counts_its_steps_afresh():
    metrics, points = printed()
    metrics.on_message(records(0, range(0, 50)))
    metrics.on_worker_lost(0, step_end(50))
    restarted_at = step_end(50) + 5
    metrics.on_hello(protocol.Hello(rank=0, token="t", run_key="k", local_rank=0, node_rank=0, world_size=1,
                                    local_world_size=1, host="h", pid=2, python="py", python_version="3",
                                    restart=1, argv=[]))
    metrics.on_log(LogLine(0, restarted_at + 0.001, "stdout", "loss: 4.5", None))
    items = [[restarted_at + 0.002, 0, "loss", 4.5, "auto"]]
    metrics.on_message(protocol.decode_message(protocol.encode_metric_items(0, items)))
    assert losses(points) == {0: 4.5}  # not 49, the first incarnation's last step
