"""Step clocks: which loader is the training one, and what ``steps=N`` counts.

Loaders here are plain objects stepped through :class:`StepClocks` as the hooks
would (one ``on_iter`` per pass, one ``on_next`` per batch, on one thread), in the
orders real loops use: validation inside the training pass, a peek at one batch,
validation before training, a long first validation pass.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from feedline import spans
from feedline.observe import _clock
from feedline.observe._clock import StepClocks
from feedline.observe._stats import Recorder


class Limit(Exception):
    pass


def clocks(steps: int | None = None) -> StepClocks:
    def stop(c: Any) -> Any:
        raise Limit(c.label)

    return StepClocks(lambda: None, lambda: 0.0, steps, stop)


def run(sc: StepClocks, loader: object, n: int) -> Iterator[int]:
    """One pass of ``n`` batches of ``loader``, yielding after each step."""
    now = _clock.time.perf_counter()  # the clock StepClocks reads (a test may set it)
    sc.on_iter(loader, now, now)
    for i in range(n):
        yield sc.on_next(loader, lambda i=i: i)
    with pytest.raises(StopIteration):
        sc.on_next(loader, _stop)


def _stop() -> Any:
    raise StopIteration


def test_validation_inside_training_is_not_the_training_loader_even_with_more_steps() -> None:
    sc, train, val = clocks(), object(), object()
    for k in run(sc, train, 12):
        if k % 4 == 3:
            for _ in run(sc, val, 10):  # 30 validation steps against 12 training steps
                pass
    t = sc.training()
    assert t is sc.clock(train) and sc.clock(val).inner and sc.clock(val).steps == 30


def test_steps_counts_the_training_loader_only() -> None:
    sc, train, val = clocks(steps=8), object(), object()
    taken = 0
    with pytest.raises(Limit) as e:
        for k in run(sc, train, 100):
            taken += 1
            if k == 2:  # a first validation pass longer than the limit
                for _ in run(sc, val, 20):
                    pass
    assert str(e.value) == sc.clock(train).label and taken == 8
    assert sc.clock(val).steps == 20


def test_a_peek_at_one_batch_does_not_hide_the_training_loader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one clock read = 1 ms: a preemption between the peek's iter() and next() cannot make
    # the peek look longer than the loop (it did once in CI, on real time: microseconds each)
    ticks = itertools.count()
    monkeypatch.setattr(_clock, "time", SimpleNamespace(perf_counter=lambda: next(ticks) / 1000))
    sc, train, val = clocks(steps=5), object(), object()
    now = _clock.time.perf_counter()
    sc.on_iter(val, now, now)
    sc.on_next(val, lambda: 0)  # next(iter(val)): one batch to look at, pass left open
    with pytest.raises(Limit) as e:
        for _ in run(sc, train, 50):
            pass
    assert str(e.value) == sc.clock(train).label
    assert sc.training() is sc.clock(train)


def test_validation_before_training_then_training_counts() -> None:
    sc, train, val = clocks(steps=25), object(), object()
    for _ in run(sc, val, 10):  # a sanity pass before training: not inside anything
        pass
    with pytest.raises(Limit) as e:
        for _epoch in range(3):
            for _ in run(sc, train, 10):
                pass
    assert str(e.value) == sc.clock(train).label and sc.clock(train).steps == 25


def test_a_loader_alone_runs_epoch_after_epoch_after_leaving_another_open() -> None:
    sc, first, second = clocks(steps=15), object(), object()
    for k in run(sc, first, 100):
        if k == 3:
            break  # a pass left open after 4 steps
    with pytest.raises(Limit) as e:
        for _epoch in range(5):
            for _ in run(sc, second, 6):
                pass
    assert str(e.value) == sc.clock(second).label


def test_spans_bind_files_a_threads_spans_under_its_owner() -> None:
    rec = Recorder()
    spans.install(rec)
    try:
        def worker(owner: int) -> None:
            spans.bind(owner)
            spans.emit("read", 0.0, 1.0)
            spans.emit("decode", 1.0, 2.0, owner=99)  # its own owner wins

        threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        spans.emit("wait", 0.0, 1.0)  # this thread is bound to nothing
    finally:
        spans.uninstall(rec)
    got = sorted((s.stage, s.attrs.get("owner")) for s in rec.spans())
    assert got == [("decode", 99), ("decode", 99), ("read", 1), ("read", 2), ("wait", None)]


class _Items:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        import numpy as np

        return {"x": np.full((4,), float(i), dtype=np.float32)}


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_two_loaders_stages_are_filed_under_each_loader(worker_type: str) -> None:
    import feedline
    from feedline.observe._session import Session

    session = Session("two", "cpu")
    with feedline.Loader(_Items(64), batch_size=4, workers=2, shuffle=False,
                         worker_type=worker_type) as train, \
            feedline.Loader(_Items(16), batch_size=8, workers=1, shuffle=False,
                            worker_type=worker_type) as val:
        session.start()
        try:
            for k, _batch in enumerate(train):
                if k % 8 == 7:
                    for _vb in val:
                        pass
        finally:
            session.stop()
    labels = {c.config.get("batch_size"): c.label for c in session.clocks.clocks.values()}
    by: dict[str | None, set[int]] = {}
    for s in session._spans():
        if s.stage in ("read", "collate"):
            by.setdefault(s.attrs.get("loader"), set()).add(int(s.attrs.get("batch", -1)))
    assert set(by) == {labels[4], labels[8]}  # nothing unfiled, nothing pooled
    assert max(by[labels[8]]) < 2 and max(by[labels[4]]) >= 8  # val: 2 batches per pass
    m, others = session.measurements()
    assert m is not None and m.loader["label"] == labels[4]
    (val_line,) = others
    assert val_line["label"] == labels[8] and val_line["steps"] == 2 * 2


def test_zipped_loaders_are_in_lockstep_and_a_validation_loader_is_not() -> None:
    from feedline.observe._clock import fold_waits, lockstep

    sc, a, b = clocks(), object(), object()
    for _ in zip(run(sc, a, 12), run(sc, b, 12), strict=False):  # for x, u in zip(a, b)
        pass
    ca, cb = sc.clock(a), sc.clock(b)
    assert ca is not cb  # first iterated at one place, but side by side: two loaders
    assert lockstep(ca, cb) and lockstep(cb, ca)
    va, vb = ca.steps_view(time.perf_counter(), []), cb.steps_view(time.perf_counter(), [])
    folded = fold_waits(va, [vb])
    # b's waits (inside a's bodies) moved into a's waits; each step's total is unchanged
    for w, b_, w0, b0 in zip(folded.waits, folded.bodies, va.waits, va.bodies, strict=True):
        assert w >= w0 and b_ <= b0 and w + b_ == pytest.approx(w0 + b0)
    assert sum(folded.waits) - sum(va.waits) == pytest.approx(sum(vb.waits[:-1]), rel=0.2, abs=1e-4)

    sc, train, val = clocks(), object(), object()
    for k in run(sc, train, 40):
        if k % 10 == 9:
            for _ in run(sc, val, 6):
                pass
    assert not lockstep(sc.clock(train), sc.clock(val))


class Settings:
    """A loader-like object with one DataLoader setting."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers


