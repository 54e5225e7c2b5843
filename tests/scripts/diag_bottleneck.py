"""DDP-style training on gloo, 2 ranks, shaped to one bottleneck (the verdict must name it).

``--kind input``: every rank's Dataset sleeps in ``__getitem__`` (a slow disk), the model is
tiny: the steps wait for data. ``--kind comm``: a tiny model, then a large all-reduce of a
64 MiB buffer each step (manual gradient averaging done badly): the steps wait in
communication.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--kind", choices=("input", "comm"), required=True)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--sleep", type=float, default=0.006, help="seconds per sample (input)")
parser.add_argument("--floats", type=int, default=16 << 20, help="all-reduced per step (comm)")
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)


class Samples(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        if args.kind == "input":
            time.sleep(args.sleep)  # SLOW: every rank reads from a slow disk
        return torch.randn(8), torch.randn(1)


model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
payload = torch.ones(args.floats) if args.kind == "comm" else None
loader = DataLoader(Samples(), batch_size=8, num_workers=0)
for step, (inputs, targets) in enumerate(loader):
    if step >= args.steps:
        break
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    if payload is not None:
        dist.all_reduce(payload)  # COMM: far more bytes than the model computes with
    optimizer.step()
dist.destroy_process_group()
