"""An ``IterableDataset`` streaming records from a local HTTP server (127.0.0.1, a thread
of the training process standing in for an object store): each of 8 shards is one GET
whose body arrives a line at a time (a JSON record every 4 ms, written and flushed by the
server as it "reads" it), and each DataLoader worker takes its own shards
(``get_worker_info()``: worker k of 2 streams shards k, k+2, k+4, k+6) and parses lines as
they arrive. 2 workers; batch 8 (32 ms of waiting a batch per worker, about 16 ms with
two) against a 3 ms step; 2 epochs of 40 batches (the workers start again each epoch,
about 0.2 s on a busy host, against 0.6 s of streaming).

Truth: data-bound on read: the workers wait on the socket. The run is 80 steps whatever
diagnose does.
"""

import http.server
import json
import threading
import time
import urllib.request

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

RECORDS_PER_SHARD = 40


class Store(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def do_GET(self):
        shard = int(self.path.rsplit("-", 1)[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.end_headers()
        for k in range(RECORDS_PER_SHARD):
            time.sleep(0.004)  # the store's read of the next record
            rec = {"x": [float((shard * 7 + k + j) % 9) for j in range(8)], "y": (shard + k) % 3}
            self.wfile.write(json.dumps(rec).encode() + b"\n")
            self.wfile.flush()

    def log_message(self, *args):
        pass


class Stream(IterableDataset):
    def __init__(self, base, shards):
        self.base, self.shards = base, shards

    def __iter__(self):
        info = get_worker_info()
        mine = self.shards if info is None else self.shards[info.id::info.num_workers]
        for shard in mine:
            with urllib.request.urlopen(f"{self.base}/{shard}", timeout=30) as resp:
                for line in resp:
                    rec = json.loads(line)
                    yield torch.tensor(rec["x"]), torch.tensor(rec["y"])


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    shards = [f"shard-{k}" for k in range(8)]
    loader = DataLoader(Stream(base, shards), batch_size=8, num_workers=2)
    net = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
    server.shutdown()
