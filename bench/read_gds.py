"""GPUDirect Storage reads into device memory vs buffered reads + a host-to-device copy.

Question: what does ``io="gds"`` (KvikIO ``CuFile.pread`` straight into device
memory) buy over the classic path (``pread`` into host memory, then a copy
to the GPU)? Both read every sample of a ``align=4096`` packed dataset in
batches of 256; the baseline copies each batch's window buffers to the device
with ``torch.Tensor.to(device)``. Bytes are checked identical before timing.
Whether GDS is really engaged (or KvikIO runs in compat mode, through a POSIX
bounce buffer) is reported with the result.

    .venv/bin/python bench/read_gds.py --device cuda [--quick] [--json PATH] [--repeat N]

``--device cpu`` runs only the buffered baseline (no copy) so the script can be
smoke-tested without a GPU; ``--device cuda`` without CUDA or kvikio exits 2
with the reason (and writes it to --json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common as rc
from feedline.errors import DeviceError
from feedline.format import pack
from feedline.io import gds_status, open_dataset


def buffered_to_device(ds: Any, n: int, batch: int, device: Any) -> int:
    """Baseline: buffered read_many, then each distinct window buffer copied to ``device``."""
    import torch

    total = 0
    for lo in range(0, n, batch):
        samples = ds.read_many(range(lo, min(lo + batch, n)))
        arenas = {}
        for sample in samples:
            for key, view in sample.items():
                if key != "__key__":
                    arenas[id(view.obj)] = view.obj
        for arena in arenas.values():
            total += torch.from_numpy(arena).to(device).numel()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return total


def gds_read(ds: Any, n: int, batch: int, device: Any) -> int:
    """Ours: read_many with io='gds'; fields arrive as device tensors."""
    import torch

    total = 0
    for lo in range(0, n, batch):
        for sample in ds.read_many(range(lo, min(lo + batch, n))):
            for key, tensor in sample.items():
                if key != "__key__":
                    total += tensor.numel()
    torch.cuda.synchronize(device)
    return total


def check_identical(gds: Any, host: Any, n: int) -> None:
    """Every field of every sample: device bytes == host bytes."""
    for lo in range(0, n, 256):
        idx = range(lo, min(lo + 256, n))
        for g, h in zip(gds.read_many(idx), host.read_many(idx), strict=True):
            for key, view in h.items():
                if key != "__key__" and bytes(g[key].cpu().numpy()) != bytes(view):
                    raise SystemExit(f"gds bytes differ from buffered for sample {h['__key__']} field {key}")


def _fail(args: Any, reason: str) -> int:
    print(f"read_gds: cannot run on --device {args.device}: {reason}", file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"benchmark": "read_gds", "error": reason, "device": args.device}))
    return 2


def main(argv: list[str] | None = None) -> int:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (smoke test of the baseline)")
    p.add_argument("--batch", type=int, default=256, help="samples per read_many call")
    args = p.parse_args(argv)
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return _fail(args, "CUDA is not available")
    n, lo, hi = (300, 16 << 10, 512 << 10) if args.quick else (2000, 64 << 10, 1 << 20)
    n = args.samples or n
    engaged, why = gds_status()
    with rc.scratch(args, "read-gds") as tmp:
        sizes = rc.random_sizes(n, lo, hi, seed=5)
        rc.write_files(tmp / "src", sizes)
        pack([tmp / "src"], tmp / "ds", shard_size=256 << 20, align=4096)
        host = open_dataset(tmp / "ds", io="buffered")
        payload = int(sizes.sum())
        fns = {"base": lambda: buffered_to_device(host, n, args.batch, device)}
        skipped = []
        if device.type == "cuda":
            try:
                gds = open_dataset(tmp / "ds", io="gds")
            except DeviceError as e:
                return _fail(args, str(e))
            check_identical(gds, host, n)
            fns["ours"] = lambda: gds_read(gds, n, args.batch, device)
        else:
            skipped.append({"name": "gds into device memory", "reason": "--device cpu: no device memory to read into"})
        res = rc.timeit_many(fns, args.repeat)
        base_name = "buffered pread + H2D copy" if device.type == "cuda" else "buffered pread (cpu, no copy)"
        base = rc.row(base_name, res["base"][0], payload, n, res["base"][1])
        rows, comps = [base], []
        if "ours" in res:
            if res["ours"][2] != payload:
                raise SystemExit(f"gds read {res['ours'][2]} bytes, expected {payload}")
            ours = rc.row("feedline gds (KvikIO CuFile.pread)", res["ours"][0], payload, n, res["ours"][1])
            rows.insert(0, ours)
            comps.append(rc.compare(ours, base, 1.0) | {"note": "no goal set in the issue; >= 1.0 means gds is not slower"})
        params = {"samples": n, "sample_bytes": f"{lo}-{hi} (log-uniform)", "device": str(device),
                  "gds_engaged": engaged, "gds_status": why, "bytes_identical": "ours" in res,
                  "scratch_fs": rc.fs_type(tmp)}
        rc.report("read_gds", args, params, rows, comps, skipped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
