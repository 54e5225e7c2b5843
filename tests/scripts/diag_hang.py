"""A hang: rank 0 waits in a barrier that the other ranks never reach.

The ranks train a few steps of a tiny DDP model, then "save a checkpoint": rank 0
enters dist.barrier() before writing it, while the others skip the barrier and
wait in a helper, sleeping in a loop until the checkpoint file appears. Nobody
moves again (a classic deadlock): the ranks in the helper are the culprits, not
in any collective. The tests find the lines by their marker comments.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def wait_for_checkpoint(path):
    while not os.path.exists(path):
        time.sleep(0.2)  # WAIT: for rank 0's checkpoint


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
    wait_for_checkpoint(checkpoint)  # SKIP: the barrier, straight to waiting
dist.destroy_process_group()
