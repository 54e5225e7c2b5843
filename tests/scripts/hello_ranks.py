"""Each rank says hello and checks an all_reduce; writes nothing else."""
import os

import torch
import torch.distributed as dist

dist.init_process_group(os.environ.get("RANKWATCH_BACKEND") or "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"hello from rank {rank} of {world}, sum {total.item():.0f}, omp {os.environ.get('OMP_NUM_THREADS')}")
dist.destroy_process_group()
