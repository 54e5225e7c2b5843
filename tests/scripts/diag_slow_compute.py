"""DDP on gloo where one rank does ``--factor`` times the work of the others (same data).

Every rank's step time is equal (the all-reduce waits for the slow rank); only the
time each rank computes apart from its wait in collectives tells the slow one.
``--slow-rank -1`` is the balanced job. ``--extra graph``: its forward applies the layers
``--factor`` times (forward and backward both grow); ``--extra before-backward``: after the
forward, before its backward, it does ``--factor - 1`` times the forward's work outside
autograd (a metric, a check run on one rank only): only its forward phase grows.
"""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--slow-rank", type=int, default=1)
parser.add_argument("--factor", type=int, default=3)
parser.add_argument("--width", type=int, default=384)
parser.add_argument("--extra", choices=("graph", "before-backward"), default="graph")
parser.add_argument("--batch", type=int, default=64, help="rows per step: compute grows with it, the all-reduce does not")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(args.width, args.width) for _ in range(3))
        self.passes = args.factor if rank == args.slow_rank and args.extra == "graph" else 1

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
inputs = torch.randn(args.batch, args.width)
extra_passes = args.factor - 1 if rank == args.slow_rank and args.extra == "before-backward" else 0
for _step in range(args.steps):
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
