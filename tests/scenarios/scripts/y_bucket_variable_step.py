"""Length bucketing with a custom ``BatchSampler`` subclass passed as ``batch_sampler=``:
sequences of 20-150 tokens are sorted into buckets of similar length and the batches are
shuffled (seeded); a collate pads each batch to its longest sequence. The step's cost
depends on the data: 0.4 ms per padded position (8-60 ms, about 34 ms on average), as
attention over longer sequences costs more. The data is in memory, in the training
process (num_workers=0; a fraction of a millisecond per batch); 30 steps.

Truth: compute-bound, however much the step time varies.
"""

import random
import time

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler


class Sentences(Dataset):
    def __init__(self, n):
        rng = random.Random(0)
        self.rows = [[rng.randrange(1, 1000) for _ in range(rng.randrange(20, 151))] for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class BucketBatchSampler(BatchSampler):
    def __init__(self, lengths, batch_size, seed=0):
        super().__init__(SequentialSampler(lengths), batch_size, drop_last=False)
        self.lengths, self.seed = lengths, seed

    def __iter__(self):
        order = sorted(range(len(self.lengths)), key=self.lengths.__getitem__)
        batches = [order[k:k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        random.Random(self.seed).shuffle(batches)
        yield from batches


def pad(rows):
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    for k, r in enumerate(rows):
        out[k, : len(r)] = torch.tensor(r)
    return out


if __name__ == "__main__":
    ds = Sentences(480)
    loader = DataLoader(ds, batch_sampler=BucketBatchSampler([len(r) for r in ds.rows], 16),
                        collate_fn=pad)
    emb = torch.nn.EmbeddingBag(1000, 16)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    positions = 0
    for tokens in loader:
        t0 = time.perf_counter()
        loss = emb(tokens).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.0004 * tokens.shape[1] - (time.perf_counter() - t0)))
        positions += tokens.numel()
    print(f"steps {len(loader)} padded positions {positions}")
