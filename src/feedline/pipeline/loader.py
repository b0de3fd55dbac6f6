"""``feedline.Loader``: sampling, workers, slots and transfer composed into one iterable.

    loader = Loader(ds, batch_size=64, device="cuda:0", workers=8)
    for epoch in range(E):
        loader.set_epoch(epoch)
        for batch in loader:   # dict field -> tensor on device (lists for ragged), "__key__"
            ...

Batches ``workers + prefetch`` ahead of the consumer are read, decoded,
collated into slots and copied while the user computes. See the module
docstrings of ``sampler`` (order, sharding, drop_last), ``state`` (resume),
``slots`` (the pinned budget) and ``transfer`` (streams and events).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from feedline.cores import usable_cores
from feedline.decode import Decoders, Limits, as_decoders
from feedline.decode.jpeg_batch import JpegBatchDecoder
from feedline.errors import ArgumentError, ConfigError
from feedline.pipeline import _dropped, options, sampler, state
from feedline.pipeline.device_decode import kept_for_transform, make_device_decode, worker_decoders
from feedline.pipeline.iteration import Pass
from feedline.pipeline.jobs import Context, Job
from feedline.pipeline.runtime import Options, Ready, Runtime
from feedline.pipeline.slots import SlotPool, placed_allocator
from feedline.pipeline.source import Source, packed_subset
from feedline.pipeline.stages import Stage
from feedline.pipeline.transfer import make_engine
from feedline.pipeline.workers_process import ProcessWorkers
from feedline.placement import Placement, plan_placement
from feedline.units import parse_bytes, parse_duration


def rank_and_world(process_group: Any, rank: int | None, world_size: int | None
                   ) -> tuple[int, int]:
    """Rank and world size from ``process_group`` (torch.distributed), or the explicit ints."""
    if process_group is not None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError("process_group given but torch.distributed is not initialised",
                              fix="call torch.distributed.init_process_group first")
        return dist.get_rank(process_group), dist.get_world_size(process_group)
    world = options.positive_int("world_size", 1 if world_size is None else world_size)
    r = options.non_negative_int("rank", 0 if rank is None else rank, world - 1)
    return r, world


MAX_DEFAULT_WORKERS = 8


def default_workers(sysfs: str | os.PathLike[str] = "/sys") -> int:
    """Workers when none are asked for: the cores this process may use (affinity, capped
    by a cgroup quota under ``sysfs``), at most 8."""
    return max(1, min(usable_cores(sysfs), MAX_DEFAULT_WORKERS))


class Loader:
    """Load batches from a packed or map-style dataset onto ``device``.

    Args:
        dataset: a PackedDataset, a path to one (opened with ``io``), a split of one
            (``ds.subset(indices)``, or a ``torch.utils.data.Subset`` such as
            ``random_split`` gives: read and decoded as packed), or any map-style dataset
            (``len`` + ``__getitem__``). Kept as :attr:`dataset`.
        batch_size: samples per batch.
        device: ``"cpu"`` or ``"cuda:N"`` (explicit index).
        shuffle, seed: the global order is a permutation from ``(seed, epoch)``; above
            2^24 samples (every window start of a token file) it is computed per batch, so
            a dataset of 10^12 indices costs no memory for its order.
            Default ``shuffle=True`` (DataLoader's is False). Call :meth:`set_epoch`
            before each epoch: iterating again without it repeats the order (warned once).
        drop_last: default ``True`` (DataLoader's is False): every rank gets the same
            number of full batches; see :mod:`feedline.pipeline.sampler` for ``False``.
            With ``shuffle=False`` the default warns (``DroppedTailWarning``) when it leaves
            samples out: the same last ones every epoch, an evaluation pass that misses them;
            pass ``drop_last=False`` to read them, ``True`` to leave them out unwarned.
        workers: worker threads or processes (each prepares one batch at a time); default
            the cores this process may use (affinity, capped by a cgroup quota), at most 8
            (more workers than cores only adds memory in flight and contention; more
            processes than cores is not capped but warned about: ``OversubscribedWarning``).
        worker_type: ``"thread"`` (default; no pickling, no /dev/shm), ``"process"`` (for
            Python work that holds the GIL; dataset and functions must pickle), or
            ``"auto"``: start with threads, measure the first batches' CPU time against
            wall time, and move to processes when the threads wait for the GIL (see
            :mod:`feedline.pipeline.auto`; what it chose and why is in ``stats["auto"]``,
            the kind in use in :attr:`worker_kind`). Batch content and order never depend on it.
        prefetch: finished batches allowed to wait ahead of the consumer.
        pinned_budget: byte cap of the slot pool (``"2GiB"``); a batch bigger than it is a
            ResourceError at the first batch. It also caps the batches in flight: once
            batch 0 gives the batch size in bytes, ``workers + prefetch`` is lowered (to one
            at least) so that many batches fit it (``stats["window"]``), since each holds a
            batch of memory (a lent slot on CPU, an arena slot with process workers, a
            device batch on CUDA) until the consumer takes it.
        io: backend for a dataset given as a path (``"auto"``, ``"buffered"``, ``"direct"``;
            an opened dataset keeps its own, and another one asked for here is an error).
        decode: a :class:`feedline.decode.Decoders` or a mapping field/extension -> fn.
            A field the dataset's schema found to hold an integer in every sample
            (``cls``, ``label``, ``idx``, ``target``, ``class``, ``label.txt``...) is an int64
            column gathered from the index unless ``decode`` names it or its extension.
        transform: ``fn(sample) -> sample`` run in the workers after decoding (images are
            ``uint8`` HWC arrays; the contract and helpers: :mod:`feedline.vision`).
        collate: ``fn(list_of_samples) -> batch``; bypasses the slot pool (each batch is
            pinned on its own, bounded by the window). The batch is what it returns, as
            with a DataLoader's ``collate_fn``: no ``"__key__"`` is added (a packed
            sample's dict has its ``"__key__"`` for the collate to keep).
        process_group: a torch.distributed group to read rank and world size from.
        on_error: ``"raise"`` (WorkerError) or ``"skip"`` (counted in :attr:`stats`). A
            skipped sample's place is filled by the samples that follow its batch in this
            rank's order, so every rank keeps the same batch size and count (DDP needs
            both); such a replacement is also delivered in its own batch that epoch.
        timeout: seconds (or ``"30s"``) to wait for one batch before LoaderTimeout.
        in_order: deliver batches in order; ``False`` delivers whichever is ready first.
        rank, world_size: explicit sharding without a process group. The Loader never
            reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` from the environment; given none
            of these three arguments in a job whose ``WORLD_SIZE`` (or initialised
            ``torch.distributed`` group) is above 1, it warns (``UnshardedWarning``):
            every rank would read the whole dataset. ``world_size=1`` silences it.
        shm_dir: where process workers' shared-memory arena lives.
        start_method: how process workers start. ``"fork"`` (default): forked from the
            training process (milliseconds, the dataset inherited, not pickled, the script
            not imported again), used only where it is safe (no other thread alive, no CUDA
            the workers need: :mod:`feedline.pipeline.forking`), else the forkserver;
            ``stats["processes"]`` says which was used and why. ``"forkserver"``: the
            server imports torch once (seconds, for the first loader of the process) and
            every loader's workers are forked from it; ``"spawn"``: every worker imports
            the training script and torch again.
        limits: decode size bounds (:class:`feedline.decode.Limits`).
        placement: ``"auto"`` (default) runs the workers on the CPUs of the target GPU's
            NUMA node and first-touches slot memory there, on a multi-socket host;
            ``"none"`` leaves affinity alone; a :class:`~feedline.placement.Placement`
            (e.g. from ``plan_placement(gpu_address=...)``) is used as given. What was
            chosen and why:
            ``stats["placement"]`` (see :mod:`feedline.placement`).
        decode_on: where JPEG fields decode. ``"cpu"`` (default): in the workers, into the
            slot rows. ``"gpu"``: the workers keep them compressed (checking each header,
            so a payload that is not a JPEG is a bad sample there), and each delivered
            batch's images are decoded on the device (nvJPEG via torchvision, or
            nvImageCodec): only compressed bytes cross PCIe; a ``transform=`` sees those
            fields as ``bytes``. An image the device decoder rejects after delivery is
            decoded on the CPU instead; one that neither can decode raises
            ``DecodeError`` naming its key, whatever ``on_error`` says (a delivered batch
            cannot be refilled). ``"auto"``: the GPU when CUDA and a GPU JPEG library are
            present and the CPU decode measured on the first batch would bind, else the
            CPU. A :class:`~feedline.decode.jpeg_batch.JpegBatchDecoder` is used as given.
            ``stats["decode_on"]`` says which and why (:mod:`feedline.pipeline.device_decode`).
        decode_size: ``(h, w)``: every JPEG field, and the sample's image in another
            format (a field named ``png``, ``webp``...; not a mask such as ``seg.png``, whose
            class ids stay as stored), is decoded to RGB and resized to it, so the field is
            one dense ``(N, h, w, 3)`` uint8 tensor (default: as stored; a list when sizes
            vary). Grey, CMYK, palette and alpha images all
            come out as 3-channel RGB; the aspect ratio is not kept; EXIF orientation is
            not applied (as in torchvision's ImageFolder). With ``decode_on="cpu"`` this
            runs in the workers, into the slot rows (:mod:`feedline.decode.resized`): a
            ``transform=`` sees the resized ``(h, w, 3)`` array, and a damaged image is an
            ordinary bad sample (``on_error`` decides). With a device decoder, JPEG fields
            are resized on the device after delivery (bilinear, antialiased; the in-worker
            path agrees with it to within a few grey levels, under one on average).
        lengths: one length per sample (clip frames, tokens; ``ds.sizes("wav")`` gives member
            bytes from the index without reading): *length-bucketed* batches, as Hugging
            Face's ``group_by_length``: pools of 50 global batches of the shuffled order are
            sorted by length and the batches shuffled, so each batch holds samples of similar
            length and a per-batch padding collate (:class:`feedline.padding.PadCollate`)
            pads little; every rank's batch ``b`` comes from the same pool. Still a function
            of ``(seed, epoch)``, resumable (the state records the lengths' digest). With
            ``shuffle=False`` the order is sorted by length.
        stages: extra per-sample stages run in the workers after decode and transform,
            each a value with a ``name`` and ``__call__(sample, place) -> sample`` (see
            :mod:`feedline.pipeline.stages`); a stage that raises makes a bad sample
            named by the stage. Like ``transform=``, they turn the direct recipes off.

    DataLoader argument names (``num_workers``, ``pin_memory``, ``prefetch_factor``...)
    are refused with the feedline argument to use (:mod:`feedline.pipeline.options`).

    Raises:
        ConfigError (a ``ValueError``): a value out of range (``batch_size=0``,
            ``workers`` above 1024, an unknown choice, ``decode=`` keys that match no
            field); ArgumentError (a ``TypeError`` too): a value of the wrong type
            (``batch_size="4"``, ``shuffle="yes"``) or a DataLoader name. Both name the
            argument in ``field``.
        ResourceError: process workers with an ``shm_dir`` that is not a writable folder.
        DeviceError: a CUDA device without CUDA.
    """

    def __init__(
        self, dataset: Any, batch_size: int = 64, device: Any = "cpu", shuffle: bool = True,
        seed: int = 0, drop_last: bool = options.DROP_LAST, workers: int | None = None, worker_type: str = "thread",
        prefetch: int = 4, pinned_budget: str | int = "2GiB", io: str = "auto",
        decode: Decoders | Mapping[str, Any] | None = None,
        transform: Callable[[Any], Any] | None = None,
        collate: Callable[[list[Any]], Any] | None = None, process_group: Any = None,
        on_error: str = "raise", timeout: float | str | None = None, in_order: bool = True,
        *, rank: int | None = None, world_size: int | None = None,
        shm_dir: str = "/dev/shm", start_method: str = "fork", limits: Limits | None = None,
        placement: str | Placement = "auto",
        decode_on: str | JpegBatchDecoder = "cpu", decode_size: tuple[int, int] | None = None,
        stages: Sequence[Stage] = (), lengths: Any = None,
        **unknown: Any,
    ) -> None:
        options.check_unknown(unknown, Loader.__init__)
        _dropped.settle(60.0)  # a loader dropped just before has stopped its workers
        default_drop, drop_last = drop_last is options.DROP_LAST, bool(drop_last) if drop_last is options.DROP_LAST \
            else drop_last
        shuffle, drop_last, in_order = (options.check_flag(n, v) for n, v in (
            ("shuffle", shuffle), ("drop_last", drop_last), ("in_order", in_order)))
        # a torch Subset (random_split) of a packed dataset reads as a packed dataset (its
        # own __getitem__ gives the raw field bytes, not decoded samples)
        given, dataset = dataset, packed_subset(dataset)
        options.check_io(io, dataset)
        if isinstance(dataset, (str, os.PathLike)):
            from feedline.io import open_dataset

            given = dataset = open_dataset(dataset, io=_host_io(io))
        self.dataset = given
        """The dataset as given (a path opened as a ``PackedDataset``), as ``DataLoader.dataset``."""
        self.batch_size = options.positive_int("batch_size", batch_size)
        self.workers = (default_workers() if workers is None
                        else options.positive_int("workers", workers, options.MAX_WORKERS))
        self.prefetch = options.positive_int("prefetch", prefetch, options.MAX_PREFETCH)
        self.worker_type = options.choice("worker_type", worker_type, ("thread", "process", "auto"))
        self.on_error = options.choice("on_error", on_error, ("raise", "skip"))
        options.check_processes(self.worker_type, start_method, shm_dir)
        options.warn_oversubscribed(self.workers, self.worker_type, usable_cores())
        seed = options.non_negative_int("seed", seed)
        options.check_callable("transform", transform)
        options.check_callable("collate", collate)
        stages = options.check_stages(stages)
        self.seed, self.shuffle, self.drop_last, self.in_order = seed, shuffle, drop_last, in_order
        self.timeout = None if timeout is None else parse_duration(timeout, name="timeout")
        self.rank, self.world_size = rank_and_world(process_group, rank, world_size)
        if process_group is None and rank is None and world_size is None:
            options.warn_unsharded()
        decoders = as_decoders(decode)
        if limits is not None:
            if not isinstance(limits, Limits):
                raise ArgumentError(f"limits must be a feedline.decode.Limits or None, got {limits!r}",
                                    field="limits", fix="pass Limits(max_bytes=..., max_pixels=...)")
            decoders = decoders.replace(limits=limits)
        self._source = Source(dataset)
        options.check_decode_fields(decoders.overrides,
                                    dataset.fields if self._source.packed else None)
        self._n = options.dataset_length(self._source)
        self._lengths = options.check_lengths(lengths, self._n)
        if default_drop and not shuffle:
            options.warn_dropped_tail(self._n, self.batch_size, self.world_size)
        sampler.rank_plan(self._n, seed=seed, epoch=0, shuffle=shuffle, batch_size=self.batch_size,
                          drop_last=drop_last, rank=self.rank, world=self.world_size, lengths=self._lengths)
        engine = make_engine(device)
        self.device = engine.device
        self.placement = (placement if isinstance(placement, Placement)
                          else plan_placement(self.device, placement))
        self._device_decode, self.decode_on = make_device_decode(
            decode_on, list(getattr(dataset, "fields", None) or ()), device=str(self.device),
            workers=self.workers, size=decode_size, limits=decoders.limits)
        decoders = worker_decoders(decoders, self._device_decode, decode_size)
        decoders = kept_for_transform(decoders, transform, getattr(dataset, "fields", None)
                                      if self._source.packed else None, self._device_decode)
        budget = parse_bytes(pinned_budget, name="pinned_budget")
        # a field the schema found to hold an integer in every sample decodes as one, so
        # its batches are gathered from the index (the same values the per-sample path gives)
        decoders = decoders.with_labels(self._source.label_fields)
        ctx = Context(self._source, decoders, transform, self.on_error, tuple(stages))
        opts = Options(self.batch_size, self.workers, self.worker_type,
                       self.workers + self.prefetch, shm_dir, start_method, collate,
                       self.timeout, self.placement if self.placement.active else None,
                       self._device_decode)
        allocate = placed_allocator(self.placement) if self.placement.active else None
        # a CPU loop holds the batch it computes on and, while the next is handed out, the
        # previous one; each worker fills one: more slots than that wait briefly first
        # (workers + 1 saved W1 a 12.6 MB slot but cost it 7% of its samples/s: a wait
        # for the loop's hand-over on every batch)
        pool = SlotPool(budget, pin=engine.needs_pinned, reuse=engine.reuse_slots,
                        allocate=allocate, soft_cap=self.workers + 2)
        self._rt = Runtime(ctx, engine, pool, opts, owner=id(self))
        self._watch = _dropped.watch(self, self._rt.close)  # closed off this thread if dropped
        self._pos = state.Position()
        self._restored = False
        self._counters = {"batches": 0, "skipped": 0}
        self._skipped_log: list[dict[str, str]] = []
        self._skipped_keys: set[tuple[int, str]] = set()
        self._plans: dict[int, sampler.Plan] = {}  # this epoch's and the next one's
        self._epochs_set = False  # set_epoch called since the last iter()
        self._warned_repeat = False
        self._warned_skip = False
        self._live: weakref.ref[Pass] | None = None  # the latest pass (one stream at a time)

    # -- order and position ---------------------------------------------------------------
    def _plan(self, epoch: int) -> sampler.Plan:
        plan = self._plans.get(epoch)
        if plan is None:
            plan = sampler.rank_plan(
                self._n, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
                batch_size=self.batch_size, drop_last=self.drop_last, rank=self.rank,
                world=self.world_size, lengths=self._lengths)
            self._plans = {e: p for e, p in self._plans.items() if e in (epoch - 1, epoch + 1)}
            self._plans[epoch] = plan
        return plan

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self._plan(self._pos.epoch).num_batches

    @property
    def epoch(self) -> int:
        return self._pos.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (right after :meth:`load_state_dict`, setting
        the restored epoch keeps the restored position)."""
        epoch = options.non_negative_int("epoch", epoch)
        self._epochs_set = True  # the next pass will likely be followed by epoch + 1
        if self._restored and epoch == self._pos.epoch:
            return
        self._restored = False
        self._rt.sched.abandon()  # an unfinished pass is abandoned
        self._rt.sched.keep_ahead_for(epoch)  # batches prepared for another epoch go
        self._pos = state.Position(epoch)

    def _identity(self) -> dict[str, Any]:
        return {"fingerprint": self._source.fingerprint, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size,
                "rank": self.rank, "shuffle": self._order_name(), "drop_last": self.drop_last}

    def _order_name(self) -> bool | str:
        """``shuffle`` as saved in a state: the flag, or with ``lengths=`` a name that holds
        their digest, so a state resumes only under the same length-bucketed order."""
        if self._lengths is None:
            return self.shuffle
        digest = hashlib.blake2b(self._lengths.tobytes(), digest_size=8).hexdigest()
        return f"{'shuffled' if self.shuffle else 'sorted'} by lengths {digest}"

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch handed out (JSON-serialisable, small)."""
        return state.to_dict(self._identity(), self._pos, self._counters)

    def load_state_dict(self, saved: Mapping[str, Any]) -> None:
        """Resume from ``saved``: the next batch is the first one not yet delivered.

        Raises:
            StateError: ``saved`` comes from a different dataset, seed, batch size,
                world size, rank, shuffle or drop_last, or is malformed (a missing key,
                a counter that is not a plain integer, a position beyond the epoch...);
                the key is named (:func:`feedline.pipeline.state.from_dict`).
        """
        pos, counters = state.from_dict(saved, self._identity(),
                                        lambda e: self._plan(e).num_batches)
        self._rt.sched.abandon()
        self._rt.sched.drop_ahead()
        self._pos, self._restored = pos, True
        self._counters.update(counters)

    @property
    def worker_kind(self) -> str:
        """The kind of workers batches go to now: ``"thread"`` or ``"process"``
        (``worker_type="auto"`` starts with threads and may move to processes)."""
        kind = self._rt.kind
        return "thread" if kind == "auto" else kind

    @property
    def stats(self) -> dict[str, Any]:
        """What the loader did and decided.

        Counters: batches delivered, skipped samples (and the last 100 of them). Memory:
        slot bytes in use, their peak, the budget, slots ever allocated (far fewer than
        batches when slots are reused). Flow: ``window`` (batches in flight at most:
        ``workers + prefetch``, lowered to what ``pinned_budget`` holds), ``occupancy`` (mean fraction of the window
        finished and waiting when the consumer asked; near 0 the pipeline starves),
        ``starved_batches``, ``consumer_wait_s``, ``budget_waits`` / ``budget_wait_s``
        (producers waiting for the pinned budget), ``reuse_waits`` / ``reuse_wait_s`` (on
        CPU, producers waiting briefly for the loop's previous batch to come back instead
        of allocating one more slot). Plan: ``recipes`` (field -> how its
        rows are filled, see :mod:`feedline.pipeline.plan`; empty before the first
        batch), ``part_rows`` (rows per part when thread workers fill each batch together,
        see :mod:`feedline.pipeline.split`; 0: one worker per batch), ``list_fallbacks``
        (dense field -> batches delivered as a list because a sample had another shape), ``worker_type`` and, with ``"auto"``, ``auto`` (what
        was measured and why that kind was chosen), ``placement`` (the CPUs and NUMA node
        the workers run on, or why they were left alone), and with process workers
        ``processes`` (``start_method`` used, ``asked``, ``why_not_fork``, ``start_s``:
        seconds until every worker was ready).
        """
        rt = self._rt
        pool = rt.pool
        return {**self._counters, "skipped_samples": list(self._skipped_log),
                "pinned_bytes": pool.allocated_bytes, "pinned_peak_bytes": pool.peak_bytes,
                "pinned_budget": pool.budget, "slots_created": pool.slots_created,
                "window": rt.opts.window,
                "budget_waits": pool.budget_waits, "budget_wait_s": pool.budget_wait_s,
                "reuse_waits": pool.reuse_waits, "reuse_wait_s": pool.reuse_wait_s,
                **rt.gauges.report(),
                "recipes": rt.plan.describe() if rt.plan is not None else {},
                "part_rows": rt.plan.part_rows if rt.plan is not None else 0,
                "list_fallbacks": dict(rt.fallbacks), "worker_type": rt.kind,
                "placement": self.placement.to_dict(),
                "decode_on": (self._device_decode.report() if self._device_decode is not None
                              else {"where": self.decode_on}),
                **({"auto": rt.auto.report()} if rt.auto is not None else {}),
                **({"processes": rt.pool_workers.report()}
                   if isinstance(rt.pool_workers, ProcessWorkers) else {})}

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self._rt.closed:
            raise ConfigError("the loader is closed", fix="create a new Loader (close() ends it for good)")
        self._rt.check_process()
        live = self._live() if self._live is not None else None
        if live is not None and live.live_elsewhere():
            # a new pass would silently end the other thread's (its next() would stop)
            raise ConfigError(
                "this loader is being iterated by another thread; a loader is one stream of "
                "batches", field="loader",
                fix="give each thread its own Loader (or finish or break the other loop first)")
        if live is not None and not live.finished:
            live.replaced = True  # its next() says so instead of ending quietly
        epoch = self._pos.epoch
        plan = self._plan(epoch)
        if self._pos.done(plan.num_batches) and not self._restored:
            self._pos = state.Position(epoch)  # a new pass over the same epoch
            if self.shuffle and not self._warned_repeat:  # unshuffled, every epoch is alike
                self._warned_repeat = True
                options.warn_repeated_epoch(epoch)
        self._restored = False
        todo = self._pos.remaining(plan.num_batches)
        run, adopted, todo = self._rt.sched.begin(epoch, todo)
        if self._rt.pool_workers is None and todo:
            self._rt.start(plan.num_batches)
        gate: Future[Any] | None = None
        if not self._rt.ready and todo:
            # the layout comes from batch 0 of the plan, prepared in a worker before any
            # other batch (so it is the same on every run, and isolated like any batch)
            probe = dataclasses.replace(self._job(plan, 0, run), probe=True)
            gate = self._rt.submit(probe)
            if todo[0] == 0:
                adopted, todo = [(probe, gate)], todo[1:]
        # the pass most likely to follow: epoch + 1 in a loop that calls set_epoch, else
        # the same epoch again (iterating without set_epoch repeats the epoch)
        following = epoch + 1 if self._epochs_set else epoch
        self._epochs_set = False
        current = Pass(self._rt, run, todo, lambda b: self._job(plan, b, run),
                       self._delivered, window=self._rt.opts.window,
                       in_order=self.in_order, timeout=self.timeout, inflight=adopted,
                       ahead=lambda room: self._prepare_ahead(following, room), gate=gate,
                       owner=self)
        self._live = weakref.ref(current)
        return current

    def _prepare_ahead(self, epoch: int, room: int) -> None:
        """Submit the first batches of ``epoch`` into ``room`` free places of the window,
        at most one per worker.

        Called by the running pass once all its batches are submitted, so the pass that
        follows starts with batches already prepared. They are used only if the next
        ``iter()`` is over ``epoch`` from its start; otherwise they are dropped unseen.
        One batch per worker keeps every worker busy across the epoch boundary; filling
        the whole window would hold a slot per batch (and spend the CPU) for a pass that
        may never come (after the last epoch), while the pass that does come refills the
        window itself.
        """
        if self._rt.closed or self._rt.pool_workers is None or not self._rt.ready:
            return  # closed, or a pass with nothing to do that started no workers
        plan = self._plan(epoch)
        self._rt.sched.prepare_ahead(epoch, min(room, self.workers), plan.num_batches,
                                     lambda b, run: self._job(plan, b, run), self._rt.submit)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no batch is being prepared for this loader; True if none is.

        Between passes the only work in flight is the next pass's first batches,
        prepared ahead. Benchmarks call this so that work is timed with the loader that
        started it; a training loop never needs to.
        """
        return self._rt.sched.wait_ahead(timeout)

    def _job(self, plan: sampler.Plan, batch_id: int, run: int) -> Job:
        refill = plan.refill(batch_id, 2 * self.batch_size + 16) if self.on_error == "skip" else []
        return Job(run, batch_id, plan.batch(batch_id), refill)

    def _delivered(self, ready: Ready) -> None:
        self._pos.mark(ready.batch_id)
        skipped = ready.skipped
        if ready.lists:
            self._rt.note_lists(ready.lists)
        if not self._rt.varied_noted:
            self._rt.note_varied()
        self._counters["batches"] += 1
        # a bad sample can be met twice in one epoch (as a refill candidate, then in its
        # own batch): it counts once per epoch
        fresh = [s for s in skipped if (self._pos.epoch, s["key"]) not in self._skipped_keys]
        self._skipped_keys.update((self._pos.epoch, s["key"]) for s in fresh)
        self._counters["skipped"] += len(fresh)
        if fresh and not self._warned_skip:
            self._warned_skip = True
            options.warn_skipped(fresh[0])
        self._skipped_log = (self._skipped_log + fresh)[-100:]

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop workers, free slots and shared memory. Idempotent."""
        if _dropped.forget(self._watch):
            self._rt.close()  # here a Ctrl-C while it waits for the workers reaches the caller

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _host_io(io: str) -> str:
    """The read backend for a loader whose decoders run on the host.

    ``auto`` means the best *host* path here: GDS lands bytes in device memory,
    which the CPU decoders cannot read, so it is only used when asked for.

    Raises:
        ConfigError: ``io="gds"`` (read raw fields on the device with
            ``feedline.open_dataset(path, io="gds").read_many`` instead).
    """
    if io == "gds":
        raise ConfigError(
            "io='gds' reads into device memory, but the Loader decodes on the host",
            fix="use io='direct' or 'buffered' for the Loader, or read raw fields on the "
            "device with feedline.open_dataset(path, io='gds').read_many(indices)",
        )
    return "buffered" if io == "auto" else io

