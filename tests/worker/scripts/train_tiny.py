"""A tiny CPU training script that exercises what the worker-side telemetry measures.

Run by the worker tests under ``python -m rankwatch._bootstrap`` (and by torchrun
with ``--ddp``). It prints what the telemetry should report, so tests compare
the two:

* ``probe {...}``: ``__name__``, ``sys.argv`` and the legacy ``--local_rank``;
* ``fork_loader [...]``: objects of a class defined here, pickled through a
  DataLoader with two forked workers;
* ``step N loss L``: N counts optimizer steps completed before this one, L is
  the loss as frameworks report it: the mean of the unscaled micro-batch losses
  (gradient accumulation with ``backward(loss / K)`` in phase 1; GradScaler with
  the unscaled loss in phase 2, one step of which is skipped for an infinite loss).

It also logs with ``rankwatch.log`` (Python numbers and a CPU tensor), lets a
helper thread die with an exception and, with ``--dump-stacks``, dumps its
own stacks with SIGUSR2.
"""

import argparse
import json
import os
import pickle
import signal
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import rankwatch


class SlowDataset(Dataset):
    """Deterministic samples that each take ``delay`` seconds to produce."""

    def __init__(self, size, delay):
        self.size = size
        self.delay = delay

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        time.sleep(self.delay)
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(8, generator=generator)
        return x, x.sum(dim=0, keepdim=True) * 0.5


class Sample:
    """Defined in the script: pickling needs ``__main__.Sample`` to resolve."""

    def __init__(self, value):
        self.value = value


class SampleDataset(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return Sample(index * 10)


def keep_list(batch):
    return batch


def fail_in_thread():
    raise RuntimeError("helper thread failed")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=None)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--amp-steps", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--dump-stacks", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        "probe " + json.dumps({"name": __name__, "argv": sys.argv, "local_rank": args.local_rank})
    )

    assert pickle.loads(pickle.dumps(Sample(3))).value == 3
    loader = DataLoader(
        SampleDataset(), batch_size=2, num_workers=2, collate_fn=keep_list,
        multiprocessing_context="fork",
    )  # fmt: skip
    print("fork_loader " + json.dumps(sorted(sample.value for batch in loader for sample in batch)))

    if args.ddp:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = iter(DataLoader(SlowDataset(1000, args.delay), batch_size=2))

    step = 0
    for _ in range(args.steps):
        total = 0.0
        for _ in range(args.accumulate):
            x, y = next(batches)
            loss = F.mse_loss(model(x), y)
            (loss / args.accumulate).backward()  # the accumulation idiom of every framework
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {total / args.accumulate:.6f}")
        rankwatch.log(step=step, lr=0.05, loss_copy=loss.detach(), ignored="text")
        step += 1

    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for index in range(args.amp_steps):
        x, y = next(batches)
        loss = F.mse_loss(model(x), y)
        if index == 1:
            loss = loss * float("inf")  # the scaler skips this optimizer step
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.6f}")
        step += 1

    helper = threading.Thread(target=fail_in_thread, name="helper")
    helper.start()
    helper.join()
    if args.dump_stacks:
        os.kill(os.getpid(), signal.SIGUSR2)
    rankwatch.log(final=1.5)
    if args.ddp:
        torch.distributed.destroy_process_group()
    print("done")


if __name__ == "__main__":
    main()
