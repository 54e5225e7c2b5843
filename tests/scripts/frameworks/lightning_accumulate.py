"""PyTorch Lightning, unmodified style: DDP on CPU (gloo), ``accumulate_grad_batches=2``.

Launched by torchrun (Lightning reads RANK/WORLD_SIZE from it). A callback records
what Lightning itself reports for every training batch: the value ``training_step``
returned and logged with ``self.log`` (as the progress bar and loggers show it), and
the ``outputs["loss"]`` Lightning hands to ``on_train_batch_end`` (that value divided
by ``accumulate_grad_batches``), with ``trainer.global_step`` before the batch (the
optimizer steps completed, Rankwatch's step numbering). Rank R writes them to
``RECORD_DIR/rank-R.json``. A validation loop runs at every epoch's end (under
``inference_mode``, as Lightning does), to show its batches are not training data
wait.

Usage: lightning_accumulate.py RECORD_DIR
"""

import json
import os
import sys
import warnings

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 2
BATCH_SIZE = 4
STEPS_PER_EPOCH = 12
EPOCHS = 2
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))

warnings.filterwarnings("ignore")  # Lightning's advice on num_workers and loggers


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_index):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Recorder(pl.Callback):
    """Lightning's own per-batch values, by the optimizer steps completed before the batch."""

    def __init__(self):
        self.batches = []
        self._step_before = 0

    def on_train_batch_start(self, trainer, module, batch, batch_index):
        self._step_before = trainer.global_step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
        self.batches.append({
            "step": self._step_before,
            "logged": trainer.callback_metrics["train_loss"].item(),
            "output": outputs["loss"].item(),
            "size": len(batch[0]),
        })  # fmt: skip


def main():
    record_dir = sys.argv[1]
    torch.manual_seed(0)
    samples = WORLD_SIZE * STEPS_PER_EPOCH * ACCUMULATE * BATCH_SIZE
    inputs = torch.randn(samples, 8)
    train = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True) * 0.3 + torch.randn(samples, 1) * 0.1)
    validation = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    recorder = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu", devices=WORLD_SIZE, strategy="ddp", max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATE, callbacks=[recorder], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(
        Regression(),
        DataLoader(train, batch_size=BATCH_SIZE, shuffle=True),
        DataLoader(validation, batch_size=16),
    )
    with open(os.path.join(record_dir, f"rank-{trainer.global_rank}.json"), "w") as out:
        json.dump({"global_step": trainer.global_step, "batches": recorder.batches}, out)


if __name__ == "__main__":
    main()
