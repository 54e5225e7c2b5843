"""Rank 1 raises ValueError right after joining; rank 0 waits in a barrier it never passes."""
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} joined", flush=True)
if rank == 1:
    raise ValueError("bad batch shape on rank 1")
dist.barrier()
