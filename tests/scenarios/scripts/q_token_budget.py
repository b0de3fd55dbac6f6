"""A ``batch_sampler`` that buckets sequences by length and fills each batch up to a
token budget (fairseq's ``max_tokens=768``): 32 short sequences make one batch, 2 or 6
long ones another, so batch sizes vary from 2 to 32 within an epoch (24 batches, 10
sequences on average); ``collate_fn`` pads to the longest. Each sequence is fetched from
slow storage (3 ms, a sleep, whatever its length); 2 persistent workers; the step is 3 ms (a sleep
pads the real one); 2 epochs.

Truth: data-bound on read (a batch of 32 short sequences is 96 ms of storage, one of 2
long ones 6 ms; the mean batch, 30 ms in one worker, is far above the step). The run is the same batches per epoch
whatever diagnose does.
"""

import random
import time

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

LENGTHS = [8 + (i * 37) % 120 for i in range(240)]


class Sequences(Dataset):
    def __len__(self) -> int:
        return len(LENGTHS)

    def __getitem__(self, i):
        time.sleep(0.003)  # one record from the store
        return torch.full((LENGTHS[i],), i % 50, dtype=torch.long), i % 2


class TokenBudgetSampler(Sampler):
    def __init__(self, lengths, max_tokens: int, seed: int = 0) -> None:
        self.lengths, self.max_tokens, self.seed = lengths, max_tokens, seed
        self.epoch = 0

    def _batches(self):
        order = sorted(range(len(self.lengths)), key=lambda i: self.lengths[i])
        batches, cur, longest = [], [], 0
        for i in order:
            longest2 = max(longest, self.lengths[i])
            if cur and longest2 * (len(cur) + 1) > self.max_tokens:
                batches.append(cur)
                cur, longest2 = [], self.lengths[i]
            cur.append(i)
            longest = longest2
        if cur:
            batches.append(cur)
        random.Random(self.seed + self.epoch).shuffle(batches)
        return batches

    def __iter__(self):
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


def pad(batch):
    seqs, labels = zip(*batch, strict=True)
    return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor(labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sampler = TokenBudgetSampler(LENGTHS, max_tokens=768)
    loader = DataLoader(Sequences(), batch_sampler=sampler, num_workers=2, collate_fn=pad,
                        persistent_workers=True)
    emb, head = torch.nn.EmbeddingBag(50, 16), torch.nn.Linear(16, 2)
    opt = torch.optim.Adam([*emb.parameters(), *head.parameters()], lr=1e-3)
    for epoch in range(2):
        sampler.epoch = epoch
        sizes = []
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(head(emb(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            sizes.append(len(y))
        print(f"epoch {epoch}: {len(sizes)} batches, sizes {min(sizes)}-{max(sizes)}, {sum(sizes)} seqs")
