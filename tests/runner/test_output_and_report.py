"""Splitting torchrun's tee'd output back into per-rank lines, and reading its failure report."""

from __future__ import annotations

from runner.diagnosis.torchrun_report import parse_torchrun_report
from runner.launch.output import RankLineSplitter


def texts(lines):
    return [(line.rank, line.text) for line in lines]


def test_prefixed_lines_are_attributed_and_unprefixed_are_torchrun_own():
    splitter = RankLineSplitter("stdout")
    lines = splitter.feed("[rw:0]:epoch 1\nW1122 torchrun warning\n[rw:12]:hello [rw:] literal\n", 1.0)
    assert texts(lines) == [(0, "epoch 1"), (None, "W1122 torchrun warning"), (12, "hello [rw:] literal")]


def test_partial_lines_of_two_ranks_interleaved_on_one_physical_line():
    splitter = RankLineSplitter("stdout")
    first = splitter.feed("[rw:0]:abc[rw:1]:xyz\n", 1.0)
    second = splitter.feed("[rw:0]:def\n", 1.1)
    assert texts(first) == [(1, "xyz")]
    assert texts(second) == [(0, "abcdef")]


def test_prefix_cut_between_chunks_and_continuations():
    splitter = RankLineSplitter("stderr")
    assert splitter.feed("[rw:3]:part one", 1.0) == []
    assert splitter.feed(" continues[r", 1.1) == []
    lines = splitter.feed("w:4]:four\n[rw:3]: end\n", 1.2)
    assert texts(lines) == [(4, "four"), (3, "part one continues end")]
    assert all(line.stream == "stderr" for line in lines)


def test_stale_partial_line_is_flushed_eventually():
    splitter = RankLineSplitter("stdout")
    splitter.feed("[rw:5]:progress 10%", 1.0)
    assert splitter.flush_stale(1.5) == []
    assert texts(splitter.flush_stale(2.1)) == [(5, "progress 10%")]


def test_old_torch_prefix_gives_local_rank():
    [line] = RankLineSplitter("stdout").feed("[default1]:old style\n", 1.0)
    assert (line.rank, line.local_rank_only, line.text) == (1, True, "old style")


REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
fail.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_00:36:49
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4805)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4805
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_00:36:49
  host      : node-b
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4806)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4806
============================================================"""


def test_torchrun_failure_report():
    report = parse_torchrun_report(REPORT.splitlines())
    assert [(f.rank, f.exit_code, f.root_cause) for f in report.failures] == [(0, -15, False), (1, -9, True)]
    root = report.root_cause
    assert (root.host, root.pid, root.local_rank, root.error_file) == ("node-b", 4806, 1, None)
    assert root.traceback == "Signal 9 (SIGKILL) received by PID 4806"


def test_a_rank_line_rewritten_with_carriage_returns_is_its_last_state():
    """torchrun's own copy of a worker's progress bar (written before the bootstrap took over)."""
    splitter = RankLineSplitter("stderr")
    assert splitter.feed("[rw:2]:\r 10%|#[rw:3]:\rother 5%", 1.0) == []
    lines = splitter.feed("[rw:2]:\r 99%|#########\x1b[A\n[rw:3]:\rother 100%   \n", 1.1)
    assert texts(lines) == [(2, " 99%|#########"), (3, "other 100%")]
