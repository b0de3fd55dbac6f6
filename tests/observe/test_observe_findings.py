from __future__ import annotations

from feedline.observe.findings import RunFacts, detect, recommended_workers, shm_free_bytes


def facts(**kw: object) -> RunFacts:
    base: dict[str, object] = dict(device_type="cuda", verdict="compute-bound", stall_fraction=0.02,
                                   gpu_utilisation=0.95, step_p50=0.05, wait_p50=0.001,
                                   wait_p99=0.002, cores=16, gpus=1, workers_rec=4)
    base.update(kw)
    return RunFacts(**base)  # type: ignore[arg-type]


def codes(f: RunFacts) -> set[str]:
    return {x.code for x in detect(f)}


def test_healthy_run_has_no_findings() -> None:
    assert codes(facts(loader={"num_workers": 4, "pin_memory": True, "batch_size": 32},
                       copies={"count": 10, "pinned": 10, "non_blocking": 10})) == set()


def test_num_workers_zero_names_the_fix_in_dataloader_terms() -> None:
    found = detect(facts(verdict="data-bound", stall_fraction=0.8,
                         loader={"num_workers": 0, "batch_size": 64}))
    f = next(x for x in found if x.code == "num-workers-zero")
    assert f.severity == "high"
    assert f.fix.startswith("use DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True, "
                            "persistent_workers=True)")
    assert "feedline.Loader" in f.fix


def test_workers_above_cores_and_above_rule() -> None:
    assert "workers-above-cores" in codes(facts(loader={"num_workers": 32}, cores=16))
    got = codes(facts(loader={"num_workers": 12}, cores=16, gpus=1))
    assert "workers-above-rule" in got  # min(16/1, 8) = 8
    assert "workers-above-rule" in codes(facts(loader={"num_workers": 4}, cores=16, gpus=8))
    assert not codes(facts(loader={"num_workers": 2}, cores=16, gpus=8))


def test_pinned_without_non_blocking_and_pageable_copies() -> None:
    got = codes(facts(loader={"num_workers": 4, "pin_memory": True},
                      copies={"count": 5, "pinned": 5, "blocking_from_pinned": 5}))
    assert "pinned-blocking-copy" in got and "pageable-copy" not in got
    got = codes(facts(loader={"num_workers": 4, "pin_memory": False},
                      copies={"count": 5, "pageable": 5}))
    assert got == {"pageable-copy"}


def test_shm_too_small_for_prefetch() -> None:
    loader = {"num_workers": 8, "prefetch_factor": 4}
    assert "shm-too-small" in codes(facts(loader=loader, batch_bytes=64 << 20, shm_free=1 << 30))
    assert "shm-too-small" not in codes(facts(loader=loader, batch_bytes=16 << 20, shm_free=1 << 30))


def test_pinned_growth_only_when_it_never_levels_off() -> None:
    growing = [float(i) * (100 << 20) for i in range(1, 12)]
    assert "pinned-growth" in codes(facts(pinned_series=growing))
    flat = [float(400 << 20)] * 11
    assert "pinned-growth" not in codes(facts(pinned_series=flat))


def test_idle_device_and_tail_stalls() -> None:
    assert "device-idle-waiting" in codes(facts(gpu_utilisation=0.3, stall_fraction=0.6))
    tail = codes(facts(step_p50=0.02, wait_p50=0.001, wait_p99=0.08))
    assert "tail-stalls" in tail
    assert "tail-stalls" not in codes(facts(step_p50=0.02, wait_p50=0.015, wait_p99=0.03))


def _fix(f: RunFacts, code: str) -> str:
    return next(x.fix for x in detect(f) if x.code == code)


