"""DDP training that logs its own curves with rankwatch.log (lr, grad_norm, a tiny value).

Usage: logged_metrics.py [--steps N] [--sleep SECONDS]; prints "N steps per epoch" once
and "step S loss L" every 10 steps. A 1e-9 scale value checks that small numbers keep
their digits.
"""
import argparse
import time

import torch
import torch.distributed as dist

import rankwatch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
if rank == 0:
    print(f"{args.steps // 2} steps per epoch", flush=True)
for step in range(args.steps):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    rankwatch.log(step=step, lr=scheduler.get_last_lr()[0], grad_norm=float(norm), tiny=1e-9 * (rank + 1))
    scheduler.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    if args.sleep:
        time.sleep(args.sleep)
dist.destroy_process_group()
