"""Small worker-side pieces tested in-process (no torch import, no subprocess)."""

from __future__ import annotations

import socket
import sys
import types

import pytest

import rankwatch
from rankwatch import _torch_hook
from rankwatch._bootstrap import exit_code, parse_target
from rankwatch._buffer import KIND_LOG, RecordBuffer
from rankwatch._connection import parse_address
from rankwatch._environment import WorkerEnvironment, legacy_local_rank_argument
from rankwatch._instrument import batch_size
from rankwatch._loss import StepLoss
from rankwatch._values import NOT_A_NUMBER, PendingCopy, PendingSum, capture


def test_buffer_never_grows_past_its_limit_and_counts_drops():
    buffer = RecordBuffer(limit=3)
    for index in range(5):
        buffer.put((KIND_LOG, 0.0, index, {}))

    assert [record[2] for record in buffer.drain()] == [0, 1, 2]
    assert buffer.dropped == 2
    buffer.disable()
    buffer.put((KIND_LOG, 0.0, 9, {}))
    assert len(buffer) == 0 and buffer.dropped == 3


def test_log_is_a_no_op_until_activated_then_queues_one_record():
    assert not rankwatch.is_active()
    assert rankwatch.log(step=1, loss=0.5) is None

    buffer = RecordBuffer(10)
    rankwatch._activate(buffer)
    try:
        rankwatch.log(step=4, loss=0.5, tokens=128, flag=True, name="not a number")
        rankwatch.log(loss=0.25)
    finally:
        rankwatch._activate(None)

    first, second = buffer.drain()
    assert first[0] == KIND_LOG and first[2] == 4
    # a value it cannot read goes as NOT_A_NUMBER: the hub rejects that one record and counts it
    assert first[3] == {"loss": 0.5, "tokens": 128, "flag": 1, "name": NOT_A_NUMBER}
    assert second[3] == {"loss": 0.25} and isinstance(second[2], int)


class _FakeEvent:
    def __init__(self):
        self.recorded_on = None
        self.done = False

    def record(self, stream):
        self.recorded_on = stream

    def query(self):
        return self.done


class _FakeHostTensor:
    def __init__(self, value):
        self._value = value

    def item(self):
        return self._value


class _FakeCudaTensor:
    """Fails the test if anything synchronises it on the calling thread."""

    is_cpu = False
    is_cuda = True
    device = "cuda:1"

    def __init__(self, value):
        self._value = value
        self.copies = []

    def numel(self):
        return 1

    def item(self):
        raise AssertionError("item() on a CUDA tensor synchronises the training thread")

    def detach(self):
        return self

    def to(self, device, non_blocking=False):
        self.copies.append((device, non_blocking))
        return _FakeHostTensor(self._value)


def test_cuda_values_are_copied_without_blocking_and_read_once_the_event_completes(monkeypatch):
    events = []

    def make_event():
        events.append(_FakeEvent())
        return events[-1]

    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            Event=make_event, current_stream=lambda device: f"stream of {device}"
        )
    )
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    tensor = _FakeCudaTensor(0.75)

    captured = capture(tensor)

    assert isinstance(captured, PendingCopy)
    assert tensor.copies == [("cpu", True)]
    assert events[0].recorded_on == "stream of cuda:1"
    assert not captured.ready()
    events[0].done = True
    assert captured.ready() and captured.value() == 0.75
    total = PendingSum([captured, capture(_FakeCudaTensor(0.25))], host_sum=2.0)
    assert not total.ready()
    events[1].done = True
    assert total.value() == pytest.approx(3.0)


def test_a_step_of_cuda_losses_is_a_sum_of_non_blocking_copies(monkeypatch):
    events = []

    def make_event():
        events.append(_FakeEvent())
        return events[-1]

    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Event=make_event, current_stream=lambda device: device)
    )
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    loss = StepLoss(_FakeCudaTensor)
    micro_batches = [_FakeCudaTensor(value / 4) for value in (1.0, 2.0, 3.0, 6.0)]

    for tensor in micro_batches:
        loss.on_backward(tensor, None)  # item() would raise: nothing is read on this thread
    taken = loss.take()

    assert [tensor.copies for tensor in micro_batches] == [[("cpu", True)]] * 4
    assert isinstance(taken, PendingSum) and not taken.ready()
    for event in events:
        event.done = True
    assert taken.value() == pytest.approx(3.0)  # the mean of the unscaled losses 1, 2, 3, 6
    assert loss.take() is None  # the next step starts empty


def test_capture_keeps_numbers_and_skips_what_is_not_a_scalar():
    assert capture(3) == 3 and capture(2.5) == 2.5 and capture(True) == 1
    assert capture("text") is None and capture([1, 2]) is None
    assert capture(_Numpyish()) == 1.25


class _Numpyish:
    def __float__(self):
        return 1.25


class _Tensorish:
    def __init__(self, *shape):
        self.shape = shape


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (_Tensorish(32, 3), 32),
        ((_Tensorish(16, 8), _Tensorish(16)), 16),
        ([[_Tensorish(4)], 1], 4),
        ({"input_ids": _Tensorish(8, 128), "labels": _Tensorish(8)}, 8),
        (_Tensorish(), None),
        ("a string", None),
        ([], None),
    ],
)
def test_batch_size_is_the_first_dimension_of_the_first_tensor(batch, expected):
    assert batch_size(batch, _Tensorish) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("/run/rankwatch/hub.sock", (socket.AF_UNIX, "/run/rankwatch/hub.sock")),
        ("tcp://10.0.0.5:7000", (socket.AF_INET, ("10.0.0.5", 7000))),
        ("tcp://[::1]:7000", (socket.AF_INET, ("::1", 7000))),
    ],
)
def test_hub_addresses(address, expected):
    assert parse_address(address) == expected


