"""Eight optimizer steps of a tiny model, with or without a process group of its own.

``--group``: first make a one-process gloo group (rank 0 of 1, on a TCP store of its
own), as a script that calls ``init_process_group`` would have one. Without it the
script trains alone, as every rank of a torchrun job does whose script makes no group.

Usage: group_steps.py [--group]
"""

import socket
import sys

import torch
import torch.distributed as dist

if "--group" in sys.argv[1:]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs = torch.randn(16, 4)
for _step in range(8):
    loss = model(inputs).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained", dist.is_initialized())
