"""An Accelerate-style wrapper written out by hand, as ``accelerate`` structures it:
``model, opt, loader = accelerator.prepare(model, opt, loader)`` returns the loader as a
``DataLoaderShard`` (a DataLoader subclass built from the original's dataset and
settings) whose ``__iter__`` runs ``super().__iter__()`` one batch ahead (to know which
batch is the last, for ``end_of_dataloader``) and yields each batch moved to the device
by a recursive ``send_to_device``; the loop uses ``with accelerator.accumulate(model):``
(2 micro-batches an update) and ``accelerator.backward(loss)``. Samples are dicts whose
features are decoded in Python (about 4 ms of CPU a sample, a measured spin); batch 8 in
2 workers on 2 cores (32 ms of CPU a batch, about 16 ms with two) against a 3 ms step;
2 epochs of 12 batches.

Truth: data-bound on decode. The run is 24 micro-batches and 12 updates whatever
diagnose does.
"""

import contextlib
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        end = time.thread_time() + 0.004  # parsing a compressed feature record
        acc = i
        while time.thread_time() < end:
            acc = (acc * 17 + 3) % 65521
        return {"x": torch.full((10,), float(acc % 5)), "label": torch.tensor(i % 2)}


def send_to_device(batch, device):
    if isinstance(batch, dict):
        return type(batch)({k: send_to_device(v, device) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return type(batch)(send_to_device(v, device) for v in batch)
    return batch.to(device, non_blocking=True) if hasattr(batch, "to") else batch


class DataLoaderShard(DataLoader):
    def __init__(self, dataset, device=None, **kwargs):
        super().__init__(dataset, **kwargs)
        self.device = device
        self.end_of_dataloader = False

    def __iter__(self):
        self.end_of_dataloader = False
        it = super().__iter__()
        try:
            current = next(it)
        except StopIteration:
            return
        while True:
            try:
                nxt = next(it)
            except StopIteration:
                self.end_of_dataloader = True
                yield send_to_device(current, self.device)
                return
            yield send_to_device(current, self.device)
            current = nxt


class Accelerator:
    def __init__(self, gradient_accumulation_steps=1):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.accum = gradient_accumulation_steps
        self.step = 0
        self.sync_gradients = True
        self._loaders = []

    def prepare(self, *objs):
        out = []
        for obj in objs:
            if isinstance(obj, DataLoader):
                obj = DataLoaderShard(obj.dataset, device=self.device, batch_size=obj.batch_size,
                                      shuffle=False, num_workers=obj.num_workers,
                                      collate_fn=obj.collate_fn, drop_last=obj.drop_last)
                self._loaders.append(obj)
            elif isinstance(obj, torch.nn.Module):
                obj = obj.to(self.device)
            out.append(obj)
        return tuple(out)

    @contextlib.contextmanager
    def accumulate(self, model):
        self.step += 1
        end = any(dl.end_of_dataloader for dl in self._loaders)
        self.sync_gradients = self.step % self.accum == 0 or end
        yield

    def backward(self, loss):
        (loss / self.accum).backward()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(10, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Features(), batch_size=8, num_workers=2)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    micro = updates = 0
    for _epoch in range(2):
        for batch in loader:
            with accelerator.accumulate(model):
                t0 = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["label"])
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    opt.step()
                    opt.zero_grad()
                    updates += 1
                time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            micro += 1
    print(f"micro-batches {micro} updates {updates}")
