"""Each rank says hello (with its arguments and a few settings) and checks an all_reduce."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group(os.environ.get("RANKWATCH_BACKEND") or "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"hello from rank {rank} of {world}, sum {total.item():.0f}, omp {os.environ.get('OMP_NUM_THREADS')}, "
      f"greeting {os.environ.get('GREETING')}, args {sys.argv[1:]}, cwd {os.getcwd()}")
dist.destroy_process_group()