def test_prefetch_advice_never_repeats_the_depth_already_set() -> None:
    dl = {"num_workers": 2, "prefetch_factor": 2}
    deep = _fix(facts(step_p50=0.02, wait_p50=0.001, wait_p99=0.08, fetch_p99=0.2, loader=dl),
                "tail-stalls")
    assert "prefetch_factor=6" in deep  # ceil(0.2 / 0.02) = 10 batches over 2 workers, + 1
    covered = _fix(facts(step_p50=0.02, wait_p50=0.001, wait_p99=0.08, fetch_p99=0.03,
                         loader=dl | {"prefetch_factor": 4}), "tail-stalls")
    assert "already covers" in covered and "prefetch_factor=4" in covered
    mine = _fix(facts(step_p50=0.02, wait_p50=0.001, wait_p99=0.08, fetch_p99=0.03,
                      loader={"num_workers": 2, "feedline": True, "prefetch": 8}), "tail-stalls")
    assert "already covers" in mine and "prefetch=8" in mine


def test_epoch_restarts_only_for_dataloaders_that_restart_their_workers() -> None:
    restarts = dict(step_p50=0.02, wait_p50=0.001, wait_p99=0.002, epoch_start_wait=0.25,
                    epoch_starts=3)
    assert "epoch-restarts" in codes(facts(loader={"num_workers": 2}, **restarts))
    assert "epoch-restarts" not in codes(facts(loader={"num_workers": 2, "persistent_workers": True},
                                               **restarts))
    assert "epoch-restarts" not in codes(facts(loader={"num_workers": 0}, **restarts))
    assert "epoch-restarts" not in codes(facts(loader={"num_workers": 2, "feedline": True},
                                               **restarts))


def test_findings_sorted_by_severity() -> None:
    found = detect(facts(verdict="data-bound", stall_fraction=0.5, gpu_utilisation=0.4,
                         loader={"num_workers": 0}, copies={"count": 3, "pageable": 3}))
    order = [f.severity for f in found]
    assert order == sorted(order, key=["high", "warning", "info"].index)


def test_recommended_workers_rule() -> None:
    assert recommended_workers(16, 1) == 8
    assert recommended_workers(16, 8) == 2
    assert recommended_workers(2, 1) == 2
    assert recommended_workers(1, 4) == 1


def test_shm_free_bytes_reads_dev_shm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert shm_free_bytes(str(tmp_path / "missing")) is None
    assert (shm_free_bytes(str(tmp_path)) or 0) > 0


def test_host_contention_is_named_separately() -> None:
    assert "host-contention" in codes(facts(contention=0.2))
    assert "host-contention" not in codes(facts(contention=0.01))


def test_decode_binding_with_a_gpu_decoder_recommends_gpu_decode_with_the_model_gain() -> None:
    f = facts(verdict="data-bound", stall_fraction=0.6, binding="decode", gpu_decoder="torchvision",
              decode_gain=(0.040, 0.010), loader={"feedline": True, "num_workers": 4})
    found = next(x for x in detect(f) if x.code == "decode-on-gpu")
    assert found.severity == "high" and "4.00x" in found.message and "decode_on" in found.fix
    # no library, another binding stage, or no gain in the model: nothing said
    assert "decode-on-gpu" not in codes(facts(binding="decode", decode_gain=(0.04, 0.01)))
    assert "decode-on-gpu" not in codes(facts(binding="read", gpu_decoder="torchvision",
                                              decode_gain=(0.04, 0.04)))
    assert "decode-on-gpu" not in codes(facts(device_type="cpu", binding="decode",
                                              gpu_decoder="torchvision", decode_gain=(0.04, 0.01)))


