"""A ``__getitem__`` that reads rows from SQLite: the script writes a 20000-row table to a
temporary database, each worker opens its own connection on first use, and a sample is
four rows looked up by an unindexed column (four table scans, about 0.8 ms each of CPU
in SQLite's C code) and their JSON bodies parsed in Python: about 3.5 ms a sample, batch
8 (about 28 ms a batch), 1 worker, against a 3 ms step; 2 epochs of 12 batches.

Truth: data-bound on decode (CPU: the rows are in the page cache, the scans compute).
"""

import json
import os
import sqlite3
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

ROWS = 20000


class Rows(Dataset):
    def __init__(self, path):
        self.path, self.db = path, None

    def __len__(self):
        return 96

    def __getitem__(self, i):
        if self.db is None:  # one connection per worker process, never shared across fork
            self.db = sqlite3.connect(self.path)
        bodies = [self.db.execute("SELECT body FROM rows WHERE tag = ?", (4 * i + k,)).fetchone()[0]
                  for k in range(4)]
        x = torch.tensor([v for b in bodies for v in json.loads(b)[:2]], dtype=torch.float32)
        return x, x.mean()


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.db")
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, tag INTEGER, body TEXT)")
        db.executemany("INSERT INTO rows VALUES (?, ?, ?)",
                       ((i, i * 7919 % ROWS, json.dumps([i % 13] * 32)) for i in range(ROWS)))
        db.commit()
        db.close()
        loader = DataLoader(Rows(path), batch_size=8, shuffle=True, num_workers=1)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for epoch in range(2):
            n = 0
            for x, y in loader:
                t0 = time.perf_counter()
                loss = ((model(x).squeeze(1) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} batches")
