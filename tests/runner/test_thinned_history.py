"""A replay the hub shortened says so: in the typed message, in `rankwatch attach`'s terminal
and in the monitor (tests/gui/test_monitor.py). The store keeps everything; the person attaching
must not take thinned charts or missing old lines for the run itself."""

from __future__ import annotations

import io

from runner.runstate.messages import HistoryEnd, RunInfo, SnapshotMessage, decode_hub_message
from runner.view.terminal import TerminalView


def test_history_end_keeps_what_the_hub_left_out_and_words_it():
    end = decode_hub_message({"type": "history_end", "decimated": True, "left_out": {"logs": 120000, "events": 0}})
    assert end == HistoryEnd(decimated=True, left_out={"logs": 120000, "events": 0})
    assert end.thinned and HistoryEnd.from_wire(end.to_wire()) == end
    assert end.describe(7) == ("Attached with a shortened history: older points of each chart are the low and high "
                               "of their stretch; 120,000 log lines are not shown. The store keeps "
                               "everything (rankwatch runs logs 7).")
    whole = decode_hub_message({"type": "history_end"})  # an older hub, or a run within the bounds
    assert whole == HistoryEnd() and not whole.thinned and whole.describe(7) == ""
    assert decode_hub_message({"type": "history_end", "decimated": "yes", "left_out": {"logs": -3}}) == HistoryEnd()


def test_attach_prints_once_that_the_history_came_shortened():
    out, err = io.StringIO(), io.StringIO()
    view = TerminalView(live=False, out=out, err=err, status_every=0)
    view.handle(SnapshotMessage(RunInfo(id=7, status="running", started=1.0)).to_wire())
    view.handle(HistoryEnd(decimated=True, left_out={"gpu_samples": 5}).to_wire())
    assert err.getvalue().count("Attached with a shortened history") == 1
    assert "5 GPU samples are not shown" in err.getvalue() and "rankwatch runs logs 7" in err.getvalue()
    quiet_out, quiet_err = io.StringIO(), io.StringIO()
    quiet = TerminalView(live=False, out=quiet_out, err=quiet_err, status_every=0)
    quiet.handle(HistoryEnd().to_wire())
    assert "shortened" not in quiet_err.getvalue() + quiet_out.getvalue()
