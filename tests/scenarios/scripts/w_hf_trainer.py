"""A HuggingFace ``Trainer`` lookalike: ``TrainingArguments``-style dataclass,
``dataloader_num_workers=0`` (HF's default), a ``DataCollatorWithPadding`` lookalike
class whose ``__call__`` pads and builds masks, and spends 30 ms of CPU per batch
(dynamic masking of 16 sequences, as a masked-LM collator does), gradient
accumulation over 2 micro-batches; a 4 ms micro-step.

Truth: data-bound on collate (the dataset itself only slices lists).
"""

import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset


class TokenizedDataset(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.rows = [torch.randint(1, 500, (int(8 + k % 24),), generator=g).tolist() for k in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": i % 3}


class DataCollatorWithPadding:
    def __init__(self, pad_token_id=0, mask_cost_s=0.030):
        self.pad_token_id = pad_token_id
        self.mask_cost_s = mask_cost_s

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        for k, f in enumerate(features):
            ids[k, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        end = time.thread_time() + self.mask_cost_s  # random masking, word by word
        while time.thread_time() < end:
            pass
        return {"input_ids": ids, "attention_mask": (ids != self.pad_token_id).long(),
                "labels": torch.tensor([f["labels"] for f in features])}


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 16
    gradient_accumulation_steps: int = 2
    num_train_epochs: int = 1
    dataloader_num_workers: int = 0
    logging_steps: int = 10


class Trainer:
    def __init__(self, model, args, train_dataset, data_collator):
        self.model, self.args = model, args
        self.train_dataset, self.data_collator = train_dataset, data_collator
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, collate_fn=self.data_collator,
                          num_workers=self.args.dataloader_num_workers)

    def training_step(self, inputs):
        t0 = time.perf_counter()
        logits = self.model(inputs["input_ids"], inputs["attention_mask"])
        loss = torch.nn.functional.cross_entropy(logits, inputs["labels"])
        (loss / self.args.gradient_accumulation_steps).backward()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        return loss.detach()

    def train(self):
        updates = 0
        for _epoch in range(self.args.num_train_epochs):
            for step, inputs in enumerate(self.get_train_dataloader()):
                self.training_step(inputs)
                if (step + 1) % self.args.gradient_accumulation_steps == 0:
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    updates += 1
        print(f"optimizer updates: {updates}")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(500, 32)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, input_ids, attention_mask):
        h = (self.emb(input_ids) * attention_mask.unsqueeze(-1)).sum(1)
        return self.head(h / attention_mask.sum(1, keepdim=True))


if __name__ == "__main__":
    trainer = Trainer(Model(), TrainingArguments(), TokenizedDataset(640), DataCollatorWithPadding())
    trainer.train()
