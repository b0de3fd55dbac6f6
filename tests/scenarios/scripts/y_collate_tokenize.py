"""Raw text in the dataset, tokenisation in the collate: ``collate_fn=functools.partial(
tokenize_and_pad, vocab=vocab, max_len=64)`` lower-cases, splits, maps words to ids
with a vocabulary dict, truncates and pads, and builds the mask, in 2 workers; the
work is made to cost 40 ms of CPU per batch of 32 (a sub-word merge loop would cost
that), about 20 ms per batch with two workers against a 4 ms step; 2 epochs of 15
batches. The dataset only indexes a list of strings.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on collate.
"""

import functools
import random
import time

import torch
from torch.utils.data import DataLoader, Dataset

WORDS = ["the", "a", "loader", "batch", "worker", "shard", "read", "decode", "stall", "gpu", "step",
         "epoch", "token", "pad", "mask"]


class Texts(Dataset):
    def __init__(self, n):
        rng = random.Random(0)
        self.texts = [" ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randrange(5, 90)))
                      for _ in range(n)]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return self.texts[i], i % 2


def tokenize_and_pad(samples, vocab, max_len, cost_s=0.040):
    end = time.thread_time() + cost_s
    ids = torch.zeros(len(samples), max_len, dtype=torch.long)
    for k, (text, _) in enumerate(samples):
        toks = [vocab.get(w, 1) for w in text.lower().split()][:max_len]
        ids[k, : len(toks)] = torch.tensor(toks)
    while time.thread_time() < end:  # the merge loop of a sub-word tokenizer
        pass
    return ids, (ids != 0).long(), torch.tensor([label for _, label in samples])


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    vocab = {w: k + 2 for k, w in enumerate(WORDS)}
    loader = DataLoader(Texts(480), batch_size=32, shuffle=True, num_workers=2,
                        collate_fn=functools.partial(tokenize_and_pad, vocab=vocab, max_len=64))
    emb = torch.nn.EmbeddingBag(len(vocab) + 2, 8)
    head = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)
    for epoch in range(2):
        n = 0
        for ids, _mask, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(head(emb(ids, per_sample_weights=None)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
