"""A small DistributedDataParallel training script, in the spirit of the classic tutorials.

It trains a ConvNet on synthetic MNIST-sized data. Run it with torchrun:

    torchrun --standalone --nproc-per-node 2 ddp_train.py --epochs 3

or from Rankwatch (`rankwatch run --example`). It follows the usual recipe:
init_process_group (gloo on CPU, nccl on CUDA, or RANKWATCH_BACKEND when set),
set_device(local_rank) (ranks share the GPUs when there are more of them, which only
gloo allows), DDP with device_ids, DistributedSampler with set_epoch,
per-GPU batch size, loss printed on rank 0 only, checkpoint saved by rank 0 only
through model.module.state_dict(), destroy_process_group at the end.

It does not import Rankwatch: everything Rankwatch shows about it is measured
without changing a line.
"""

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SyntheticDigits(Dataset):
    """Random 1x28x28 images whose label is a fixed function of the pixels (so it is learnable)."""

    def __init__(self, size: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 1, 28, 28, generator=generator)
        projection = torch.randn(7 * 7, 10, generator=generator)
        coarse = F.avg_pool2d(self.images, 4).flatten(1)  # 7x7 blobs decide the class
        self.labels = (coarse @ projection).argmax(dim=1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per process (per GPU)")
    parser.add_argument("--samples", type=int, default=4096, help="size of the synthetic data set")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--log-every", type=int, default=10, help="print the loss every N steps (rank 0)")
    parser.add_argument("--checkpoint", default="checkpoint.pt", help="written by rank 0 at the end")
    return parser.parse_args()


def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    backend = os.environ.get("RANKWATCH_BACKEND") or ("nccl" if use_cuda else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    # One GPU per rank; more ranks than GPUs share them, which only gloo allows (NCCL refuses).
    gpu = local_rank % torch.cuda.device_count() if use_cuda else None
    if gpu is not None:
        torch.cuda.set_device(gpu)
    device = torch.device("cuda", gpu) if gpu is not None else torch.device("cpu")
    dist.init_process_group(backend=backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world_size} (local rank {local_rank}) on {socket.gethostname()}, device {device}")
    torch.manual_seed(1234)  # identical initial weights (DDP broadcasts them from rank 0 anyway)

    dataset = SyntheticDigits(args.samples)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, pin_memory=use_cuda)
    model = ConvNet().to(device)
    model = DDP(model, device_ids=[gpu] if gpu is not None else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if rank == 0:
        print(f"training on {world_size} process(es), backend {backend}, "
              f"{len(loader)} steps per epoch, batch size {args.batch_size} per process")
    step = 0
    started = time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        model.train()
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss: {loss.item():.4f}")
            step += 1
    if rank == 0:
        torch.save(model.module.state_dict(), args.checkpoint)
        print(f"done: {step} steps in {time.time() - started:.1f} s; checkpoint saved to {args.checkpoint}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