def test_environment_contract_with_torchrun_variables():
    environment = WorkerEnvironment.from_environ({
        "RANKWATCH_SOCKET": "/tmp/hub.sock", "RANKWATCH_TOKEN": "t", "RANKWATCH_RUN_KEY": "j",
        "RANKWATCH_RUN": "12", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "RANKWATCH_NODE_RANK": "9",
        "RANKWATCH_NODE_HOST": "node-b", "RANKWATCH_INSTRUMENT": "0", "RANKWATCH_HASH_EVERY": "oops",
    })  # fmt: skip

    assert (environment.rank, environment.local_rank, environment.world_size) == (5, 1, 8)
    assert environment.node_rank == 1  # torchrun's GROUP_RANK wins
    assert (environment.run, environment.host, environment.instrument) == (12, "node-b", False)
    assert environment.hash_every == 0  # malformed: default, never a crash
    assert WorkerEnvironment.from_environ({"RANK": "0"}) is None
    assert (
        legacy_local_rank_argument({"RANKWATCH_LEGACY_LOCAL_RANK": "1", "LOCAL_RANK": "2"})
        == "--local_rank=2"
    )
    assert legacy_local_rank_argument({"LOCAL_RANK": "2"}) is None


def test_command_line_and_exit_codes():
    assert parse_target(["train.py", "--lr", "1"]) == (False, "train.py", ["--lr", "1"])
    assert parse_target(["-m", "pkg.train", "-x"]) == (True, "pkg.train", ["-x"])
    assert parse_target(["-mpkg.train"]) == (True, "pkg.train", [])
    assert parse_target([]) is None and parse_target(["-m"]) is None
    assert [exit_code(code) for code in (None, 0, 3, 256, -1, "message", True)] == [
        0,
        0,
        3,
        0,
        255,
        1,
        1,
    ]


def test_post_import_hook_runs_after_the_module_executes(tmp_path, monkeypatch):
    (tmp_path / "rankwatch_hook_target.py").write_text("VALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    _torch_hook.call_when_imported(
        lambda module: seen.append(module.VALUE), name="rankwatch_hook_target"
    )
    import rankwatch_hook_target

    assert seen == [42]
    assert type(rankwatch_hook_target.__loader__).__name__ == "SourceFileLoader"
    assert rankwatch_hook_target.__spec__.loader is rankwatch_hook_target.__loader__
    assert not any(type(finder).__name__ == "_PostImportFinder" for finder in sys.meta_path)
    sys.modules.pop("rankwatch_hook_target")


# ---- per-rank argument templates (rankwatch._templates) ------------------------------------------


def test_templates_expand_from_torchruns_variables_and_keep_everything_else():
    from rankwatch._templates import TemplateError, expand, values_from_environment

    environ = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1", "MASTER_ADDR": "::1",
               "MASTER_PORT": "29500", "RANKWATCH_INIT_FILE": "/run/7/init-method/store"}
    values = values_from_environment(environ)
    arguments = ["--rank={rank}", "{local_rank}/{world_size}@{node_rank}", "{init_method}", "{init_method:tcp}",
                 "{init_method:file}", "{{rank}}", '{"lr": 0.1}', "}{", "--plain"]
    assert expand(arguments, values) == ["--rank=3", "1/4@1", "tcp://[::1]:29500", "tcp://[::1]:29500",
                                         "file:///run/7/init-method/store", "{rank}", '{"lr": 0.1}', "}{", "--plain"]
    with pytest.raises(TemplateError) as caught:
        expand(["--x", "{init_method:file}"], values_from_environment({"RANK": "0"}))
    assert caught.value.index == 1 and "RANKWATCH_INIT_FILE is not set" in caught.value.message


def test_a_self_spawning_scripts_main_process_is_a_launcher_only_when_its_text_spawns(tmp_path, monkeypatch):
    from rankwatch._spawn import rank_environ, script_spawns, target_spawns

    spawning, alone = tmp_path / "spawning.py", tmp_path / "alone.py"
    spawning.write_text("import torch.multiprocessing as mp\nmp.spawn(main, nprocs=2)\n")
    alone.write_text("model = torch.nn.DataParallel(net)\n")
    assert script_spawns(str(spawning)) and not script_spawns(str(alone))
    assert script_spawns(None) and script_spawns(str(tmp_path / "missing.py"))  # not read: assume it does
    package = tmp_path / "spawnpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import torch.multiprocessing as mp\nmp.spawn(main, nprocs=2)\n")
    (package / "alone.py").write_text("print('one process')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert target_spawns(True, "spawnpkg") and not target_spawns(True, "spawnpkg.alone")
    assert target_spawns(True, "no_such_module_here")
    environ = rank_environ(1, 2, {"RANKWATCH_SOCKET": "/s"})
    assert WorkerEnvironment.from_environ(environ).rank == 1 and environ["WORLD_SIZE"] == "2"
