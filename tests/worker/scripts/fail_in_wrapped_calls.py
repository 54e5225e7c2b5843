"""Fails inside calls that Rankwatch wraps: a collective, ``backward``, or a spawned rank's function.

``fail_in_wrapped_calls.py collective|backward|thread|spawn``. Run plainly and under the
bootstrap, the printed traceback must be the same: Rankwatch's wrappers are not the user's code.
"""

import sys
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Refuses(torch.autograd.Function):
    @staticmethod
    def forward(context, value):
        return value * 2

    @staticmethod
    def backward(context, gradient):
        raise RuntimeError("no gradient here")


def join_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def sum_a_list():
    dist.all_reduce([1.0, 2.0])  # not a tensor: torch raises inside the collective


def train_step():
    loss = Refuses.apply(torch.ones(2, requires_grad=True)).sum()
    loss.backward()


def rank(index):
    join_group()
    sum_a_list()


if __name__ == "__main__":
    where = sys.argv[1]
    if where == "spawn":
        mp.spawn(rank, nprocs=1)
    elif where == "thread":
        join_group()
        worker = threading.Thread(target=sum_a_list, name="side")
        worker.start()
        worker.join()
    elif where == "collective":
        join_group()
        sum_a_list()
    else:
        train_step()
