"""An HF-Trainer-like loop as fine-tuning repos write it: ``TrainingArguments``-style
settings (gradient_accumulation_steps=4, eval_steps=5, logging_steps=5), a ``Trainer``
class whose ``train()`` divides the loss by the accumulation steps, clips, steps the
optimizer and a linear warm-up schedule every 4 micro-batches, and runs ``evaluate()``
(no_grad, an in-memory eval loader of 4 batches) every 5 optimizer updates. The train
dataset returns dicts of token ids and reads each example from slow storage (4 ms, a
sleep); batch 8 in 2 workers (about 16 ms a micro-batch) against a 2 ms micro-step; one
epoch of 40 micro-batches (``num_train_epochs=1``, as most fine-tuning runs).

Truth: data-bound on read. The run is 10 optimizer updates and 2 evaluations whatever
diagnose does.
"""

import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 4
    num_train_epochs: int = 1
    eval_steps: int = 5
    logging_steps: int = 5
    learning_rate: float = 5e-4
    max_grad_norm: float = 1.0
    dataloader_num_workers: int = 2


class Examples(Dataset):
    def __init__(self, n: int, slow: bool) -> None:
        self.n, self.slow = n, slow

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if self.slow:
            time.sleep(0.004)  # a row from the remote dataset
        ids = torch.tensor([(i * 7 + k) % 100 for k in range(16)])
        return {"input_ids": ids, "labels": torch.tensor(i % 2)}


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(100, 32)
        self.head = torch.nn.Linear(32, 2)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.emb(input_ids))
        loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset) -> None:
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.global_step = 0
        self.log_history: list[dict] = []

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, num_workers=self.args.dataloader_num_workers, drop_last=True)

    def get_eval_dataloader(self):
        return DataLoader(self.eval_dataset, batch_size=8)

    def evaluate(self) -> dict:
        self.model.eval()
        losses = []
        with torch.no_grad():
            for inputs in self.get_eval_dataloader():
                losses.append(self.model(**inputs)["loss"].item())
        self.model.train()
        return {"eval_loss": sum(losses) / len(losses), "eval_batches": len(losses)}

    def train(self) -> None:
        args = self.args
        loader = self.get_train_dataloader()
        updates = len(loader) // args.gradient_accumulation_steps * args.num_train_epochs
        opt = torch.optim.AdamW(self.model.parameters(), lr=args.learning_rate)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3)
                                                  * max(0.0, 1 - s / updates))
        self.model.train()
        for _epoch in range(args.num_train_epochs):
            for step, inputs in enumerate(loader):
                t0 = time.perf_counter()
                loss = self.model(**inputs)["loss"] / args.gradient_accumulation_steps
                loss.backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.max_grad_norm)
                    opt.step()
                    sched.step()
                    opt.zero_grad()
                    self.global_step += 1
                    if self.global_step % args.eval_steps == 0:
                        self.log_history.append(self.evaluate())
                time.sleep(max(0.0, 0.002 - (time.perf_counter() - t0)))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    trainer = Trainer(Model(), TrainingArguments(), Examples(320, slow=True), Examples(32, slow=False))
    trainer.train()
    evals = [h["eval_batches"] for h in trainer.log_history]
    print(f"global_step {trainer.global_step} evaluations {len(evals)} eval batches {evals}")
