"""Rank 1 raises an exception in the middle of training (a helper function, a few steps in)."""
import time

import torch
import torch.distributed as dist


def check_batch(batch, step, rank):
    if rank == 1 and step == 3:
        raise ValueError(f"batch {step} on rank {rank} has {batch.shape[1]} features, expected 8")  # RAISE


dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(50):
    batch = torch.randn(4, 8 if not (rank == 1 and step == 3) else 7)
    check_batch(batch, step, rank)
    optimizer.zero_grad()
    model(batch).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.05)
dist.destroy_process_group()
