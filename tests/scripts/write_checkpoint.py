"""Saves a "checkpoint" the way a training script does (plain open/write, the process's umask
decides its mode) and prints a secret it was given in its environment. No torch.

Usage (under torchrun): ``write_checkpoint.py FOLDER``
"""
import os
import sys

rank = int(os.environ["RANK"])
with open(os.path.join(sys.argv[1], f"checkpoint-rank{rank}.bin"), "wb") as checkpoint:
    checkpoint.write(b"\0" * 1024)
print(f"rank {rank} saved a checkpoint; token {os.environ.get('HF_TOKEN')}", flush=True)
