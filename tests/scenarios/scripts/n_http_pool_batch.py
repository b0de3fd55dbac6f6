"""A batch-level dataset that fetches its samples over HTTP with a thread pool of its
own: ``DataLoader(ds, batch_size=None, sampler=BatchSampler(RandomSampler(ds), 16,
drop_last=True))`` hands ``__getitem__`` 16 indices, and the dataset issues the 16 GETs
(``urllib.request``) to a sample server on 127.0.0.1 through its
``ThreadPoolExecutor(max_workers=4)``, made on first use. The server (a thread of the
training process) answers each GET after 12 ms (a sleep, the store's latency), so a batch
is 4 rounds of 4 requests: about 48 ms against a 6 ms step. ``num_workers=0``; 2 epochs of
8 batches.

Truth: data-bound on read: the training process waits on sockets. The run is 16 steps
whatever diagnose does.
"""

import http.server
import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler


class SampleServer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        i = int(self.path.rsplit("/", 1)[1])
        time.sleep(0.012)  # the store looks the sample up
        body = json.dumps({"x": [float((i + k) % 7) for k in range(10)], "y": i % 2}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class RemoteBatches(Dataset):
    def __init__(self, base, n):
        self.base, self.n = base, n
        self.pool = None

    def __len__(self):
        return self.n

    def fetch(self, i):
        with urllib.request.urlopen(f"{self.base}/sample/{i}", timeout=30) as resp:
            return json.loads(resp.read())

    def __getitem__(self, indices):
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=4)
        recs = list(self.pool.map(self.fetch, indices))
        return (torch.tensor([r["x"] for r in recs]), torch.tensor([r["y"] for r in recs]))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SampleServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ds = RemoteBatches(f"http://127.0.0.1:{server.server_address[1]}", 128)
    loader = DataLoader(ds, batch_size=None,
                        sampler=BatchSampler(RandomSampler(ds), 16, drop_last=True))
    net = torch.nn.Linear(10, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
    server.shutdown()
