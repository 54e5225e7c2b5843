"""The seed tutorial's "wrong usage": a barrier inside ``if rank == 0:``.

Both ranks all-reduce a few steps; then only rank 0 enters ``dist.barrier()``.
Rank 1 never does: it finishes its script and exits 0. Gloo then fails rank 0's
barrier with "Connection closed by peer", which reads like a crash of rank 1
though rank 1 ended normally: the cause is a collective only one rank called.
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.nn.Parameter(torch.ones(4))
optimizer = torch.optim.SGD([weights], lr=0.01)
for _step in range(5):
    optimizer.zero_grad()
    weights.pow(2).sum().backward()
    dist.all_reduce(weights.grad)
    optimizer.step()
if rank == 0:
    dist.barrier()  # BARRIER: only rank 0 waits here; rank 1 has nothing left to do
