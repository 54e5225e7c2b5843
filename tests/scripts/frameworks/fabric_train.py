"""Lightning Fabric, as its guide writes a training loop: ``Fabric()``, ``setup``, ``fabric.backward``.

``Fabric()`` takes its settings from the environment ``fabric run`` sets
(``LT_ACCELERATOR``, ``LT_DEVICES``, ``LT_STRATEGY``, ``LT_CLI_USED``), else picks
them itself: on a CPU machine one device and ``SingleDeviceStrategy``, so under
torchrun every process trains a whole copy on its own, with no process group. Given
``LT_CLI_USED=1 LT_ACCELERATOR=cpu LT_DEVICES=2 LT_STRATEGY=ddp`` it joins torchrun's
processes in one DDP job (gloo) and its data loader gives each rank its share.

With ``--launch`` the script calls ``fabric.launch()`` after ``Fabric()``, as
Fabric's README does (under torchrun ``launch()`` starts no process; with
``LT_CLI_USED=1`` Fabric refuses it).

Rank R (torchrun's RANK) writes ``RECORD_DIR/rank-R.json``: Fabric's own view
(world size, global rank, strategy, whether a process group exists) and the loss of
every optimizer step, the value the script passed to ``fabric.backward``.

Usage: fabric_train.py RECORD_DIR [--launch]
"""

import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 8
SAMPLES = 256
EPOCHS = 2

warnings.filterwarnings("ignore")  # Fabric's advice on num_workers


def main():
    record_dir = sys.argv[1]
    fabric = Fabric()
    if "--launch" in sys.argv[2:]:
        fabric.launch()
    fabric.seed_everything(0)
    inputs = torch.randn(SAMPLES, 8)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True) * 0.3 + torch.randn(SAMPLES, 1) * 0.1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True))

    losses = {}
    for epoch in range(EPOCHS):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            losses[len(losses)] = loss.item()
        fabric.print(f"epoch {epoch}: loss {loss.item():.4f}")
    record = {
        "world_size": fabric.world_size, "global_rank": fabric.global_rank,
        "strategy": type(fabric.strategy).__name__,
        "process_group": torch.distributed.is_available() and torch.distributed.is_initialized(),
        "steps": losses,
    }  # fmt: skip
    with open(os.path.join(record_dir, f"rank-{os.environ.get('RANK', '0')}.json"), "w") as out:
        json.dump(record, out)


if __name__ == "__main__":
    main()
