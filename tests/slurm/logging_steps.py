"""A rank that logs a step and a loss with ``rankwatch.log`` every 50 ms, forever, without torch.

The Slurm lifecycle tests need ranks that run until Slurm or Rankwatch ends them, not
training (one run there trains for real); sparing the workers the torch import keeps
those jobs cheap on a small machine. torchrun itself still rendezvouses them.
"""
import itertools
import os
import time

import rankwatch

rank = int(os.environ["RANK"])
for step in itertools.count():
    rankwatch.log(step=step, loss=1.0 / (step + 1))
    if step % 100 == 0:
        print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.05)
