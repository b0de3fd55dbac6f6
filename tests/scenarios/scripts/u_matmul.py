"""A compute-bound loop with no sleeps: an MLP doing real matmuls on batches of 256 from
an in-memory TensorDataset (num_workers=0), no ``__main__`` guard.

Truth: compute-bound: indexing and stacking a batch costs well under a millisecond; the
forward/backward of a 512-2048-512 MLP costs tens of milliseconds on a CPU.
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256 * 40, 512), torch.randn(256 * 40, 512))
loader = DataLoader(data, batch_size=256, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 1) > -1)
