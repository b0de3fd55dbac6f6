"""Queue occupancy and waits, measured where they happen, reported in ``loader.stats``.

* **Occupancy**: at each batch taken by the consumer, how many batches of the
  window were already finished and waiting. Close to the window: the loader is
  ahead of training (the step is the bottleneck). Close to 0: the pipeline is
  starving and the consumer waits.
* **Consumer wait**: seconds ``next(loader)`` blocked for a batch.
* **Budget waits** (kept by :class:`~feedline.pipeline.slots.SlotPool`):
  producers that found the pinned budget used up and waited for a slot.

The same figures go to ``feedline.spans`` (the ``wait`` span carries
``ready`` and ``window``; the ``budget_wait`` span marks budget waits), which is
what ``feedline.watch`` and ``diagnose`` read.
"""

from __future__ import annotations

import threading
from typing import Any


class Gauges:
    """Running totals of the consumer side of one loader (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches = 0
        self.ready_sum = 0
        self.window_sum = 0
        self.starved = 0
        """Batches for which nothing was ready when the consumer asked."""
        self.wait_s = 0.0

    def taken(self, ready: int, window: int, waited: float) -> None:
        """One batch taken: ``ready`` of ``window`` were finished; the consumer waited."""
        with self._lock:
            self.batches += 1
            self.ready_sum += ready
            self.window_sum += window
            self.starved += ready == 0
            self.wait_s += waited

    def report(self) -> dict[str, Any]:
        """Mean occupancy (0..1 of the window), batches that found nothing ready, waits."""
        with self._lock:
            occupancy = self.ready_sum / self.window_sum if self.window_sum else None
            return {"occupancy": occupancy,
                    "ready_mean": self.ready_sum / self.batches if self.batches else None,
                    "starved_batches": self.starved, "consumer_wait_s": self.wait_s}
