"""Trains without an optimizer, then evaluates or waits with no step for SECONDS (default 10).

Like PyTorch's word language model example: the weights are updated by hand
(``p.data.add_(p.grad, alpha=-lr)``), no ``torch.optim`` optimizer exists, and after
the last step the script evaluates under ``no_grad`` for a while. Rank 0
evaluates (its thread computes); rank 1 waits in a sleep (a rank blocked on
something). Each rank prints ``step N loss X`` at every step.
"""
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
steps = 12
for step in range(steps):
    model.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    for parameter in model.parameters():
        parameter.data.add_(parameter.grad, alpha=-0.05)
    print(f"step {step} loss {loss.item()!r}", flush=True)
    time.sleep(0.05)
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
ends = time.time() + seconds
if rank == 0:
    with torch.no_grad():
        while time.time() < ends:  # EVALUATE
            model(torch.randn(64, 8))
else:
    time.sleep(seconds)  # WAIT
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
