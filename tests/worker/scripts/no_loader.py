"""Trains on tensors made in the loop: no DataLoader, so data wait is not measured."""

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(5):
    x = torch.randn(16, 8)
    loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step} loss {loss.item():.6f}")
