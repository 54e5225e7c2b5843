"""Prints one line without flushing, then waits a long time (for the promptness test)."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"unflushed hello from rank {dist.get_rank()}")  # no flush=True, no newline games
time.sleep(120)
