from __future__ import annotations

import json
import time
from html.parser import HTMLParser

import pytest
import torch
from torch.utils.data import DataLoader

import feedline
from feedline import spans
from feedline.observe import Report, render_text, write_trace
from feedline.observe.report_html import write_html


class Items(torch.utils.data.Dataset):
    def __init__(self, n: int = 48, sleep: float = 0.002) -> None:
        self.n, self.sleep = n, sleep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.sleep)
        return torch.ones(8), i


def run(loader: object, body: float, **kw: object) -> Report:
    w = feedline.watch(loader, **kw)  # type: ignore[arg-type]
    for _ in w:
        time.sleep(body)
    return w.report()


@pytest.mark.timeout(60)
def test_serial_dataloader_is_data_bound_and_measured_per_stage() -> None:
    rep = run(DataLoader(Items(), batch_size=4, num_workers=0), body=0.002, name="serial")
    assert rep.name == "serial" and rep.steps == 11  # 12 batches, first is warm-up
    assert rep.verdict == "data-bound" and rep.binding == "read"
    assert {"wait", "step", "fetch", "collate"} <= rep.stages.keys()
    assert rep.stages["wait"].p50 >= 0.007  # 4 samples x 2 ms
    assert rep.stall_fraction > 0.5
    assert rep.samples_per_s is not None and rep.samples_per_s > 0
    assert rep.loader["num_workers"] == 0 and rep.loader["batch_size"] == 4
    assert "num-workers-zero" in {f.code for f in rep.findings}
    assert rep.predicted_gain is not None and rep.predicted_gain > 1.3
    assert not spans.active()  # report() removed every hook


@pytest.mark.timeout(60)
def test_plain_generator_is_measured_by_the_wait() -> None:
    def gen():  # type: ignore[no-untyped-def]
        for i in range(12):
            time.sleep(0.0005)
            yield i

    rep = run(gen(), body=0.04)
    assert rep.verdict == "compute-bound" and rep.binding == "gpu"
    assert rep.analysis["stages_measured"] is False
    assert rep.stages["step"].p50 >= 0.039
    assert rep.gpu_utilisation is not None and rep.gpu_utilisation > 0.8


@pytest.mark.timeout(60)
def test_step_done_excludes_work_after_the_boundary() -> None:
    w = feedline.watch(range(12))
    for _ in w:
        time.sleep(0.004)
        w.step_done()
        time.sleep(0.030)  # after the boundary: neither wait nor step
    rep = w.report()
    # a loaded host stretches the 4 ms sleep, never to the 34 ms the step would be with
    # the work after the boundary in it
    assert 0.0035 < rep.stages["step"].p50 < 0.020
    assert rep.stages["wait"].p50 < 0.002


@pytest.mark.timeout(60)
def test_steps_limit_and_synthetic_batch_replay() -> None:
    seen: list[object] = []
    w = feedline.watch(DataLoader(Items(n=400, sleep=0.003), batch_size=4), steps=6, ab=True,
                       replay=5)
    for batch in w:
        seen.append(batch)
        time.sleep(0.003)
    rep = w.report()
    assert len(seen) == 6 + 5
    assert all(b is seen[5] for b in seen[6:])  # the last real batch, replayed
    assert rep.steps == 5  # measured steps only, warm-up excluded
    assert rep.ab is not None and rep.ab["steps"] == 4  # the first replay is warm-up
    # without the data path the step is the 3 ms body; with it, + 12 ms of reads
    assert rep.ab["ratio"] > 2.0
    assert rep.verdict == "data-bound"


