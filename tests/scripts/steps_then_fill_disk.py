"""Trains 400 steps; rank 0 fills a disk at step 50 (as a big checkpoint would) and every rank
trains on to its last step. Usage (under torchrun): ``steps_then_fill_disk.py FOLDER_TO_FILL``"""
import os
import sys
import time

import torch
import torch.distributed as dist

STEPS, FILL_AT = 400, 50
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, STEPS + 1):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.01)
    if step == FILL_AT and rank == 0:
        try:
            with open(os.path.join(sys.argv[1], "big-checkpoint.bin"), "wb") as filler:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        except OSError:
            pass
        time.sleep(1.0)  # the runner's next write meets the full disk
print(f"rank {rank} trained {STEPS} steps", flush=True)
dist.destroy_process_group()