def test_a_loader_rebuilt_at_one_place_each_epoch_is_one_data_path() -> None:
    sc, built = clocks(), []
    for epoch in range(4):
        loader = Settings(2 if epoch < 3 else 4)  # DataLoader(...) inside the epoch loop
        built.append(loader)
        for _ in run(sc, loader, 5):
            pass
    first = sc.clock(built[0])
    assert all(sc.find(x) is first for x in built[:3]) and first.steps == 15
    assert first.config["instances"] == 3 and len(first.pass_starts) == 3
    assert sc.clock(built[3]) is not first  # other settings: another loader
    assert sc.labels()[id(built[1])] == first.label
    # a loader built elsewhere in the code stays its own, even with the same settings
    other = Settings(2)
    for _ in run(sc, other, 5):
        pass
    assert sc.clock(other) is not first and sc.training() is first


def slow_pass(sc: StepClocks, loader: object, n: int, latency: float) -> None:
    """One pass of ``n`` batches of ``loader``, each taking ``latency`` to arrive."""
    now = time.perf_counter()
    sc.on_iter(loader, now, now)
    for i in range(n):
        sc.on_next(loader, lambda i=i: time.sleep(latency) or i)  # the storage's latency
    with pytest.raises(StopIteration):
        sc.on_next(loader, _stop)