def test_workers_off_the_gpus_node_are_a_finding() -> None:
    node1 = {"cpus": [4, 5, 6, 7], "node": 1, "gpu": "0000:b1:00.0", "reason": "x"}
    dl = detect(facts(placement=node1, loader={"num_workers": 4}))
    f = next(x for x in dl if x.code == "workers-off-gpu-node")
    assert "numactl --cpunodebind=1" in f.fix and "4-7" in f.fix
    ours = detect(facts(placement=node1, loader={"feedline": True, "num_workers": 4,
                                                 "placement": "none"}))
    assert 'placement="auto"' in next(x for x in ours if x.code == "workers-off-gpu-node").fix
    # a Loader that places (the default), a single-node host, or a CPU run: nothing to say
    assert "workers-off-gpu-node" not in codes(facts(placement=node1, loader={"feedline": True}))
    assert "workers-off-gpu-node" not in codes(facts(placement={"cpus": None, "node": None}))
    assert "workers-off-gpu-node" not in codes(facts(device_type="cpu", placement=node1))
    # a process already confined to the node (numactl --cpunodebind=1): its workers inherit it
    confined = {**node1, "process_on_node": True, "process_off_node": False}
    assert "workers-off-gpu-node" not in codes(facts(placement=confined, loader={"num_workers": 4}))
    # confined to the other node (a cpuset, numactl on the wrong node): even feedline's Loader
    # cannot place there (plan_placement: no CPU of node 1 allowed, cpus None); said either way
    far = {"cpus": None, "node": 1, "gpu": "0000:b1:00.0", "reason": "none of node 1's CPUs",
           "process_cpus": [0, 1, 2, 3], "node_cpus": [4, 5, 6, 7], "process_on_node": False,
           "process_off_node": True}
    for loader in ({"num_workers": 4}, {"feedline": True, "num_workers": 4}):
        off = next(x for x in detect(facts(placement=far, loader=loader)) if x.code == "workers-off-gpu-node")
        assert "CPUs 0-3, none of them on node 1" in off.message and "--cpunodebind=1" in off.fix
        assert "4-7" in off.fix


def test_passes_that_wait_differently_are_told_apart_and_are_not_a_tail() -> None:
    # the first epoch reads from storage, later ones from a cache: a third of the waits
    # are long, which is no "few slow batches"
    cached = facts(device_type="cpu", verdict="data-bound", stall_fraction=0.6, step_p50=0.01,
                   wait_p50=0.0005, wait_p99=0.05, pass_stalls=[0.83, 0.04, 0.04])
    found = {x.code: x for x in detect(cached)}
    assert "tail-stalls" not in found
    msg = found["passes-differ"].message
    assert "first pass" in msg and "83%" in msg and "compute-bound" in msg
    slower = facts(pass_stalls=[0.05, 0.06, 0.7])
    assert "stall by pass: 1: 5%, 2: 6%, 3: 70%" in next(
        x for x in detect(slower) if x.code == "passes-differ").message
    assert "passes-differ" not in codes(facts(pass_stalls=[0.5, 0.3, 0.4]))


def test_more_workers_for_an_iterable_dataset_say_how_to_split_its_stream() -> None:
    from feedline.observe.findings import loader_call

    one = {"num_workers": 1, "batch_size": 8, "iterable": True}
    assert "get_worker_info()" in loader_call(one, 4, False)
    assert "get_worker_info()" not in loader_call(one | {"num_workers": 2}, 4, False)  # split already
    assert "get_worker_info()" not in loader_call(one | {"iterable": False}, 4, False)


def test_a_run_that_goes_on_without_its_loader_says_so() -> None:
    # itertools.cycle(loader): one pass of 8 steps measured (0.4 s), then 1.2 s of steps
    # on cached batches that no hook sees
    cycled = facts(device_type="cpu", step_p50=0.05, quiet=1.2, measured=0.4)
    (f,) = [x for x in detect(cycled) if x.code == "loader-went-quiet"]
    assert "1.2 s" in f.message and "75%" in f.message and "itertools.cycle" in f.message
    # a short save at the end of training is no such thing
    assert "loader-went-quiet" not in codes(facts(step_p50=0.05, quiet=0.3, measured=10.0))
    assert "loader-went-quiet" not in codes(facts(step_p50=0.05, quiet=0.5, measured=0.2))
