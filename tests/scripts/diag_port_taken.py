"""The rendezvous port is taken: the script's own TCP rendezvous (DIAG_PORT) is already in use.

Written the manual-launch way (tcp://host:port init method), so rank 0 must host the
store on that port and fails with EADDRINUSE; rank 1 waits to connect until torchrun
stops it.
"""
import datetime
import os

import torch.distributed as dist

dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{os.environ['DIAG_PORT']}",
    rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
    timeout=datetime.timedelta(seconds=30))
dist.barrier()
dist.destroy_process_group()
