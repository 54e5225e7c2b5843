"""DDP on gloo where one rank does ``--factor`` times the work of the others (same data).

Every rank's step time is equal (the all-reduce waits for the slow rank); only the
time each rank computes apart from its wait in collectives tells the slow one.
``--slow-rank -1`` is the balanced job. ``--extra graph``: its forward applies the layers
``--factor`` times (forward and backward both grow); ``--extra before-backward``: after the
forward, before its backward, it does ``--factor - 1`` times the forward's work outside
autograd (a metric, a check run on one rank only): only its forward phase grows;
``--extra rows``: its batch has ``--factor`` times the rows (``--factor 1.3``: 30 % more compute
in forward and backward, the same all-reduce). ``--data-work N``: every rank's batches come from a
DataLoader (no workers) whose samples each cost a few N x N matrix products on the training
thread, the same on every rank: a data phase that a busy machine stretches on one rank, then
another (the noise a straggler must beat).
"""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--slow-rank", type=int, default=1)
parser.add_argument("--factor", type=float, default=3)
parser.add_argument("--width", type=int, default=384)
parser.add_argument("--extra", choices=("graph", "before-backward", "rows"), default="graph")
parser.add_argument("--batch", type=int, default=64, help="rows per step: compute grows with it, the all-reduce does not")
parser.add_argument("--data-work", type=int, default=0, help="N: each sample costs N x N matrix products (0: no DataLoader)")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(args.width, args.width) for _ in range(3))
        self.passes = round(args.factor) if rank == args.slow_rank and args.extra == "graph" else 1

    def forward(self, inputs):
        outputs = 0
        for _ in range(self.passes):  # SLOW: the same layers applied again: more compute, same result shape
            hidden = inputs
            for layer in self.layers:
                hidden = torch.relu(layer(hidden))
            outputs = outputs + hidden
        return outputs / self.passes


model = torch.nn.parallel.DistributedDataParallel(Stack())
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
rows = round(args.batch * args.factor) if rank == args.slow_rank and args.extra == "rows" else args.batch
inputs = torch.randn(rows, args.width)  # SLOW: more rows on the slow rank with --extra rows
extra_passes = round(args.factor) - 1 if rank == args.slow_rank and args.extra == "before-backward" else 0


class Samples(torch.utils.data.Dataset):
    """Samples made on the training thread with some CPU work each (``--data-work``)."""

    def __len__(self):
        return args.steps * args.batch

    def __getitem__(self, index):
        matrix = torch.full((args.data_work, args.data_work), 1.0 / args.data_work)
        for _ in range(3):
            matrix = torch.tanh(matrix @ matrix)
        return matrix.sum()


batches = iter(torch.utils.data.DataLoader(Samples(), batch_size=8)) if args.data_work else None
for _step in range(args.steps):
    if batches is not None:
        next(batches)  # the DataLoader's work: the batch itself is not used (the rows stay the same)
    optimizer.zero_grad()
    loss = model(inputs).pow(2).mean()
    with torch.no_grad():
        for _ in range(extra_passes):  # SLOW: more compute on this rank, between its forward and its backward
            hidden = inputs
            for layer in model.module.layers:
                hidden = torch.relu(layer(hidden))
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