@pytest.mark.timeout(30)
def test_training_sets_taken_in_turn_by_epoch_the_one_the_run_waits_in_trains() -> None:
    # even epochs on a slow remote set (8 batches), odd ones on a quick in-memory set of
    # hard examples (12 batches): most of the run is spent in the slow one's passes
    sc, remote, hard = clocks(), object(), object()
    for epoch in range(4):
        if epoch % 2 == 0:
            slow_pass(sc, remote, 8, 0.01)  # 0.16 s in all: past LONGER_BY_S
        else:
            slow_pass(sc, hard, 12, 0.0)
    assert sc.clock(hard).steps > sc.clock(remote).steps
    assert sc.training() is sc.clock(remote) and sc.chosen_for_time(sc.clock(remote))
    # passes of comparable length: the one with the most steps, as before
    sc, a, b = clocks(), object(), object()
    for epoch in range(4):
        slow_pass(sc, a if epoch % 2 == 0 else b, 8 if epoch % 2 == 0 else 12, 0.001)
    assert sc.training() is sc.clock(b) and not sc.chosen_for_time(sc.clock(b))


def test_a_pass_left_before_its_end_ends_at_its_last_batch() -> None:
    # an engine's evaluator takes epoch_length=len(val) batches and never sees
    # StopIteration: each validation pass ends at its last batch, not at the loader's
    # last batch of the run (which would take later training steps out of their bodies)
    sc, train, val = clocks(), object(), object()
    for _epoch in range(3):
        for _ in run(sc, train, 6):
            time.sleep(0.002)  # the training step's work
        now = time.perf_counter()
        sc.on_iter(val, now, now)
        for _ in range(2):
            sc.on_next(val, lambda: 0)
    end = time.perf_counter()
    cv, ct = sc.clock(val), sc.clock(train)
    passes = cv.steps_view(end, []).passes
    assert len(passes) == 3 and len(cv.pass_ends) == 2
    assert all(b0 <= a1 for (_, b0), (a1, _) in itertools.pairwise(passes))  # no overlap
    bodies = ct.steps_view(end, [(tid, a, b) for tid in cv.tids for a, b in passes]).bodies
    assert sum(bodies) >= 0.7 * 18 * 0.002


def test_a_loader_iterated_only_under_no_grad_is_evaluation_even_with_more_steps() -> None:
    import torch

    # validation with batch_size=1 after each epoch: 20 steps against training's 5
    sc, train, val = clocks(steps=30), object(), object()
    for _epoch in range(3):
        for _ in run(sc, train, 5):
            pass
        with torch.no_grad():
            for _ in run(sc, val, 20):  # 60 steps in all: --steps 30 must not end here
                pass
    assert sc.training() is sc.clock(train) and sc.clock(val).steps == 60
    # an inference run: its only loader is the one judged, and --steps counts it
    sc, only = clocks(steps=3), object()
    with torch.inference_mode(), pytest.raises(Limit):
        for _ in run(sc, only, 10):
            pass
    assert sc.training() is sc.clock(only)


