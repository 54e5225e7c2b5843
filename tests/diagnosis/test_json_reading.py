"""Reading the diagnosis's JSON objects checks each value: one of another type reads as absent.

A capture or a Flight Recorder record comes back from disk, the store or torch; its values are
``object`` and are never trusted to have the type their writer sends.
"""

from __future__ import annotations

from runner.diagnosis.flight_recorder import CollectiveEntry
from runner.diagnosis.stack_dumps import Frame
from runner.diagnosis.stacks import MissingStack, analyse, format_stacks


def test_a_flight_recorder_entry_field_of_another_type_reads_as_absent():
    entry = {"profiling_name": 7, "input_sizes": "4x4", "state": ["scheduled"], "record_id": "9"}
    assert CollectiveEntry.from_torch(3, entry) == CollectiveEntry(seq=3, op=None, input_sizes=None, state=None,
                                                                   record_id=None)


def test_a_capture_whose_missing_list_holds_a_non_object_still_formats_the_ranks_it_names():
    capture = analyse({0: [Frame("train.py", 3, "main")]}, "requested", 1.0, [MissingStack(1, "gone")]).to_json()
    capture["missing"] = [{"rank": 1, "why": "gone"}, "rank 2"]
    assert "rank 1: no stack (gone)" in format_stacks(capture)
