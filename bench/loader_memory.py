"""Memory: no growth across epochs, and the slot pool never above its budget.

Runs the loader for several epochs over packed 4 KiB float32 samples with a
deliberately tight ``pinned_budget`` (three batch slots) and records the
process RSS after each epoch and the pool's peak bytes. Goals: RSS after the
last epoch within 5% of RSS after epoch 1; peak slot bytes <= budget.

    .venv/bin/python bench/loader_memory.py [--quick] [--json PATH] [--device cuda:0]
"""

from __future__ import annotations

import sys
import time

import psutil

from loader_common import Report, parser, scratch
from loader_small import build


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    n = args.samples or (2048 if args.quick else 32768)
    epochs = 3 if args.quick else 6
    import feedline

    batch, sample_bytes = 256, 4096
    budget = 3 * batch * sample_bytes
    report = Report("loader_memory", args, samples=n, epochs=epochs, budget=budget)
    proc = psutil.Process()
    with scratch(args, "loader-memory") as folder:
        root = build(folder, n)
        loader = feedline.Loader(str(root), batch_size=batch, device=args.device, workers=2,
                                 prefetch=4, pinned_budget=budget, seed=0)
        rss, peak = [], 0
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            t0 = time.perf_counter()
            count = 0
            for b in loader:
                count += int(b["f32"].shape[0])
                peak = max(peak, loader.stats["pinned_bytes"])
            rss.append(proc.memory_info().rss)
            report.add({"name": f"epoch {epoch + 1}", "median_s": time.perf_counter() - t0,
                        "runs_s": [time.perf_counter() - t0], "samples": count,
                        "samples_per_s": count / (time.perf_counter() - t0), "rss": rss[-1]})
            print(f"epoch {epoch + 1}: RSS {rss[-1] / 2**20:.1f} MiB")
        peak = max(peak, loader.stats["pinned_peak_bytes"])
        loader.close()
    growth = rss[-1] / rss[0] - 1
    report.doc["rss_bytes"] = rss
    report.doc["pinned_peak_bytes"] = peak
    report.doc["comparisons"] = [
        {"ours": f"epoch {epochs}", "baseline": "epoch 1", "key": "rss",
         "ratio": rss[0] / rss[-1], "goal": 0.95, "meets_goal": growth <= 0.05},
        {"ours": "pinned peak", "baseline": "pinned_budget", "key": "bytes",
         "ratio": budget / max(peak, 1), "goal": 1.0, "meets_goal": peak <= budget},
    ]
    print(f"RSS growth epoch 1 -> {epochs}: {growth:+.1%} (goal <= 5%); slot peak "
          f"{peak / 2**20:.2f} MiB of a {budget / 2**20:.2f} MiB budget")
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
