"""Samples fetched over HTTP (``urllib.request``) from a file server on 127.0.0.1 that
answers each GET after 12 ms (a real blocking request per sample); the server runs in a
thread of the training process, the DataLoader has 6 workers on a 2-core host (right
for I/O: the workers wait, they do not compute). Batch 16: 192 ms of requests per batch,
32 ms with 6 workers, against a 5 ms step.

Truth: data-bound on read; more workers would still help (I/O, not CPU).
"""

import http.server
import threading
import time
import urllib.request

import torch
from torch.utils.data import DataLoader, Dataset


class Blobs(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        i = int(self.path.rsplit("/", 1)[1])
        time.sleep(0.012)  # the storage's latency
        body = bytes([i % 251]) * 256
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class HttpDataset(Dataset):
    def __init__(self, base):
        self.base = base

    def __len__(self):
        return 640

    def __getitem__(self, i):
        with urllib.request.urlopen(f"{self.base}/blob/{i}", timeout=30) as r:
            raw = r.read()
        x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).float()[:32] / 255
        return x, i % 10


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Blobs)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    loader = DataLoader(HttpDataset(base), batch_size=16, shuffle=True, num_workers=6)
    model = torch.nn.Linear(32, 10)
    opt = torch.optim.Adam(model.parameters())
    seen = 0
    for x, y in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        seen += len(y)
    server.shutdown()
    print(f"samples {seen}")