def test_the_loader_whose_steps_feed_an_optimizer_is_the_training_one() -> None:
    import torch

    # the tutorial's phases: `for phase in ("train", "val")`, autograd switched inside
    # the loop, so both loaders' passes begin with it on; validation has more steps
    sc, train, val = clocks(), object(), object()
    for _epoch in range(2):
        for _ in run(sc, train, 4):
            sc.on_optimizer_step()
        for _ in run(sc, val, 10):
            pass
    assert sc.training() is sc.clock(train) and not sc.clock(val).trained
    # validation run inside a step before its update: the update is the open pass's
    sc, train, val = clocks(), object(), object()
    for k in run(sc, train, 6):
        if k % 3 == 0:
            for _ in run(sc, val, 8):
                pass
        sc.on_optimizer_step()
    assert sc.clock(train).trained and not sc.clock(val).trained
    # a producer thread consumes the loader, the main thread steps the optimizer (after a
    # one-batch warm-up from another loader): the thread that never stepped one is not
    # evaluation for it, and its loader, with the most steps, is the training one
    sc, warm, fed = clocks(), object(), object()
    now = time.perf_counter()
    sc.on_iter(warm, now, now)
    sc.on_next(warm, lambda: 0)
    sc.on_optimizer_step()

    def produce() -> None:
        for _ in run(sc, fed, 12):
            pass

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join()
    for _ in range(12):
        sc.on_optimizer_step()
    assert sc.clock(warm).trained and not sc.evaluation(sc.clock(fed))
    assert sc.training() is sc.clock(fed)
    # with hooks installed, a real optimizer step reaches the clocks
    from feedline.observe._torch_hooks import CopyLog, HookTargets, TorchHooks

    seen: list[int] = []
    hooks = TorchHooks(HookTargets(Recorder(), CopyLog(), lambda o, f: f(), lambda *a: None,
                                   lambda o: "L", lambda: None,
                                   optimizer_step=lambda: seen.append(1)))
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1)
    with hooks.installed():
        p.grad = torch.ones(2)
        opt.step()
    opt.step()  # uninstalled: no longer seen
    assert seen == [1]


def test_a_backward_pass_is_an_update_for_a_hand_written_optimizer() -> None:
    import torch

    from feedline.observe._torch_hooks import CopyLog, HookTargets, TorchHooks

    # `p.data -= lr * p.grad`, no torch.optim; validation after each epoch with autograd
    # on and more steps: the loader whose steps run backward is the training one
    sc, train, val = clocks(), object(), object()
    w = torch.zeros(3, requires_grad=True)
    hooks = TorchHooks(HookTargets(Recorder(), CopyLog(), lambda o, f: f(), lambda *a: None,
                                   lambda o: "L", lambda: None,
                                   backward=sc.on_backward))
    with hooks.installed():
        (w * 2).sum().backward()  # a warm-up before any step tells nothing
        assert not sc.opt_tids
        for _epoch in range(2):
            for _ in run(sc, train, 4):
                (w * 2).sum().backward()
                w.data -= 0.1 * w.grad
                w.grad = None
            for _ in run(sc, val, 10):
                float((w * 3).sum().detach())  # a graph built, no backward
        assert sc.training() is sc.clock(train) and sc.evaluation(sc.clock(val))
        # the functional form is an update too
        for _ in run(sc, val, 1):
            torch.autograd.grad((w * 2).sum(), [w])
    assert sc.clock(val).trained
    (w * 2).sum().backward()  # uninstalled: torch's own functions again
    assert torch.autograd.backward.__module__ == "torch.autograd"


def test_a_loader_drawn_once_per_k_steps_of_another_is_taken_in_turn() -> None:
    from feedline.observe._clock import lockstep

    # a GAN: two discriminator draws of the images per generator draw of the labels
    sc, images, labels = clocks(), object(), object()
    label_steps = run(sc, labels, 20)
    for k in run(sc, images, 40):
        if k % 2 == 1:
            next(label_steps)
    assert lockstep(sc.clock(images), sc.clock(labels))
    assert lockstep(sc.clock(labels), sc.clock(images))
    # one validation batch every 10 steps is evaluation, not training data taken in turn
    sc, train, val = clocks(), object(), object()
    val_steps = run(sc, val, 4)
    for k in run(sc, train, 40):
        if k % 10 == 9:
            next(val_steps)
    assert not lockstep(sc.clock(train), sc.clock(val))


