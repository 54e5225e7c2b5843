"""Which processes a script starts are ranks (``rankwatch._rank_starters``), and what a rank that
starts ranks under torchrun says.

PyTorch's "Writing Distributed Applications" tutorial starts its ranks with
``Process(target=init_process, ...)``; Python's ``Process`` also starts helpers. The text test
serves the runner's ``auto`` launch mode, the code test ``Process.start`` in the launcher.
"""

from __future__ import annotations

import textwrap

import pytest
from worker_harness import FakeHub, run_worker, worker_environment

from rankwatch._rank_starters import find_process_rank_start, starts_a_rank

TUTORIAL = '''
import os
import torch.distributed as dist
import torch.multiprocessing as mp

def run(rank, size):
    pass

def init_process(rank, size, fn, backend="gloo"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)

if __name__ == "__main__":
    processes = []
    mp.set_start_method("spawn")
    for rank in range(2):
        p = mp.Process(target=init_process, args=(rank, 2, run))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
'''

BY_NAME_TWO_DEEP = '''
from multiprocessing import Process
from torch.distributed import init_process_group

def ddp_setup(rank, world_size):
    init_process_group(backend="gloo", rank=rank, world_size=world_size)

def main(rank, world_size):
    ddp_setup(rank, world_size)

if __name__ == "__main__":
    workers = [Process(target=main, args=(rank, 2)) for rank in range(2)]
'''

HELPER = '''
import multiprocessing
import torch.distributed as dist

def serve_batches(queue):
    while True:
        queue.put(None)

def train():
    dist.init_process_group("gloo")

if __name__ == "__main__":
    multiprocessing.Process(target=serve_batches, args=(None,), daemon=True).start()
    train()
'''


def test_the_tutorial_harness_and_a_by_name_import_two_calls_deep_start_ranks():
    found = find_process_rank_start(TUTORIAL)
    assert found is not None and found.describe() == "mp.Process(target=init_process) on line 19"
    deep = find_process_rank_start(BY_NAME_TWO_DEEP)
    assert deep is not None and deep.describe() == "Process(target=main) on line 12"


def test_a_helper_process_is_not_a_rank_even_when_the_script_makes_a_group_itself():
    assert find_process_rank_start(HELPER) is None
    assert find_process_rank_start("def broken(:\n") is None
    assert find_process_rank_start("from somewhere import target\nProcess(target=target)\n") is None


def _init_process(rank, size):
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=size)


def _main(rank, size):
    _init_process(rank, size)


def _helper(queue):
    queue.put(None)


class _Worker:
    def run(self, rank):
        _main(rank, 2)


def test_a_targets_code_says_whether_its_process_is_a_rank():
    assert starts_a_rank(_init_process) and starts_a_rank(_main) and starts_a_rank(_Worker().run)
    assert not starts_a_rank(_helper) and not starts_a_rank(print) and not starts_a_rank(None)


@pytest.mark.parametrize("rank_target", [True, False])
def test_a_rank_starting_ranks_with_process_under_torchrun_says_so(tmp_path, rank_target):
    """The mismatch is named as it happens: the tutorial's harness under torchrun otherwise
    hangs silently on torchrun's agent store."""
    target = "init_process" if rank_target else "helper"
    script = tmp_path / "harness.py"
    script.write_text(textwrap.dedent(f'''
        import multiprocessing
        import torch
        import torch.distributed as dist

        def init_process(rank, size):
            if size < 0:  # never: the child returns at once
                dist.init_process_group("gloo", rank=rank, world_size=size)

        def helper(rank, size):
            pass

        if __name__ == "__main__":
            p = multiprocessing.get_context("fork").Process(target={target}, args=(0, 2))
            p.start()
            p.join()
            print("exit code", p.exitcode)
    '''))
    with FakeHub() as hub:
        environment = worker_environment(hub.address, rank=1, world_size=2, TORCHELASTIC_USE_AGENT_STORE="True")
        result = run_worker([str(script)], environment, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "exit code 0"
        hub.wait_message("exit", rank=1)
        notices = hub.messages("notice", rank=1)
    if rank_target:
        [notice] = notices
        assert notice["key"] == "self_spawn" and notice["function"] == "multiprocessing.Process"
        assert notice["file"] == str(script) and notice["line"] == 15 and notice["function_name"] == "<module>"
    else:
        assert notices == []


BY_NAME_SPAWN = '''
import socket, sys, time
import torch
import torch.multiprocessing as mp
from torch.distributed import destroy_process_group, init_process_group

def main(index, port, steps):
    import os
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    init_process_group("gloo", rank=index, world_size=1)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(torch.ones(2, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item()!r}", flush=True)
        time.sleep(0.1)
    destroy_process_group()

if __name__ == "__main__":
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(main, args=(port, int(sys.argv[1])), nprocs=1)
'''


def test_a_spawned_rank_that_imported_init_process_group_by_name_is_measured_from_its_first_step(tmp_path):
    """The DDP tutorial series' shape: the child re-imports the script, binding the unwrapped
    ``init_process_group``; its training straddles the 3 s a rank without a known group waits.
    Each optimizer step is one step, from the first (before: steps lost, then two per step)."""
    steps = 40
    script = tmp_path / "by_name.py"
    script.write_text(BY_NAME_SPAWN)
    with FakeHub() as hub:
        environment = worker_environment(hub.address, rank=0, world_size=1, RANKWATCH_LAUNCH_MODE="self-spawn")
        result = run_worker([str(script), str(steps)], environment, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        hub.wait_message("exit", rank=0)
        stored = {item[1]: item[3] for item in hub.metric_items(rank=0) if item[2] == "loss"}
    printed = {int(line.split()[1]): float(line.split()[3]) for line in result.stdout.splitlines()
               if line.startswith("step ")}
    assert len(printed) == steps
    assert stored == printed
