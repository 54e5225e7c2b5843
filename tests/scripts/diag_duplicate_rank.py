"""A manual-launch script (rank, world size and rendezvous on its command line), started by torchrun.

Meant for one process per rank, each started with its own ``--rank``; under torchrun
every process gets the same arguments, so two processes claim the same rank and the
second cannot host the store on the init method's port (EADDRINUSE).
"""
import argparse
import datetime

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--world_size", type=int, required=True)
parser.add_argument("--init_method", required=True)
args = parser.parse_args()
dist.init_process_group("gloo", init_method=args.init_method, rank=args.rank, world_size=args.world_size,
                        timeout=datetime.timedelta(seconds=30))
dist.barrier()
dist.destroy_process_group()
