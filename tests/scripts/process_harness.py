"""PyTorch's "Writing Distributed Applications" tutorial harness: ranks started with ``mp.Process``.

As the tutorial: ``init_process(rank, size, fn)`` sets ``MASTER_ADDR``/``MASTER_PORT`` by hand
and calls ``dist.init_process_group(backend, rank=rank, world_size=size)``; the main process
starts one ``Process(target=init_process, args=(rank, size, run))`` per rank and joins them.
``run`` is the tutorial's synchronous SGD (its ``average_gradients`` all-reduces each
gradient by hand, then ``optimizer.step()``), for ``--steps`` steps. The port is picked free
(the tutorial hard-codes 29500). ``--losses DIR`` writes each rank's losses to
``DIR/rank-N.txt``; ``--fork`` keeps multiprocessing's default start method.

Usage: process_harness.py [--steps S] [--losses DIR] [--fork]
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing import Process


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run(rank, size, steps, losses_dir):
    torch.manual_seed(1234 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    losses = open(os.path.join(losses_dir, f"rank-{rank}.txt"), "w") if losses_dir else None  # noqa: SIM115
    for _step in range(steps):
        data, target = torch.randn(8, 10), torch.randn(8, 1)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        average_gradients(model)
        optimizer.step()
        if losses is not None:
            losses.write(f"{loss.item()!r}\n")
    print(f"Rank {dist.get_rank()} done after {steps} steps", flush=True)
    if losses is not None:
        losses.close()


def init_process(rank, size, fn, port, steps, losses_dir, backend="gloo"):
    """ Initialize the distributed environment. """
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size, steps, losses_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--losses", default=None)
    parser.add_argument("--fork", action="store_true")
    arguments = parser.parse_args()
    world_size = 2
    processes = []
    if not arguments.fork:
        mp.set_start_method("spawn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    for rank in range(world_size):
        p = Process(target=init_process, args=(rank, world_size, run, free_port, arguments.steps, arguments.losses))
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
    sys.exit(max(p.exitcode for p in processes))
