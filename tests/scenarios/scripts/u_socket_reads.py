"""Samples fetched one by one from a storage server on 127.0.0.1 that answers each
request after 2 ms (real blocking socket I/O), in the training process (num_workers=0,
no ``if __name__ == "__main__"`` guard); batch 8 (~17 ms of reads) against a 5 ms step.

Truth: data-bound on read, about three quarters of the time waiting.
"""

import socket
import socketserver
import struct
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            req = self.request.recv(4)
            if len(req) < 4:
                return
            (i,) = struct.unpack("!I", req)
            time.sleep(0.002)  # the storage's latency
            self.request.sendall(struct.pack("!16f", *([float(i % 5)] * 16)))


server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()


class Remote(Dataset):
    def __init__(self, address):
        self.address, self.conn = address, None

    def __len__(self):
        return 800

    def __getitem__(self, i):
        if self.conn is None:
            self.conn = socket.create_connection(self.address)
        self.conn.sendall(struct.pack("!I", i))
        buf = b""
        while len(buf) < 64:
            buf += self.conn.recv(64 - len(buf))
        return torch.tensor(struct.unpack("!16f", buf)), torch.tensor(float(i % 5))


loader = DataLoader(Remote(server.server_address), batch_size=8)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0
for x, y in loader:
    t0 = time.perf_counter()
    loss = ((model(x).squeeze(1) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
    total += len(x)
print("samples", total)