class AutoLoader:
    """A feedline-Loader-like object with worker_type="auto" that moves to processes."""

    def __init__(self) -> None:
        self.workers, self.worker_type, self.prefetch = 2, "auto", 2
        self.worker_kind = "thread"


def test_an_auto_loader_reports_the_kind_it_runs_now_and_stays_one_data_path() -> None:
    sc, built = clocks(), []
    for _ in range(2):
        loader = AutoLoader()  # rebuilt each epoch at one place
        built.append(loader)
        for step in run(sc, loader, 4):
            if step == 1:
                loader.worker_kind = "process"  # auto decided after a few batches
    first = sc.clock(built[0])
    assert first.config["worker_type"] == "auto" and first.config["worker_kind"] == "process"
    assert sc.find(built[1]) is first and first.config["instances"] == 2


def test_draws_between_two_updates_are_one_step_and_several_updates_a_draw_are_not() -> None:
    from feedline.observe._clock import group_draws

    def loop(draws: int, updates: int) -> tuple[int, int]:
        sc, loader = clocks(), object()
        now = time.perf_counter()
        sc.on_iter(loader, now, now)
        for step in range(12):
            for d in range(draws):
                sc.on_next(loader, lambda d=d: d)
            for _ in range(updates):  # LBFGS's closure, data echoing: several updates
                sc.on_optimizer_step()
            del step
        c = sc.clock(loader)
        view = c.steps_view(time.perf_counter(), [])
        grouped, firsts = group_draws(view, sc.updates_of(c))
        assert sum(grouped.waits) == pytest.approx(sum(view.waits))
        assert firsts[0] == 0 and grouped.starts == [view.starts[i] for i in firsts]
        return c.steps, len(grouped.starts)

    assert loop(16, 1) == (192, 12)  # samples stacked by hand: 16 next() a step
    assert loop(2, 1) == (24, 12)  # a support and a query batch, a mixup partner
    assert loop(1, 1) == (12, 12)
    assert loop(1, 4) == (12, 12)


