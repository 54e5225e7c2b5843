"""The Hugging Face ``Trainer`` on a tiny randomly initialised GPT-2: ``gradient_accumulation_steps=2``.

Nothing is downloaded: the model is built from a ``GPT2Config`` and the data are
random token ids. Launched by torchrun, the Trainer runs DDP over gloo on the CPU,
logs every step (``logging_steps=1``, printed as ``{'loss': '...', ...}`` lines) and
evaluates every ``EVAL_EVERY`` steps (``Trainer.evaluate`` iterates its DataLoader
outside ``no_grad``). Recorded per rank, with the optimizer steps completed before the
step (Rankwatch's step numbering):

* ``training_step``: the sum of what ``Trainer.training_step`` returned in the step
  (its loss already divided for gradient accumulation, or normalised by the token
  count of the whole step), i.e. this rank's share of the logged loss;
* ``logged``: the ``loss`` the Trainer logs (``on_log``), the mean over ranks.

Rank R writes ``RECORD_DIR/rank-R.json``.

Usage: hf_trainer_accumulate.py RECORD_DIR
"""

import json
import os
import sys
import warnings

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

ACCUMULATE = 2
BATCH_SIZE = 4
STEPS = 12
EVAL_EVERY = 5
VOCABULARY = 64
LENGTH = 16

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCABULARY, (size, LENGTH), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class RecordingTrainer(Trainer):
    """Keeps what ``training_step`` returned, by the optimizer steps completed so far."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned = {}

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        step = self.state.global_step
        self.returned[step] = self.returned.get(step, 0.0) + loss.item()
        return loss


class LoggedLoss(TrainerCallback):
    def __init__(self):
        self.logged = {}
        self.evaluations = 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.logged[state.global_step - 1] = logs["loss"]  # logged after the step: completed - 1
        if logs and "eval_loss" in logs:
            self.evaluations += 1


def main():
    record_dir = sys.argv[1]
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCABULARY, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    arguments = TrainingArguments(
        output_dir=os.path.join(record_dir, "trainer"), use_cpu=True, max_steps=STEPS,
        per_device_train_batch_size=BATCH_SIZE, per_device_eval_batch_size=8,
        gradient_accumulation_steps=ACCUMULATE, learning_rate=1e-3, logging_steps=1,
        eval_strategy="steps", eval_steps=EVAL_EVERY, save_strategy="no", report_to="none",
        dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    callback = LoggedLoss()
    trainer = RecordingTrainer(
        model=model, args=arguments, callbacks=[callback],
        train_dataset=Tokens(world_size * STEPS * ACCUMULATE * BATCH_SIZE, seed=1),
        eval_dataset=Tokens(32, seed=2),
    )  # fmt: skip
    trainer.train()
    with open(os.path.join(record_dir, f"rank-{trainer.args.process_index}.json"), "w") as out:
        json.dump({
            "global_step": trainer.state.global_step, "training_step": trainer.returned,
            "logged": callback.logged, "evaluations": callback.evaluations,
        }, out)  # fmt: skip


if __name__ == "__main__":
    main()
