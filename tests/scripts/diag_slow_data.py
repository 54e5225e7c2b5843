"""Rank 1 is a straggler: its Dataset sleeps in __getitem__, so it waits for data every step.

With ``--diverge-at N`` rank 1 also nudges its weights after step N without telling
the others (a rank-dependent code path touching the parameters): the replicas
diverge, which the parameter fingerprints (hash_every) must catch.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--sleep", type=float, default=0.04, help="seconds per sample on the slow rank")
parser.add_argument("--diverge-at", type=int, default=None)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()


class SlowOnRankOne(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        if rank == 1:
            time.sleep(args.sleep)  # SLOW: reading from a slow disk, on this rank only
        return torch.randn(8), torch.randn(1)


torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(SlowOnRankOne(), batch_size=4, num_workers=0)
for step, (inputs, targets) in enumerate(loader):
    if step >= args.steps:
        break
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    if args.diverge_at is not None and step == args.diverge_at and rank == 1:
        with torch.no_grad():
            model.module.weight.add_(0.5)  # DIVERGE: only rank 1 changes its replica
dist.destroy_process_group()
