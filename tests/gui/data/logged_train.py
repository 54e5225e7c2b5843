"""A small DDP job (CPU, gloo) that reports its own curves with ``rankwatch.log``.

    rankwatch run --nproc-per-node 8 tests/gui/data/logged_train.py --steps 400

Every rank trains a tiny MLP on synthetic data through a DataLoader (so loss, step
time and data wait are measured without code), and logs the learning rate of a
cosine schedule and the gradient norm at each step: the monitor draws an ``lr`` and
a ``grad_norm`` chart with a curve per rank. The README's live-run screenshot is
taken from this job (``tests/gui/data/screenshots.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import rankwatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds of extra work per step")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    features = torch.randn(4096, 32)
    targets = features @ torch.randn(32, 1) + 0.1 * torch.randn(4096, 1)
    dataset = TensorDataset(features, targets)
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset, seed=1))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, args.steps) / args.steps)))
    step = 0
    epoch = 0
    while step < args.steps:
        loader.sampler.set_epoch(epoch)
        for batch, target in loader:
            loss = nn.functional.mse_loss(model(batch), target)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
            rankwatch.log(step=step, lr=schedule.get_last_lr()[0], grad_norm=float(grad_norm))
            schedule.step()
            time.sleep(args.pause * (1 + 0.1 * rank))  # rank 7 a little slower than rank 0
            step += 1
            if step >= args.steps:
                break
        epoch += 1
    if rank == 0:
        print(f"done: {step} steps on {dist.get_world_size()} ranks (pid {os.getpid()})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
