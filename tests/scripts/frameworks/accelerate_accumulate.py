"""Hugging Face accelerate, as its gradient accumulation guide writes it: ``gradient_accumulation_steps=4``.

Launched by torchrun; accelerate wraps the model in DDP (gloo on CPU), shards the
DataLoader and, inside ``accelerator.accumulate(model)``, divides the loss by 4 in
``accelerator.backward`` and skips the gradient all-reduce (``no_sync``) and the
optimizer step on all but every 4th micro-batch. The loop records what accelerate
reports for each optimizer step the way its guide computes it: the mean of the
micro-batch losses of the step, with the optimizer steps completed before it
(Rankwatch's step numbering). After every epoch an evaluation pass iterates a
prepared DataLoader to its end with autograd on around the loop (``no_grad`` only
around the forward, as the guide's examples do); its batches must not count as
training data wait. Rank R writes ``RECORD_DIR/rank-R.json``.

Usage: accelerate_accumulate.py RECORD_DIR
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 4
BATCH_SIZE = 4
STEPS_PER_EPOCH = 12
EPOCHS = 2


def main():
    record_dir = sys.argv[1]
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATE, cpu=True)
    torch.manual_seed(0)
    samples = accelerator.num_processes * STEPS_PER_EPOCH * ACCUMULATE * BATCH_SIZE
    inputs = torch.randn(samples, 8)
    train = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True) * 0.3 + torch.randn(samples, 1) * 0.1)
    evaluation = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer, train_loader, evaluation_loader = accelerator.prepare(
        model, optimizer, DataLoader(train, batch_size=BATCH_SIZE, shuffle=True),
        DataLoader(evaluation, batch_size=8),
    )  # fmt: skip

    steps, micro_batch_losses = {}, []
    completed = 0
    for _epoch in range(EPOCHS):
        model.train()
        for x, y in train_loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                micro_batch_losses.append(loss.detach().float().item())
                if accelerator.sync_gradients:  # the optimizer really stepped
                    steps[completed] = sum(micro_batch_losses) / len(micro_batch_losses)
                    micro_batch_losses = []
                    completed += 1
        model.eval()
        total = 0.0
        for x, y in evaluation_loader:
            with torch.no_grad():
                total += F.mse_loss(model(x), y).item()
        accelerator.print(f"evaluation loss {total:.4f}")
    with open(os.path.join(record_dir, f"rank-{accelerator.process_index}.json"), "w") as out:
        json.dump({"steps": steps, "micro_batch_size": BATCH_SIZE, "accumulate": ACCUMULATE}, out)
    accelerator.end_training()


if __name__ == "__main__":
    main()
