"""Where a rank is, from its main-thread stack: the kind of place and the deepest frame of the user's code.

The ``faulthandler_*.txt`` dumps are real (``data/record_dumps.py``: a process stuck
in each place, dumped by the worker's handler); the two ``diag_hang`` dumps come
from a real torchrun job. Places that cannot be produced on this CPU-only machine
(a CUDA synchronise) or that leave no Python frame (``work.wait()``) are built
from frames shaped like the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.diagnosis.progress import RankProgress
from runner.diagnosis.stack_dumps import Frame, main_thread, parse_dump, user_frames
from runner.diagnosis.stack_places import WAITING_KINDS, is_user_code, place_of
from runner.diagnosis.stacks import analyse

DATA = Path(__file__).parent / "data"
SITE = "/venv/lib/python3.11/site-packages"


def frames_of(name: str) -> list[Frame]:
    return user_frames(main_thread(parse_dump((DATA / f"faulthandler_{name}.txt").read_text())).frames)


@pytest.mark.parametrize(("name", "kind", "op", "function"), [
    ("rank0_barrier", "collective", "barrier", "<module>"),
    ("init", "init", "init_process_group", "<module>"),
    ("spawn", "spawn_wait", "torch.multiprocessing.spawn", "<module>"),
    ("data_loader", "data_loader", None, "__getitem__"),
    ("backward", "backward", None, "backward"),
    ("rank1_helper", "user", None, "wait_for_checkpoint"),
])
def test_real_dumps_are_placed_by_their_library_frames_with_the_users_deepest_frame(name, kind, op, function):
    place = place_of(frames_of(name))
    assert (place.kind, place.op, place.frame.function) == (kind, op, function)
    assert is_user_code(place.frame)


def test_a_dataset_running_inside_the_data_loader_is_in_the_data_loader_at_its_own_line():
    place = place_of(frames_of("data_loader"))
    assert place.frame.line == 16 and place.chain == ("<module>", "__getitem__")
    assert place.what == "is in the data loader" and not place.waiting


def test_which_kinds_wait_for_other_ranks():
    assert {place_of(frames_of(name)).kind for name in ("rank0_barrier", "init", "backward")} <= WAITING_KINDS
    assert not {place_of(frames_of(name)).kind for name in ("spawn", "data_loader", "rank1_helper")} & WAITING_KINDS


def test_a_cuda_synchronise_and_a_wait_on_a_collectives_handle(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nwork = dist.all_reduce(x, async_op=True)\nwork.wait()\n")
    sync = [Frame(str(script), 1, "<module>"), Frame(f"{SITE}/torch/cuda/__init__.py", 1085, "synchronize")]
    assert (place_of(sync).kind, place_of(sync).op) == ("cuda_sync", "torch.cuda.synchronize")
    handle = place_of([Frame(str(script), 3, "<module>")])  # Work.wait is C: no Python frame below the user's
    assert (handle.kind, handle.code) == ("work_wait", "work.wait()")
    assert handle.what == "waits on a collective's handle (Work.wait)"


def test_the_collective_is_the_c10d_function_the_user_called_not_its_helpers():
    frames = [Frame("/home/u/train.py", 9, "<module>"),
              Frame(f"{SITE}/torch/distributed/c10d_logger.py", 83, "wrapper"),
              Frame(f"{SITE}/torch/distributed/distributed_c10d.py", 3400, "broadcast_object_list"),
              Frame(f"{SITE}/torch/distributed/distributed_c10d.py", 2800, "broadcast")]
    assert place_of(frames).op == "broadcast_object_list"


def test_a_project_folder_named_torch_is_the_users_code():
    assert is_user_code(Frame("/home/u/torch/experiments/train.py", 1, "<module>"))
    assert not is_user_code(Frame("/src/pytorch/torch/distributed/distributed_c10d.py", 1, "barrier"))
    assert not is_user_code(Frame("/usr/lib/python3.11/threading.py", 1, "wait"))


def test_every_rank_waiting_for_the_processes_it_spawned_is_said_so():
    result = analyse({0: frames_of("spawn"), 1: frames_of("spawn")}, "stalled", 1.0,
                     progress={rank: RankProgress(step=None, idle_seconds=200.0, stalled=True, progressing=False)
                               for rank in (0, 1)})
    verdict = result.verdict.to_json()
    assert verdict["kind"] == "same_place" and verdict["culprits"] == []
    assert verdict["message"] == ("all 2 stalled ranks are at the same place, in no collective: spawn_rank.py:14 in "
                                  "<module>, where they wait for spawned processes (torch.multiprocessing.spawn)")
