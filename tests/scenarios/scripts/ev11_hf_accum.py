"""An HF-Trainer-style loop: TrainingArguments, gradient accumulation, linear warmup
schedule, evaluation every N optimizer updates on a separate eval loader.

Truth by construction: each training sample waits 10 ms on "storage" (a sleep in
__getitem__), batch 8, HF's default dataloader_num_workers=0 -> 80 ms of blocked reads
per batch in the training process against a ~2 ms step (under 30 ms even on a crowded
host): data-bound, binding read, stall above 0.6. The eval loader is in memory.
"""
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 4
    num_train_epochs: int = 2
    learning_rate: float = 5e-3
    warmup_steps: int = 2
    eval_steps: int = 5
    logging_steps: int = 5
    dataloader_num_workers: int = 0
    max_grad_norm: float = 1.0


class RemoteTextDataset(Dataset):
    def __init__(self, n, latency):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.latency = latency

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.latency:
            time.sleep(self.latency)  # a network/object-store fetch
        return {"input_ids": self.x[i], "labels": self.y[i]}


def default_data_collator(features):
    return {k: torch.stack([f[k] for f in features]) for k in features[0]}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))

    def forward(self, input_ids, labels=None):
        logits = self.net(input_ids)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def get_linear_schedule_with_warmup(opt, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset, data_collator):
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.data_collator = data_collator
        self.global_step = 0
        self.evals = 0

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, collate_fn=self.data_collator,
                          num_workers=self.args.dataloader_num_workers, drop_last=True)

    def get_eval_dataloader(self):
        return DataLoader(self.eval_dataset, batch_size=self.args.per_device_eval_batch_size,
                          collate_fn=self.data_collator)

    def compute_loss(self, model, inputs):
        return model(**inputs)["loss"]

    def evaluate(self):
        self.model.eval()
        losses = []
        with torch.no_grad():
            for inputs in self.get_eval_dataloader():
                losses.append(self.compute_loss(self.model, inputs).item())
        self.model.train()
        self.evals += 1
        return {"eval_loss": sum(losses) / len(losses)}

    def train(self):
        args = self.args
        train_dl = self.get_train_dataloader()
        updates_per_epoch = len(train_dl) // args.gradient_accumulation_steps
        max_steps = updates_per_epoch * args.num_train_epochs
        opt = torch.optim.AdamW(self.model.parameters(), lr=args.learning_rate)
        sched = get_linear_schedule_with_warmup(opt, args.warmup_steps, max_steps)
        self.model.train()
        for epoch in range(args.num_train_epochs):
            batches = 0
            for step, inputs in enumerate(train_dl):
                loss = self.compute_loss(self.model, inputs) / args.gradient_accumulation_steps
                loss.backward()
                time.sleep(0.001)  # the rest of a small model's step
                batches += 1
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    nn.utils.clip_grad_norm_(self.model.parameters(), args.max_grad_norm)
                    opt.step()
                    sched.step()
                    opt.zero_grad()
                    self.global_step += 1
                    if self.global_step % args.eval_steps == 0:
                        self.evaluate()
            print(f"epoch {epoch}: {batches} batches", flush=True)
        print(f"updates: {self.global_step} evals: {self.evals}", flush=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a small model: two intra-op threads on a shared 2-core host
    # spin against each other and turn its ~2 ms step into hundreds of ms
    args = TrainingArguments()
    trainer = Trainer(Classifier(), args, RemoteTextDataset(320, 0.010),
                      RemoteTextDataset(40, 0.0), default_data_collator)
    trainer.train()
