"""Four ranks all-reduce every step; rank 2 skips the all_reduce of one step (a rank-dependent branch).

Gloo pairs each rank's collectives by their order: from then on rank 2 is one
collective behind, and after the loop it waits in the barrier while the others
still wait in their last all_reduce (collective #N on every rank, but not the
same op). Nobody moves again; the Flight Recorder shows it.
"""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.nn.Parameter(torch.ones(4))
optimizer = torch.optim.SGD([weights], lr=0.01)
for step in range(10):
    optimizer.zero_grad()
    weights.pow(2).sum().backward()
    if rank == 2 and step == 5:
        pass  # SKIP: this rank thinks its gradients need no averaging this step
    else:
        dist.all_reduce(weights.grad)
    optimizer.step()
    time.sleep(0.05)
dist.barrier()  # rank 2's #N: a barrier against the others' last all_reduce
dist.destroy_process_group()
