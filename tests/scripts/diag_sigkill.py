"""Rank 1 is killed with SIGKILL a few steps in, as the kernel's OOM killer would do."""
import os
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(50):
    if rank == 1 and step == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    optimizer.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.05)
dist.destroy_process_group()
