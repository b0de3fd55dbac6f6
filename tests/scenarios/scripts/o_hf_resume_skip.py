"""An HF-Trainer-style loop resumed from a checkpoint taken mid-epoch, as ``Trainer.train(
resume_from_checkpoint=...)`` does it: the ``Trainer`` builds its train DataLoader lazily
(``get_train_dataloader()`` on first use), and for the resumed epoch wraps its batch
sampler in a ``SkipBatchSampler`` so the batches already trained on are never fetched
(accelerate's ``skip_first_batches``); gradient accumulation 2, a clip, a linear schedule,
callbacks (``on_step_end`` sets ``control.should_evaluate`` every 4 updates and logs) and
a no_grad ``evaluate()`` over an in-memory eval loader. The train dataset reads each
example from slow storage (6 ms, a sleep); batch 8 in 2 workers (about 24 ms a
micro-batch) against a 2 ms micro-step; 2 epochs of 20 micro-batches, the first resumed
after 6 of them.

Truth: data-bound on read. The run ends at global step 20 (3 restored, 7 in the resumed
epoch, 10 in the next) with 5 evaluations whatever diagnose does.
"""

import time
from dataclasses import dataclass, field

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler


@dataclass
class TrainerState:
    global_step: int = 0
    epoch: int = 0
    log_history: list = field(default_factory=list)


@dataclass
class TrainerControl:
    should_evaluate: bool = False
    should_log: bool = False


class TrainerCallback:
    def on_step_end(self, args, state, control):
        pass


class EvalEvery(TrainerCallback):
    def __init__(self, every):
        self.every = every

    def on_step_end(self, args, state, control):
        control.should_evaluate = state.global_step % self.every == 0
        control.should_log = control.should_evaluate


class SkipBatchSampler(Sampler):
    def __init__(self, batch_sampler, skip_batches):
        self.batch_sampler, self.skip_batches = batch_sampler, skip_batches

    def __iter__(self):
        for index, samples in enumerate(self.batch_sampler):
            if index >= self.skip_batches:
                yield samples

    def __len__(self):
        return len(self.batch_sampler) - self.skip_batches


class Rows(Dataset):
    def __init__(self, n, slow):
        self.n, self.slow = n, slow

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow:
            time.sleep(0.006)  # a row fetched from the dataset's remote store
        return {"input_ids": torch.tensor([(i * 3 + k) % 50 for k in range(12)]),
                "labels": torch.tensor(i % 2)}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(50, 16)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, input_ids, labels):
        return {"loss": torch.nn.functional.cross_entropy(self.head(self.emb(input_ids)), labels)}


@dataclass
class Args:
    train_batch_size: int = 8
    gradient_accumulation_steps: int = 2
    num_train_epochs: int = 2
    max_grad_norm: float = 1.0
    dataloader_num_workers: int = 2


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset, callbacks):
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.callbacks = callbacks
        self.state, self.control = TrainerState(), TrainerControl()
        self._train_dataloader = None
        self.evaluations = 0

    def get_train_dataloader(self, skip_batches=0):
        if self._train_dataloader is None or skip_batches:
            gen = torch.Generator().manual_seed(42)
            batches = BatchSampler(RandomSampler(self.train_dataset, generator=gen),
                                   self.args.train_batch_size, drop_last=False)
            if skip_batches:
                batches = SkipBatchSampler(batches, skip_batches)
            dl = DataLoader(self.train_dataset, batch_sampler=batches,
                            num_workers=self.args.dataloader_num_workers)
            if skip_batches:
                return dl
            self._train_dataloader = dl
        return self._train_dataloader

    def evaluate(self):
        dl = DataLoader(self.eval_dataset, batch_size=16)
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for inputs in dl:
                total += float(self.model(**inputs)["loss"])
        self.model.train()
        self.evaluations += 1
        return total

    def train(self, resume_micro_step):
        args = self.args
        opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        updates = args.num_train_epochs * 20 // args.gradient_accumulation_steps
        self.state.global_step = resume_micro_step // args.gradient_accumulation_steps
        done = self.state.global_step
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - (s + done) / updates)
        first = True
        for epoch in range(args.num_train_epochs):
            self.state.epoch = epoch
            skip = resume_micro_step if first else 0
            first = False
            for step, inputs in enumerate(self.get_train_dataloader(skip)):
                t0 = time.perf_counter()
                loss = self.model(**inputs)["loss"] / args.gradient_accumulation_steps
                loss.backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.max_grad_norm)
                    opt.step()
                    sched.step()
                    opt.zero_grad()
                    self.state.global_step += 1
                    for cb in self.callbacks:
                        cb.on_step_end(args, self.state, self.control)
                    if self.control.should_evaluate:
                        self.state.log_history.append(self.evaluate())
                time.sleep(max(0.0, 0.002 - (time.perf_counter() - t0)))
        return self.state.global_step


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    trainer = Trainer(Model(), Args(), Rows(160, slow=True), Rows(48, slow=False), [EvalEvery(4)])
    steps = trainer.train(resume_micro_step=6)
    print(f"resumed at update 3, global_step {steps}, evaluations {trainer.evaluations}")
