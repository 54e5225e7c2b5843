"""A script that starts its own processes (the PyTorch DDP tutorial's way), run under torchrun by mistake.

Each torchrun rank calls mp.spawn; the children set their own MASTER_PORT and wait
in init_process_group for a store that torchrun's TORCHELASTIC_USE_AGENT_STORE=True
(inherited) tells them to expect: a hang.
"""
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("DIAG_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)  # SPAWN
