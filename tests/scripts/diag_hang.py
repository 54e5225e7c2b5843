"""A hang: rank 0 waits in a barrier that the other ranks never reach.

The ranks train a few steps of a tiny DDP model, then "save a checkpoint": rank 0
enters dist.barrier() before writing it, while the others skip the barrier and
wait for the checkpoint file. Nobody moves again (a classic deadlock). The tests
find the barrier's line by the marker comment.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
for _step in range(steps):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.05)
print(f"rank {rank} saving a checkpoint", flush=True)
checkpoint = os.path.join(os.environ.get("DIAG_DIR", "."), "checkpoint.done")
if rank == 0:
    dist.barrier()  # HANG: the other ranks never get here
    open(checkpoint, "w").close()
else:
    while not os.path.exists(checkpoint):  # WAIT: for rank 0's checkpoint
        time.sleep(0.2)
dist.destroy_process_group()