def test_a_session_counts_steps_of_two_batches_and_live_iterators_workers() -> None:
    """Real DataLoaders and a real optimizer: two next() per update are one step; two
    iterators of one loader alive at once run twice its num_workers."""
    import torch
    from obsdata import Slow
    from torch.utils.data import DataLoader

    from feedline.observe._session import Session

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    session = Session("pairs", "cpu").start()
    try:
        loader = DataLoader(Slow(n=48), batch_size=4, num_workers=1)
        partner = iter(loader)
        for x in loader:  # 12 steps, each with a partner batch
            x2 = next(partner)
            loss = model(x + x2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        session.stop()
    rep = session.report()
    assert rep.steps == 11  # 12 steps less the warm-up, not 23 draws
    assert rep.loader["draws_per_step"] == 2.0 and rep.loader["live_iterators"] == 2
    assert rep.analysis["workers"] == 2


@pytest.mark.parametrize(("draws", "updates"), [(4, 1), (1, 1), (1, 3)])
def test_steps_n_counts_steps_of_several_draws_and_ends_between_them(draws: int,
                                                                     updates: int) -> None:
    sc, loader = clocks(steps=5), object()
    now = time.perf_counter()
    sc.on_iter(loader, now, now)
    taken = 0
    with pytest.raises(Limit):
        while True:
            for d in range(draws):
                sc.on_next(loader, lambda d=d: d)
                taken += 1
            for _ in range(updates):
                sc.on_optimizer_step()
    assert taken == 5 * draws  # five whole steps, then the run ends at the sixth's first draw


def test_no_grad_passes_of_the_training_loader_inside_its_own_pass_are_their_own_loader() -> None:
    """Real DataLoader, real optimizer: every 4 steps two batches of the SAME loader under
    no_grad (a quick evaluation on training batches) are not training steps; they are a
    loader line of their own, nested in the training one. A partner iterator made with
    autograd on (mixup) stays training data (the session test above)."""
    import torch
    from obsdata import Slow
    from torch.utils.data import DataLoader

    from feedline.observe._session import Session

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    session = Session("nested", "cpu").start()
    try:
        loader = DataLoader(Slow(n=48), batch_size=4, num_workers=0)
        for k, x in enumerate(loader, 1):  # 12 training steps
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if k % 4 == 0:
                with torch.no_grad():
                    for j, xv in enumerate(loader):
                        model(xv)
                        if j == 1:
                            break
    finally:
        session.stop()
    rep = session.report()
    assert rep.steps == 11  # 12 training steps less the warm-up, not 17 draws
    (ev,) = rep.loaders
    assert ev["steps"] == 6 and ev["passes"] == 3 and ev["role"] == "other"
    assert ev["config"]["nested_in"] == rep.loader["label"]
    assert ev["config"]["type"] == "DataLoader"


@pytest.mark.timeout(60)
def test_a_resumed_loader_over_the_same_dataset_continues_and_update_bn_is_not_training() -> None:
    """Real DataLoaders, real optimizer: a run resumed mid-epoch through a loader whose
    batch sampler skips the batches already trained on, then the ordinary loader over the
    SAME dataset object, is one training loader (the later one's settings); a k-fold-like
    loader over another object stays its own; a no_grad pass over the training loader
    after training (``swa_utils.update_bn``) is its own line, not training steps."""
    import torch
    from obsdata import Slow
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from feedline.observe._session import Session

    class Skip(torch.utils.data.Sampler):
        def __init__(self, batches: BatchSampler, skip: int) -> None:
            self.batches, self.skip = batches, skip

        def __iter__(self) -> Iterator[list[int]]:
            return itertools.islice(iter(self.batches), self.skip, None)

    def train(loader: DataLoader) -> None:
        for x in loader:
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Slow(n=40)
    session = Session("resumed", "cpu").start()
    try:
        fresh = DataLoader(data, batch_size=4, shuffle=True)
        train(DataLoader(data, batch_sampler=Skip(BatchSampler(SequentialSampler(data), 4,
                                                               False), 6)))  # 4 batches
        train(fresh)  # 10 batches
        with torch.no_grad():
            for x in fresh:  # update_bn's forward-only pass
                model(x)
        with torch.no_grad():  # a loader over another object: its own line
            for x in DataLoader(Slow(n=8), batch_size=4):
                model(x)
    finally:
        session.stop()
    rep = session.report()
    assert rep.steps == 13 and rep.loader["continues"] == 1  # 14 less the warm-up
    assert rep.loader.get("shuffle") is True  # the loader the run goes on with
    after, other = sorted(rep.loaders, key=lambda o: o["steps"], reverse=True)
    assert after["steps"] == 10 and after["role"] == "other"
    assert after["config"]["nested_in"] == rep.loader["label"] and after["config"]["after_training"]
    assert other["steps"] == 2 and "nested_in" not in other["config"]
    from feedline.observe._export import render_text

    text = " ".join(render_text(rep).split())
    assert "1 later DataLoader(s) over the same dataset object" in text
    assert "no_grad passes of loader-1 after its training passes" in text


def test_an_iterator_dropped_mid_pass_shuts_its_workers_down_in_the_wait_not_the_step() -> None:
    """``it = iter(loader)`` again every few steps: the new iterator is made before the old
    one is dropped, and the old one's worker shutdown (it joins a worker busy on a
    150 ms item) runs in the loop, outside any ``next()``. Both are data time: the step
    bodies stay near zero, and the two iterators are not counted as alive at once."""
    import torch
    from obsdata import Slow
    from torch.utils.data import DataLoader

    from feedline.observe._session import Session

    torch.set_num_threads(1)
    session = Session("reiter", "cpu").start()
    swaps: list[float] = []
    try:
        loader = DataLoader(Slow(sleep=0.15, n=64), batch_size=1, num_workers=1)
        it = iter(loader)
        for _ in range(3):
            next(it)
            next(it)
            t0 = time.perf_counter()
            it = iter(loader)  # the old iterator is dropped here, its worker mid-item
            swaps.append(time.perf_counter() - t0)
        next(it)
        del it
    finally:
        session.stop()
    rep = session.report()
    assert rep.steps == 6 and min(swaps) > 0.05  # each swap waited for a worker to exit
    assert rep.stages["step"].total < 0.2 * sum(swaps)
    assert "live_iterators" not in rep.loader


@pytest.mark.timeout(30)
def test_an_iterator_made_before_the_loop_and_stepped_inside_it_is_not_chosen_for_time() -> None:
    # it = iter(inner); (5 ms of set-up); for batch in outer: next(it) ... — both step 7 times:
    # the outer loader's pass lies inside the inner one's open pass, so its own time is ~0 and
    # any gap before the loop would make the inner one "take more than twice as long"
    sc, outer, inner = clocks(), object(), object()
    now = time.perf_counter()
    sc.on_iter(inner, now, now)
    time.sleep(0.005)  # the script's set-up between iter(inner) and the loop: a span, not a sync
    now = time.perf_counter()
    sc.on_iter(outer, now, now)
    for i in range(7):
        sc.on_next(outer, lambda i=i: i)
        sc.on_next(inner, lambda i=i: i)
    assert sc.clock(outer).steps == sc.clock(inner).steps == 7
    assert sc.training() is sc.clock(outer) and not sc.chosen_for_time(sc.clock(inner))


@pytest.mark.timeout(60)
def test_a_loader_is_measured_through_the_hook_it_publishes_not_patched() -> None:
    """A Session subscribes to feedline.Loader's published step hook: no attribute of the
    Loader or of its pass is replaced, and the hook is gone after the session."""
    import feedline
    from feedline.observe._session import Session
    from feedline.pipeline.iteration import Pass

    def attrs() -> list[dict[str, Any]]:
        return [dict(vars(cls)) for cls in (feedline.Loader, Pass)]

    before = attrs()
    session = Session("hook", "cpu")
    with feedline.Loader(_Items(32), batch_size=4, workers=1, shuffle=False,
                         worker_type="thread") as loader:
        session.start()
        try:
            assert spans.step_hook() == session.clocks.on_next
            assert attrs() == before
            n = sum(1 for _ in loader)
        finally:
            session.stop()
    assert spans.step_hook() is None and attrs() == before
    (clock,) = session.clocks.clocks.values()
    assert n == 8 and clock.steps == 8


@pytest.mark.timeout(60)
def test_a_device_known_only_once_torch_loads_moves_the_sampler_and_replay() -> None:
    """``feedline diagnose`` starts its session before the script imports torch; "auto"
    is resolved then, and a GPU found moves the host sampler (NVML) and the replay to it."""
    from feedline.observe._session import Session

    session = Session("late", "cpu", steps=4, ab=True, host_interval=0.05)
    session.start()
    try:
        first = session.sampler
        session._use_device("cuda:1")
        assert (session.device, session.device_type) == ("cuda:1", "cuda")
        assert session.sampler is not first and session.sampler.gpu_index == 1
        assert session.sampler._thread is not None and session.sampler._thread.is_alive()
        assert first._thread is not None and not first._thread.is_alive()
        assert session.replay is not None and session.replay.device_type == "cuda"
    finally:
        session.stop()
    assert not session.sampler._thread.is_alive()