def test_watch_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="steps"):
        feedline.watch([1], steps=0)
    with pytest.raises(ValueError, match="replay"):
        feedline.watch([1], replay=1)
    with pytest.raises(ValueError, match="ab=True needs steps"):
        feedline.watch([1], ab=True)
    with pytest.raises(TypeError, match="device"):
        feedline.watch([1], device=1.5)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.imgs.append(dict(attrs).get("src") or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.timeout(90)
def test_outputs_json_trace_html_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = run(DataLoader(Items(), batch_size=4, num_workers=0), body=0.002, name="before")
    b = run(DataLoader(Items(), batch_size=4, num_workers=2), body=0.002, name="after")
    again = Report.from_dict(json.loads(json.dumps(a.to_dict(include_spans=True))))
    assert again.to_dict() == a.to_dict() and len(again.spans) == len(a.spans)
    write_trace([a, b], tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert {"wait", "step", "fetch", "collate"} <= {e["name"] for e in xs}
    assert len({e["pid"] for e in xs}) >= 3  # two runs, worker processes of the second
    write_html([a, b], tmp_path / "r.html")
    p = _Tags()
    p.feed((tmp_path / "r.html").read_text())
    assert len(p.imgs) == 4 and all(s.startswith("data:image/png;base64,") for s in p.imgs)
    assert "before" in p.text and "after" in p.text
    text = render_text(a)
    assert "DATA-BOUND" in text and "p99" in text and "num-workers-zero" in text


def test_close_removes_hooks_when_the_loop_raises() -> None:
    import feedline
    from feedline import spans

    w = feedline.watch(range(5), name="boom")
    with pytest.raises(RuntimeError, match="boom"), w:
        for i in w:
            if i == 2:
                raise RuntimeError("boom")
    assert not spans.active()
    rep = w.report()  # still available after close
    assert rep.steps >= 1


@pytest.mark.timeout(90)
def test_the_text_says_compute_not_gpu_on_a_cpu_run() -> None:
    import feedline

    w = feedline.watch(range(12), name="cpu-run")  # batches that cost nothing to fetch
    with w:
        for _ in w:
            t = time.perf_counter() + 0.02  # a compute-bound step on the CPU
            while time.perf_counter() < t:
                pass
    rep = w.report()
    assert rep.device.startswith("cpu") and rep.binding == "gpu"  # the JSON keeps the stage's name
    text = render_text(rep)
    assert "(binding: compute)" in text and "(binding: gpu)" not in text


class SlowSampler(torch.utils.data.Sampler[int]):
    """Asks a slow index service for each index (a sleep): runs in the training process."""

    def __init__(self, n: int, sleep: float) -> None:
        self.n, self.sleep = n, sleep

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(self.n):
            time.sleep(self.sleep)
            yield i


@pytest.mark.timeout(60)
def test_a_slow_sampler_binds_in_the_training_process_not_in_the_workers() -> None:
    # 8 indices x 3 ms = 24 ms of sampling a batch in this process; the worker's items
    # cost nothing: more workers cannot help, the sampler has to get cheaper
    loader = DataLoader(Items(n=128, sleep=0.0), batch_size=8, num_workers=1,
                        sampler=SlowSampler(128, 0.003))
    rep = run(loader, body=0.002)
    assert rep.verdict == "data-bound" and rep.binding == "sampler"
    assert rep.stages["sampler"].p50 >= 0.02
    assert "SlowSampler(...)" in rep.recommendation and "__iter__" in rep.recommendation
    assert "num_workers=" not in rep.recommendation
    idle = next(f for f in rep.findings if f.code == "device-idle-waiting")
    assert idle.fix.startswith("make the sampler cheap")


class SlowAugment(torch.nn.Module):
    """A batch augmentation without weights (kornia-style), 10 ms a batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.010)
        return x.flip(-1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["before", "after"])
def test_work_on_the_batch_before_the_forward_is_data_time(where: str) -> None:
    # x = augment(x) on the training thread before model(x): data work the workers could
    # do, so the loop is data-bound on it; the same module after the forward is the step's
    loader = DataLoader(torch.utils.data.TensorDataset(torch.ones(96, 8)), batch_size=4)
    augment, model = SlowAugment(), torch.nn.Linear(8, 1)
    w = feedline.watch(loader)
    for (x,) in w:
        if where == "before":
            x = augment(x)
        model(x).sum().backward()
        if where == "after":
            augment(x)
        time.sleep(0.002)
    rep = w.report()
    if where == "before":
        assert rep.verdict == "data-bound" and rep.binding == "loop_transform"
        assert rep.stages["loop_transform"].p50 >= 0.009 and rep.stall_fraction > 0.6
        assert "move that work into the dataset's __getitem__" in rep.recommendation
    else:
        assert rep.verdict == "compute-bound" and rep.binding == "gpu"
        assert rep.stages["loop_transform"].p50 < 0.005


@pytest.mark.timeout(60)
def test_a_plain_torch_save_in_the_loop_is_the_checkpoint_stage() -> None:
    import io

    model = torch.nn.Linear(8, 1)
    w = feedline.watch(DataLoader(torch.utils.data.TensorDataset(torch.ones(64, 8)), batch_size=4))
    for step, (x,) in enumerate(w):
        model(x).sum().backward()
        if step % 4 == 3:
            torch.save(model.state_dict(), io.BytesIO())
    rep = w.report()
    assert rep.stages["checkpoint"].count == 4
    assert 0 < rep.stages["checkpoint"].p50 < 1.0
