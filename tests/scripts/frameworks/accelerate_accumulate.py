"""Hugging Face accelerate, as its gradient accumulation guide writes it: ``gradient_accumulation_steps=3``.

Launched by torchrun; accelerate wraps the model in DDP (gloo on CPU), shards the
DataLoader and, inside ``accelerator.accumulate(model)``, divides the loss by 3 in
``accelerator.backward`` and skips the gradient all-reduce (``no_sync``) and the
optimizer step on all but every 3rd micro-batch and the epoch's last one. An epoch
has 49 micro-batches per rank, a length 3 does not divide, as in accelerate's
``gradient_accumulation.py`` example on most data: 16 steps of 3 micro-batches, then
a step of 1 whose loss accelerate still divides by 3. Each micro-batch's loss is
printed as the script sees it (unscaled). The loop records, for each optimizer step
(keyed by the steps completed before it, Rankwatch's numbering), its micro-batch
losses and what accelerate reports the way its guide computes it: their mean.
After every epoch an evaluation pass iterates a prepared DataLoader to its end with
autograd on around the loop (``no_grad`` only around the forward, as the guide's
examples do); its batches must not count as training data wait. Rank R writes
``RECORD_DIR/rank-R.json``.

Usage: accelerate_accumulate.py RECORD_DIR
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 3
BATCH_SIZE = 4
MICRO_BATCHES_PER_EPOCH = 49  # per rank: 16 full groups of 3, then a group of 1
EPOCHS = 2


def main():
    record_dir = sys.argv[1]
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATE, cpu=True)
    torch.manual_seed(0)
    samples = accelerator.num_processes * MICRO_BATCHES_PER_EPOCH * BATCH_SIZE
    inputs = torch.randn(samples, 8)
    train = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True) * 0.3 + torch.randn(samples, 1) * 0.1)
    evaluation = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer, train_loader, evaluation_loader = accelerator.prepare(
        model, optimizer, DataLoader(train, batch_size=BATCH_SIZE, shuffle=True),
        DataLoader(evaluation, batch_size=8),
    )  # fmt: skip

    steps, micro_batches, micro_batch_losses = {}, {}, []
    completed = 0
    for epoch in range(EPOCHS):
        model.train()
        for index, (x, y) in enumerate(train_loader):
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)  # backpropagates loss / 3
                optimizer.step()
                optimizer.zero_grad()
                micro_batch_losses.append(loss.detach().float().item())
                print(f"epoch {epoch} micro-batch {index}: loss {micro_batch_losses[-1]:.6f}")
                if accelerator.sync_gradients:  # the optimizer really stepped
                    steps[completed] = sum(micro_batch_losses) / len(micro_batch_losses)
                    micro_batches[completed] = micro_batch_losses
                    micro_batch_losses = []
                    completed += 1
        model.eval()
        total = 0.0
        for x, y in evaluation_loader:
            with torch.no_grad():
                total += F.mse_loss(model(x), y).item()
        accelerator.print(f"evaluation loss {total:.4f}")
    with open(os.path.join(record_dir, f"rank-{accelerator.process_index}.json"), "w") as out:
        json.dump({"steps": steps, "micro_batches": micro_batches, "micro_batch_size": BATCH_SIZE,
                   "accumulate": ACCUMULATE}, out)
    accelerator.end_training()


if __name__ == "__main__":
    main()
