"""PyTorch's "DDP tutorial series" ``multigpu.py`` (pytorch/examples, distributed/ddp-tutorial-series), for CPU.

As the original: ``from torch.distributed import init_process_group`` at module level (the
name is bound before any wrapper of ``torch.distributed.init_process_group`` could exist in
a spawned child, which re-imports this script), ``mp.spawn(main, nprocs=world_size)``, a
``Trainer`` whose ``_run_batch`` does ``zero_grad / loss.backward() / optimizer.step()``, a
``DistributedSampler``. Changes for CPU: gloo instead of nccl, no ``set_device``, no
``device_ids``, the port picked free. ``--losses DIR`` writes each rank's step losses to
``DIR/rank-N.txt`` (one per line) so a test compares them with what Rankwatch stored.

Usage: ddp_series_multigpu.py TOTAL_EPOCHS SAVE_EVERY [--batch_size B] [--world_size N] [--losses DIR]
"""
import os
import socket

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group(backend="gloo", rank=rank, world_size=world_size)


class Trainer:
    def __init__(self, model, train_data, optimizer, gpu_id, save_every, losses):
        self.gpu_id = gpu_id
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.losses = losses

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        if self.losses is not None:
            self.losses.write(f"{loss.item()!r}\n")

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}", flush=True)
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def load_train_objs():
    train_set = MyTrainDataset(2048)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=False, shuffle=False,
                      sampler=DistributedSampler(dataset))


def main(rank, world_size, save_every, total_epochs, batch_size, port, losses_dir):
    ddp_setup(rank, world_size, port)
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    losses = open(os.path.join(losses_dir, f"rank-{rank}.txt"), "w") if losses_dir else None  # noqa: SIM115
    trainer = Trainer(model, train_data, optimizer, rank, save_every, losses)
    trainer.train(total_epochs)
    if losses is not None:
        losses.close()
    destroy_process_group()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)")
    parser.add_argument("--world_size", default=2, type=int)
    parser.add_argument("--losses", default=None)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    world_size = args.world_size
    mp.spawn(main, args=(world_size, args.save_every, args.total_epochs, args.batch_size, free_port, args.losses),
             nprocs=world_size)
