"""Rank 1 raises ValueError right after joining; rank 0 waits in a barrier it never passes.

``--on-node N``: the rank of node N raises instead (torchrun's ``GROUP_RANK``). Two nodes on one
machine get their ranks from c10d's rendezvous, which orders them by process id, so "rank 1" is
not always the second node's.
"""
import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} joined", flush=True)
failing = rank == 1
if sys.argv[1:2] == ["--on-node"]:
    failing = os.environ.get("GROUP_RANK") == sys.argv[2]
if failing:
    raise ValueError(f"bad batch shape on rank {rank}")
dist.barrier()
