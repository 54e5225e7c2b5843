"""The official DDP tutorial's way: the script starts its own ranks with torch.multiprocessing.spawn.

Usage: spawn_tutorial.py [--steps S] [--fail-rank R] [--sleep SECONDS] [--reverse-ranks] [--no-process-group]

Rank R raises after its second optimizer step. ``--reverse-ranks``: spawn index i joins the
process group as rank N-1-i (Rankwatch must go by the group's rank). ``--no-process-group``:
each process trains alone (Rankwatch goes by the spawn index). The main process picks a free
port for the ranks' rendezvous.
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def demo_basic(index, world_size, port, args):
    rank = world_size - 1 - index if args.reverse_ranks else index
    print(f"Running basic DDP example: spawn index {index} is rank {rank}.", flush=True)
    model = torch.nn.Linear(8, 1)
    if not args.no_process_group:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        if rank == args.fail_rank and step == 1:
            raise RuntimeError(f"rank {rank} gives up")
        time.sleep(args.sleep)
    if not args.no_process_group:
        dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--reverse-ranks", action="store_true")
    parser.add_argument("--no-process-group", action="store_true")
    arguments = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    mp.spawn(demo_basic, args=(2, free_port, arguments), nprocs=2, join=True)
