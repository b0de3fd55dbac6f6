"""Training scripts written the way tutorials and users write them, run unchanged under
``feedline diagnose`` (tests/scenarios/scripts/u_*.py; no shared helpers, so they do not
share this suite's assumptions).

Each script's truth is fixed by construction (sleeps for storage latency, thread-CPU
spins for decode, a sleep-padded step) with margins that hold on a loaded two-core host:
a data-bound script's data path is at least four times its step, a compute-bound one's
at most a tenth. For each: the verdict, binding stage and stall are right, and the run
is the user's run: the same output (epochs, steps, batches per epoch) and exit status
as without diagnose, no ``--steps`` given. Round 3 (``w_*.py``) adds the ways trainers,
launchers and hurried researchers write loops (a Lightning-like or HF-like trainer class,
spawned ranks, a loader rebuilt every epoch, a RAM cache, a lying ``__len__``...). Round 4
(``x_*.py``) adds launchers and consumers none of those use (torchrun, a subprocess
launcher, thread-pool and asyncio consumers, the profiler, Ctrl-C, ``sys.exit`` and
``os._exit`` mid-run, a curriculum of loaders, GIL-bound item code in thread workers...).
Round 5 (``y_*.py``) adds loop styles none of those use (Keras ``steps_per_epoch`` and an
ignite-like engine whose iterators outlive epochs, two draws per step, tasks taken in
turn, a trainer thread, a weighted sampler, a bucketing batch sampler with a
length-dependent step, ``np.memmap`` and ``mmap`` datasets, tokenising collate in workers,
``prefetch_factor=1``, process-worker stragglers, the README's pack-then-Loader and
``feedline.wrap`` paths, a validation loader with more steps than training, under no_grad
or in the tutorial's train/val phases, a dataset decoding on its own thread pool...).
Round 6 (``z_*.py``) adds a hand-written update (``p.data -= lr * p.grad``, no
``torch.optim``) with a validation loader iterated under autograd, a generator stream
sharded by ``worker_init_fn``, ``DistributedSampler`` with world size 1 over
``ConcatDataset`` of ``Subset``s, ``pin_memory``/``non_blocking`` on a CPU host, a dataset
raising and catching its own errors, ``torch.set_num_threads`` changed mid-run, a step
that drifts from slow to fast, and a batch built from two ``next()`` calls. Round 7
(``v_*.py``) adds loops of other shapes: a GAN with two discriminator draws per generator
step (and a conditional one whose labels come from a second loader taken in turn), a
contrastive two-view transform, an RL loop with a replay buffer and no DataLoader,
``torch.save`` every few steps, rows read from SQLite, ready batches through
``batch_size=None``, a time-limited ``while`` loop, a package run with ``-m`` and through
``runpy`` from ``-c``, DDP ``no_sync()`` accumulation, and spawned persistent workers with
``prefetch_factor=1``. Round 8 (``t_*.py``) adds loops whose steps and batches do not
match one to one: LBFGS's closure (several backward passes a batch), data echoing (three
updates a batch), samples stacked by hand from ``batch_size=None`` (16 ``next()`` calls a
step), a mixup partner from a second live iterator of the same loader, k-fold loaders
rebuilt per fold, a batch-size finder's trial loaders, one slow rank under torchrun and
one slow shard of an ``IterableDataset``. Round 9 (``s_*.py``) adds loops whose parts sit
elsewhere: inference bound by writing its predictions (no optimizer), a quick no_grad
evaluation on the SAME loader nested in its own pass, a step that slows as a leak grows,
a slow ``Sampler`` (it runs in the training process, never in the workers), a home-made
trainer whose callback ends training by an exception, the step on an executor thread,
``torch.multiprocessing`` producers feeding a queue, and forked feedline process workers
on I/O. Round 10 (``r_*.py``) adds loops whose parts hide in other shapes: a
distillation step with a no_grad teacher forward, a training function under
``@torch.no_grad()`` that re-enables autograd for the step, ``torch.func.grad`` with no
optimizer and no ``backward()``, a dataset with ``__getitems__``, a short slow loader
restarted under a long one (``max_size_cycle``), ``iter(loader)`` again every 10 steps,
a ``deque`` replay buffer filled from a loader, corrupt samples dropped in ``collate_fn``
with empty batches skipped, and an external decoder run with ``subprocess.run``.
Round 11 (``q_*.py``) adds decoders that outlive a fetch (the dataset's own
``ProcessPoolExecutor`` with ``num_workers=0``, a ``subprocess.Popen`` pipe per worker
started in ``worker_init_fn``), shards of uneven size dealt by ``get_worker_info()``, an
HF-like trainer with accumulation, clipping and ``evaluate()`` every 5 updates, a
LightningModule-like model driven by a hand-written ``Trainer.fit``, spawned persistent
workers for training and validation, a token-budget ``batch_sampler`` (2 to 32 sequences
a batch), and ``feedline.Loader`` with the user's ``decode=`` in process workers and
``on_error="skip"``. Round 12 (``p_*.py``) adds kornia-style augmentation of the batch on
the training thread before ``model(x)`` (the ``loop_transform`` stage), two loaders zipped
(in-memory images, captions tokenised in Python), a step budget over a small loader
re-iterated on ``StopIteration``, a length curriculum that changes the dataset between
epochs, spawned persistent workers that open a slow connection in ``worker_init_fn``,
gradient checkpointing, ``torch.save`` every 8 steps (the ``checkpoint`` stage), and
``feedline.Loader`` thread workers whose ``decode=`` waits on a process pool it keeps.
Round 13 (``o_*.py``) adds ``feedline.Loader`` process workers whose ``decode=`` keeps a
``Popen`` decoder of its own, an HF-like trainer resumed mid-epoch (a lazily built loader
over a ``SkipBatchSampler``), Lightning's ``val_check_interval`` and
``limit_train_batches`` in a hand-written fit, torchrun ranks with forkserver persistent
workers and ``set_epoch``, an ``IterableDataset`` streaming JSON lines over HTTP from
127.0.0.1, ``torch.compile`` recompiling for a ragged last batch, two training sets taken
in turn by epoch (the quick one with more steps), and the docs' custom ``pin_memory()``
batch with ``pin_memory=True`` on a CPU host. Round 14 (``n_*.py``) adds DDP ``no_sync()``
accumulation under torchrun with one rank's data slow (reported by that rank, the other's
all-reduce wait said), an Accelerate-style ``prepare()`` whose ``DataLoaderShard`` runs
one batch ahead, an apex-style prefetcher iterating the loader on a side thread,
``tqdm(itertools.islice(loader, n))`` per epoch, HTTP GETs fanned out by a dataset's own
thread pool, SWA with ``update_bn``'s no_grad pass over the training loader, a run resumed
mid-epoch through a skipping loader then the ordinary one over the same dataset, and a
webdataset-style generator pipeline over tar shards. Round 15 (``ev11_*.py``) adds an
HF-Trainer-like class with ``TrainingArguments``, accumulation, a warmup schedule and
``evaluate()`` every 5 updates, and a Lightning-like ``FitLoop`` object whose
``on_advance_end`` validates through a slow ``collate_fn``.
The default suite runs a few of them;
``test_every_script_three_times`` (slow) runs all of them three times.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import feedline

SCRIPTS = Path(__file__).parent / "scripts"


@dataclass(frozen=True)
class Truth:
    verdict: str
    binding: str
    stall: tuple[float, float]
    stdout: str
    """What the script prints without diagnose (its run length: epochs, steps, batches)."""
    needs: str = ""
    """A module the script imports that is not a feedline dependency."""
    args: tuple[str, ...] = ()
    """The script's command-line arguments."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the script reads."""
    code: int = 0
    """The script's own exit status."""
    script: str = ""
    """The script's file name without ``.py`` when it is not the case's name."""
    launcher: tuple[str, ...] = ()
    """Interpreter arguments before the script (``-m torch.distributed.run ...``)."""
    program: tuple[str, ...] = ()
    """Interpreter arguments naming a program that is no script file (``-m pkg.module``,
    ``-c CODE``); in place of the launcher and the script."""


DATA = (0.3, 1.0)
COMPUTE = (0.0, 0.15)
TRUTH = {
    # IterableDataset sharded with get_worker_info(), 2 workers, 8 ms per record
    "u_iterable_shards": Truth("data-bound", "read", DATA,
                               "epoch 0: 20 batches\nepoch 1: 20 batches\n"),
    # batch_size=None over a BatchSampler: the dataset returns whole batches (CPU)
    "u_batch_sampler": Truth("data-bound", "decode", DATA, "batches 40\n"),
    # tqdm around the loader, gradient accumulation every 4 micro-batches
    "u_tqdm_accum": Truth("compute-bound", "gpu", COMPUTE,
                          "epoch 0 done: 40 micro-batches\nepoch 1 done: 40 micro-batches\n",
                          needs="tqdm"),
    # enumerate() with a break after 15 steps, 3 epochs, workers not persistent
    "u_enumerate_break": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: stopped at step 14\n" for e in range(3))),
    # next(iter(loader)) every step: workers start again at each step
    "u_next_iter": Truth("data-bound", "startup", DATA, "steps 30\n"),
    # random_split + Subset, CPU augmentation in 1 worker, no_grad validation per epoch
    "u_split_eval": Truth("data-bound", "decode", DATA,
                          "epoch 0: val batches 2\nepoch 1: val batches 2\n"),
    # dict batches of padded token ids, custom collate, forkserver worker
    "u_hf_collate": Truth("data-bound", "decode", DATA, "trained 40 steps\n"),
    # real socket reads from a 127.0.0.1 server, in-process, no __main__ guard
    "u_socket_reads": Truth("data-bound", "read", DATA, "samples 800\n"),
    # open() on 1280 small page-cached files, 2 workers, 40 ms step
    "u_small_files": Truth("compute-bound", "gpu", COMPUTE, "steps 40\n"),
    # real matmuls (no sleeps) on in-memory tensors, no __main__ guard
    "u_matmul": Truth("compute-bound", "gpu", (0.0, 0.1), "loss True\n"),
    # feedline.Loader, process worker, CPU transform
    "u_feedline_process": Truth("data-bound", "transform", DATA, "steps 50\n"),
    # zip(labelled, unlabelled): every step waits for both; the unlabelled one reads slowly
    "u_zip_loaders": Truth("data-bound", "read", DATA, "steps 30\n"),
    # the user's own generator, no DataLoader: nothing to hook, an honest unknown
    "u_generator": Truth("unknown", "unknown", (0.0, 0.0), "epoch 0\nepoch 1\n"),
    # JPEG files decoded, cropped and flipped with PIL in 1 worker
    "u_pil_images": Truth("data-bound", "decode", DATA,
                          "epoch 0: 8 batches\nepoch 1: 8 batches\n"),
    # no_grad evaluation every 15 steps over a second loader with its own workers
    "u_eval_inside": Truth("compute-bound", "gpu", COMPUTE,
                           "epoch 0: 45 steps\nepoch 1: 45 steps\n"),
    # -- round 3 (w_*.py)
    # LightningModule-like training_step driven by a hand-written Trainer class
    "w_lightning_trainer": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: global_step={20 * (e + 1)} val_batches=2\n" for e in range(2))),
    # HF Trainer lookalike: DataCollatorWithPadding-like class, 30 ms of CPU, in-process
    "w_hf_trainer": Truth("data-bound", "collate", DATA, "optimizer updates: 20\n"),
    # enumerate(dl, start=1), step % accum, non_blocking copies, pin_memory=True on a CPU
    "w_accelerate_accum": Truth("compute-bound", "gpu", COMPUTE, "micro-batches 30 updates 7\n"),
    # torch.compile: the first step compiles (warm-up, not a stall)
    "w_compile_warmup": Truth("compute-bound", "gpu", COMPUTE, "steps 40\n"),
    # a RAM cache in the dataset: epoch 0 read-bound, later epochs compute-bound
    "w_ram_cache": Truth("data-bound", "read", DATA,
                         "".join(f"epoch {e}: 12 batches\n" for e in range(3))),
    # an IterableDataset whose __len__ says 100 but streams 48
    "w_len_lies": Truth("data-bound", "read", DATA,
                        "epoch 0: 6 of 13 batches\nepoch 1: 6 of 13 batches\n"),
    # an endless sampler bounded by zip(range(max_iter), loader)
    "w_infinite_sampler": Truth("compute-bound", "gpu", COMPUTE, "iterations 60 islice ok 2\n"),
    # torch.multiprocessing.spawn: two gloo ranks, each its own DataLoader; the parent waits
    "w_mp_spawn": Truth("data-bound", "read", DATA, "rank 0 steps 20\ndone\n"),
    # a long status line printed every step
    "w_print_every_step": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"step {i:04d} | lr 1.00e-03 | batch (8, 10) | " + "#" * (i % 60) + "\n"
        for i in range(80)) + "finished 80\n"),
    # argparse + EPOCHS from the environment, sys.exit(3) at the end
    "w_argv_env_exit": Truth("data-bound", "read", DATA, "bs=8 epochs=2 steps=24\n",
                             args=("--batch-size", "8"), env=(("EPOCHS", "2"),), code=3),
    # a cycle() generator around a DataLoader, next(gen) per step
    "w_generator_over_loader": Truth("data-bound", "read", DATA, "steps 24\n"),
    # ConcatDataset of an in-memory and a slow remote dataset
    "w_concat_fast_slow": Truth("data-bound", "read", DATA,
                                "epoch 0: 10 batches\nepoch 1: 10 batches\n"),
    # worker_init_fn seeds and opens the file; CPU parsing of page-cached records
    "w_worker_init_files": Truth("data-bound", "decode", DATA, "batches 20\n"),
    # a sleep standing in for a slow GPU in the step, or for storage in the dataset
    "w_step_sleep_vs_data:step": Truth("compute-bound", "gpu", COMPUTE, "step 25\n",
                                       args=("step",), script="w_step_sleep_vs_data"),
    "w_step_sleep_vs_data:data": Truth("data-bound", "read", DATA, "data 25\n",
                                       args=("data",), script="w_step_sleep_vs_data"),
    # itertools.cycle(loader): one pass read from storage, then cached batches replayed
    "w_itertools_cycle": Truth("data-bound", "read", DATA, "steps 120\n"),
    # a multiprocessing.Process trainer started with fork; the parent only waits
    "w_process_fork": Truth("data-bound", "read", DATA, "trainer steps 20 exit 0\n"),
    # DataLoader(...) built anew inside the epoch loop: one data path, five instances
    "w_loader_per_epoch": Truth("data-bound", "read", DATA,
                                "".join(f"epoch {e}: 8 batches\n" for e in range(5))),
    # a DataLoader subclass whose __iter__ generator keeps one batch ahead (accelerate)
    "w_accelerate_shard": Truth("data-bound", "decode", DATA,
                                "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # -- round 4 (x_*.py)
    # torchrun: python -m torch.distributed.run --standalone --nproc-per-node 2, gloo + DDP
    "x_torchrun": Truth("data-bound", "read", DATA, "rank 0/2 steps 20\n",
                        launcher=("-m", "torch.distributed.run", "--standalone",
                                  "--nproc-per-node", "2")),
    # urllib GETs from an HTTP server on 127.0.0.1, 6 workers on 2 cores (I/O)
    "x_http_workers": Truth("data-bound", "read", DATA, "samples 640\n"),
    # torch.autocast("cpu", bfloat16) steps, clipping; an in-memory TensorDataset
    "x_autocast_cpu": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 15 steps, bf16 True\n" for e in range(3))),
    # torch.profiler.profile(schedule=...) around the loop, prof.step() per batch
    "x_profiler": Truth("data-bound", "read", DATA, "steps 30 trace True\n"),
    # default_collate of dicts holding strings, lists and a nested dict; CPU parsing
    "x_dict_strings": Truth("data-bound", "decode", DATA, "".join(
        f"epoch {e}: 12 batches, first id rec-00088\n" for e in range(2))),
    # except KeyboardInterrupt: save and return; SIGINT after 25 steps, 2 workers
    "x_keyboard_interrupt": Truth("data-bound", "read", DATA,
                                  "interrupted at step 25, saved True\n"),
    # sys.exit(3) inside the loop of the second epoch, persistent workers alive
    "x_exit_mid_epoch": Truth("data-bound", "read", DATA,
                              "epoch 0: 16 batches\nearly stop: epoch 1 batch 8 total 25\n",
                              code=3),
    # ThreadPoolExecutor(1).submit(next, it, None): the loader advanced on a pool thread
    "x_threadpool_prefetch": Truth("data-bound", "read", DATA,
                                   "epoch 0: 15 batches\nepoch 1: 15 batches\n"),
    # asyncio: run_in_executor(None, next, it) on varying threads, awaited 25 ms step
    "x_asyncio": Truth("compute-bound", "gpu", COMPUTE, "steps 40\n"),
    # a two-stage curriculum: a second training loader from epoch 2
    "x_curriculum": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e} stage {e // 2}: 10 batches\n" for e in range(4))),
    # feedline.Loader, 4 thread workers, numpy + PIL in __getitem__ holding the GIL
    "x_feedline_threads_gil": Truth("data-bound", "decode", DATA, "steps 40\n"),
    # the script re-runs itself with subprocess.run: the trainer is a fresh interpreter
    "x_subprocess_launcher": Truth("data-bound", "decode", DATA,
                                   "child steps 24\nlauncher: child exit 0\n"),
    # inference only: inference_mode, multiprocessing_context="spawn", 2 workers
    "x_spawn_inference": Truth("data-bound", "decode", DATA, "predictions 320\n"),
    # no DataLoader: a multiprocessing.Process producer and an mp.Queue
    "x_mp_queue_producer": Truth("unknown", "unknown", (0.0, 0.0),
                                 "steps 30 producer exit 0\n"),
    # apex's data_prefetcher class: next() hands out a batch and preloads the next
    "x_apex_prefetcher": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 20 iterations\n" for e in range(3))),
    # an uncaught Ctrl-C after 20 steps: KeyboardInterrupt, then death by SIGINT (130)
    "x_ctrl_c_uncaught": Truth("data-bound", "read", DATA, "steps 20\n", code=130),
    # os._exit(0) after training: no atexit, no finalizers
    "x_os_exit": Truth("data-bound", "read", DATA, "steps 24\n"),
    # 1.5 s of pure-Python preprocessing before any loader, then an in-memory loader
    "x_preprocess_then_train": Truth("compute-bound", "gpu", COMPUTE,
                                     "epoch 0: 20 steps\nepoch 1: 20 steps\n"),
    # DataLoader(in_order=False): batches out of order, every 4th sample slow
    "x_in_order_false": Truth("data-bound", "read", DATA, "steps 60 all samples True\n"),
    # itertools.chain(clean, noisy) each epoch: an in-memory loader, then a slow one
    "x_chain_loaders": Truth("data-bound", "read", DATA,
                             "epoch 0: 20 steps\nepoch 1: 20 steps\n"),
    # -- round 5 (y_*.py)
    # Keras model.fit(steps_per_epoch=15): the iterator carries across epochs, re-made at its end
    "y_keras_fit": Truth("data-bound", "read", DATA, "".join(
        f"Epoch {e + 1}/3 - 15 steps - passes {e + 1}\n" for e in range(3))),
    # episodic training: two draws (support, query) from one iterator per step
    "y_two_batches_per_step": Truth("data-bound", "read", DATA, "steps 25 batches 50 passes 3\n"),
    # np.memmap dataset, for x, y in map(partial(to_device), loader), 2 persistent workers
    "y_memmap_map": Truth("compute-bound", "gpu", COMPUTE,
                          "epoch 0: 16 batches\nepoch 1: 16 batches\n"),
    # WeightedRandomSampler draws the rare class, whose records are the slow ones
    "y_weighted_sampler": Truth("data-bound", "read", DATA,
                                "epoch 0: 20 batches\nepoch 1: 20 batches\n"),
    # a length-bucketing batch_sampler; the step's time grows with the padded length
    "y_bucket_variable_step": Truth("compute-bound", "gpu", COMPUTE,
                                    "steps 30 padded positions 42400\n"),
    # DataLoader(num_workers=4, prefetch_factor=1, persistent_workers=True), far ahead
    "y_prefetch_one": Truth("compute-bound", "gpu", COMPUTE, "steps 40\n"),
    # feedline.Loader, 2 process workers, 1 sample in 50 waits 100 ms
    "y_feedline_straggler": Truth("data-bound", "read", DATA, "steps 60\n"),
    # for x, y in feedline.wrap(DataLoader(...)), as the README shows
    "y_wrap_dataloader": Truth("data-bound", "read", DATA,
                               "epoch 0: 15 batches\nepoch 1: 15 batches\n"),
    # the README's path: feedline pack (a subprocess), then feedline.Loader over the shards
    "y_readme_shards": Truth("compute-bound", "gpu", COMPUTE,
                             "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # an ignite-like Engine: epoch_length=8 over a 12-batch loader, an evaluator per epoch
    "y_engine_events": Truth("data-bound", "decode", DATA, "".join(
        f"epoch {e}: iteration {8 * e}, val batches 2\n" for e in range(1, 4))
        + "logged at [5, 10, 15, 20]\n"),
    # the whole loop in a threading.Thread; the main thread polls it
    "y_trainer_thread": Truth("data-bound", "read", DATA,
                              "trainer done: 30 steps, epochs [15, 15], polled True\n"),
    # three task loaders taken in turn; one reads slowly
    "y_round_robin_tasks": Truth("data-bound", "read", DATA,
                                 "steps 60 tagging=20 parsing=20 ocr=20\n"),
    # early stopping with patience; a no_grad validation loader with its own worker
    "y_early_stopping": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: val {v}\n" for e, v in enumerate(("0.90", "0.72", "0.61", "0.63")))
        + "early stop after epoch 4 (best 0.61)\n"),
    # tokenisation and padding in collate_fn=functools.partial(...), 2 workers
    "y_collate_tokenize": Truth("data-bound", "collate", DATA,
                                "epoch 0: 15 batches\nepoch 1: 15 batches\n"),
    # a generator function that builds its DataLoader on first next(), each epoch
    "y_generator_factory": Truth("data-bound", "decode", DATA,
                                 "".join(f"epoch {e}: 10 batches\n" for e in range(3))),
    # HF-like max_steps with gradient accumulation 4, OneCycleLR(total_steps=max_steps)
    "y_hf_max_steps": Truth("compute-bound", "gpu", COMPUTE,
                            "global_step 12 epochs 3 micro-batches 48\n"),
    # mmap.mmap over one packed file of zlib records, opened in worker_init_fn
    "y_mmap_zlib": Truth("data-bound", "decode", DATA,
                         "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # a no_grad validation loader with batch_size=1: more steps than training
    "y_val_batch1": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 12 steps, validated 40 images\n" for e in range(3))),
    # a batch-level dataset decoding on its own thread pool in the worker
    "y_pool_decode": Truth("data-bound", "decode", DATA, "steps 30\n"),
    # the tutorial's `for phase in ("train", "val")` with set_grad_enabled inside the loop
    "y_tutorial_phases": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e} train: 8 batches\nepoch {e} val: 12 batches\n" for e in range(3))),
    # -- round 6 (z_*.py)
    # `p.data -= lr * p.grad`, no torch.optim; validation (more steps) under autograd
    "z_manual_sgd_val_grad": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: train 12 val 24\n" for e in range(3))),
    # IterableDataset over a generator, sharded by worker_init_fn, 2 workers
    "z_stream_worker_init": Truth("data-bound", "read", DATA,
                                  "epoch 0: 20 batches\nepoch 1: 20 batches\n"),
    # DistributedSampler(num_replicas=1) over ConcatDataset of random_split Subsets, CPU items
    "z_distributed_sampler_one": Truth("data-bound", "decode", DATA,
                                       "epoch 0: 10 batches\nepoch 1: 10 batches\n"),
    # pin_memory=True and non_blocking=True copies on a CPU-only host
    "z_pin_nonblocking_cpu": Truth("compute-bound", "gpu", COMPUTE, "steps 40\n"),
    # a dataset retrying its own OSErrors and KeyErrors on flaky storage
    "z_flaky_retries": Truth("data-bound", "read", DATA, "steps 30\n"),
    # torch.set_num_threads(1 -> 2 -> 1) between epochs
    "z_num_threads_midrun": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e} threads {t}: 12 batches\n" for e, t in enumerate((1, 2, 1)))),
    # a 40 ms step for 8 steps, then 3 ms, against a steady 24 ms batch
    "z_drift_fast_steps": Truth("data-bound", "read", DATA, "steps 48\n"),
    # each step's batch is torch.cat of two next(it) calls (counted as two steps)
    "z_two_next_cat": Truth("data-bound", "read", DATA, "steps 20 batches 40\n"),
    # -- round 7 (v_*.py)
    # a GAN: two optimizers, two discriminator steps (each a next(it)) per generator step
    "v_gan_k_steps": Truth("data-bound", "read", DATA,
                           "generator steps 20 discriminator steps 40 passes 3\n"),
    # a conditional GAN: real images from one loader, the generator's labels from another
    "v_cgan_label_loader": Truth("data-bound", "read", DATA,
                                 "generator steps 20 discriminator steps 40\n"),
    # two live iterators of one DataLoader (discriminator and generator draws)
    "v_two_iterators": Truth("data-bound", "read", DATA,
                             "discriminator draws 40 generator draws 20\n"),
    # contrastive learning: two augmented views per sample, the transform's CPU doubled
    "v_two_views": Truth("data-bound", "decode", DATA,
                         "epoch 0: 10 batches of pairs\nepoch 1: 10 batches of pairs\n"),
    # RL: no DataLoader, an environment stepped in the loop and a replay buffer sampled
    "v_rl_replay": Truth("unknown", "unknown", (0.0, 0.0),
                         "episodes 6 updates 119 buffer 150\n"),
    # torch.save of a 16 MB state_dict (and a 60 ms commit) every 5 steps: not data
    "v_save_every_n": Truth("compute-bound", "gpu", COMPUTE,
                            "steps 60 checkpoints 12 files 12\n"),
    # __getitem__ reads rows from SQLite (unindexed lookups) and parses JSON, 1 worker
    "v_sqlite_rows": Truth("data-bound", "decode", DATA,
                           "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # DataLoader(batch_size=None) over an IterableDataset yielding ready batches
    "v_ready_batches": Truth("data-bound", "read", DATA,
                             "epoch 0: 12 batches of 16\nepoch 1: 12 batches of 16\n"),
    # while time.monotonic() < deadline: the run's length is set by the clock
    "v_time_limit": Truth("data-bound", "read", DATA,
                          "time limit reached, more than 10 steps True, epochs started True\n"),
    # python -m v_pkg.train: a package module with relative imports
    "v_pkg_module": Truth("data-bound", "read", DATA, "".join(
        f"__main__ remote epoch {e}: 15 batches\n" for e in range(2)),
        program=("-m", "v_pkg.train"), args=("remote",)),
    # python -c "...runpy.run_module('v_pkg.train', run_name='__main__')"
    "v_pkg_runpy": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"__main__ memory epoch {e}: 30 batches\n" for e in range(2)),
        program=("-c", "import runpy, sys; sys.argv = ['train', 'memory']; "
                       "runpy.run_module('v_pkg.train', run_name='__main__', alter_sys=True)")),
    # DDP over a one-process gloo group; three of four micro-batches under no_sync()
    "v_ddp_no_sync": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 12 micro-batches\n" for e in range(2)) + "updates 6\n"),
    # multiprocessing_context="spawn", prefetch_factor=1, persistent_workers=True
    "v_spawn_persistent": Truth("data-bound", "decode", DATA,
                                "".join(f"epoch {e}: 15 batches\n" for e in range(4))),
    # -- round 8 (t_*.py)
    # LBFGS with a closure: up to five backward passes per batch, one optimizer step
    "t_lbfgs_closure": Truth("data-bound", "read", DATA,
                             "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # data echoing: three optimizer steps on every batch
    "t_data_echo": Truth("data-bound", "read", DATA, "batches 16 updates 48\n"),
    # batch_size=None and 16 samples stacked by hand per step: 16 next() per step
    "t_manual_batching": Truth("data-bound", "read", DATA,
                               "epoch 0: 10 steps\nepoch 1: 10 steps\n"),
    # k-fold cross-validation: train and no_grad val loaders over Subsets, rebuilt per fold
    "t_kfold": Truth("data-bound", "read", DATA, "".join(
        f"fold {k}: train 64 val batches 8\n" for k in range(3))),
    # torchrun, 2 ranks; rank 1's shard is slow and rank 0 waits for it in the all-reduce
    "t_torchrun_slow_rank": Truth("data-bound", "read", DATA, "rank 0 steps 20\n",
                                  launcher=("-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node", "2")),
    # an IterableDataset over 4 shards in 2 workers; one shard is 50x slower
    "t_slow_shard": Truth("data-bound", "read", DATA,
                          "epoch 0: 20 batches\nepoch 1: 20 batches\n"),
    # mixup partner batches from a second live iterator of the same loader
    "t_mixup_two_iters": Truth("data-bound", "read", DATA,
                               "epoch 0: 20 steps, partner passes 0\n"
                               "epoch 1: 20 steps, partner passes 1\n"),
    # a batch-size finder (three short trial loaders), then the training loader
    "t_batch_size_finder": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 20 batches (tried [8, 16, 32])\n" for e in range(2))),
    # -- round 9 (s_*.py)
    # inference under no_grad, no optimizer, bound by fsync + commit of each prediction file
    "s_infer_write": Truth("compute-bound", "gpu", COMPUTE, "batches 40 files 40\n"),
    # a no_grad evaluation on the SAME DataLoader nested in its own pass every 10 steps
    "s_eval_same_loader": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 20 steps, 4 eval batches\n" for e in range(2))),
    # a step that grows 2 -> 17 ms (a leak), against a steady 48 ms batch
    "s_step_drift_up": Truth("data-bound", "read", DATA, "steps 60 history 60\n"),
    # a Sampler whose __iter__ takes 3 ms an index, in the training process
    "s_slow_sampler": Truth("data-bound", "sampler", DATA,
                            "epoch 0: 15 batches\nepoch 1: 15 batches\n"),
    # a home-made Trainer with callbacks; StopTraining raised from a hook ends the run
    "s_trainer_callbacks": Truth("data-bound", "read", DATA,
                                 "stopped at step 30 in epoch 1, 3 log lines\n"),
    # the step (forward, backward, optimizer) on a one-thread executor, the loader on main
    "s_step_on_executor": Truth("data-bound", "read", DATA,
                                "epoch 0: 15 steps\nepoch 1: 15 steps\n"),
    # two torch.multiprocessing producers (spawn) feeding a queue: no loader to hook
    "s_torch_mp_producers": Truth("unknown", "unknown", (0.0, 0.0), "batches 30\n"),
    # feedline.Loader, 2 forked process workers, 8 ms of storage latency a sample
    "s_feedline_fork_read": Truth("data-bound", "read", DATA,
                                  "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # -- round 10 (r_*.py)
    # knowledge distillation: a frozen teacher's forward under no_grad inside every step
    "r_distill_teacher": Truth("compute-bound", "gpu", COMPUTE,
                               "epoch 0: 16 steps\nepoch 1: 16 steps\n"),
    # @torch.no_grad() on the training function, `with torch.enable_grad():` around the step
    "r_enable_grad_inside": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 12 steps, 3 val batches\n" for e in range(2))),
    # torch.func.grad + functional_call, a hand-written update: no optimizer, no backward()
    "r_func_grad": Truth("data-bound", "decode", DATA,
                         "epoch 0: 10 batches\nepoch 1: 10 batches\nupdates 20\n"),
    # a dataset with __getitems__: one multi-get round trip per batch
    "r_getitems_batched": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 12 batches, shape (8, 5)\n" for e in range(2))),
    # CombinedLoader("max_size_cycle") by hand: a short slow loader restarted under a long one
    "r_max_size_cycle": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 30 steps, short loader restarted 4 times\n" for e in range(2))
        + "steps 60 restarts 8\n"),
    # it = iter(loader) again every 10 steps; workers log in for 400 ms in worker_init_fn
    "r_reiter_every_n": Truth("data-bound", "startup", DATA, "steps 40 iterators 4\n"),
    # a collections.deque replay buffer filled from a DataLoader, updates sampled from it
    "r_deque_replay": Truth("data-bound", "read", DATA, "batches 20 updates 17 buffer 128\n"),
    # collate_fn drops corrupt (None) samples, the loop `continue`s on empty batches
    "r_skip_bad_batches": Truth("data-bound", "read", DATA, "steps 32 skipped 8\n"),
    # each sample decoded by an external program (subprocess.run), 2 workers on 2 cores
    "r_subprocess_decode": Truth("data-bound", "decode", DATA,
                                 "epoch 0: 8 batches\nepoch 1: 8 batches\n"),
    # -- round 11 (q_*.py)
    # the dataset's own ProcessPoolExecutor, kept for the run, maps the decoder (num_workers=0)
    "q_pool_decode": Truth("data-bound", "decode", DATA,
                           "epoch 0: 10 batches\nepoch 1: 10 batches\n"),
    # one long-lived decoder per worker (subprocess.Popen pipes, started in worker_init_fn)
    "q_popen_pipe": Truth("data-bound", "decode", DATA,
                          "epoch 0: 10 batches\nepoch 1: 10 batches\n"),
    # get_worker_info() shards of 52, 12, 44 and 20 records: one worker runs dry early
    "q_uneven_shards": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 16 batches, 128 records\n" for e in range(2))),
    # an HF-like Trainer: accumulation 4, clip, warm-up schedule, evaluate() every 5 updates
    "q_hf_accum_eval": Truth("data-bound", "read", DATA,
                             "global_step 10 evaluations 2 eval batches [4, 4]\n"),
    # LightningModule-like hooks called by a hand-written Trainer.fit, persistent workers
    "q_lightning_module": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 15 steps, global_step {15 * (e + 1)}, val batches 3\n" for e in range(3))
        + "val passes 3\n"),
    # spawn + persistent_workers for the training and the validation loader
    "q_spawn_persistent": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 24 steps, val 3 batches\n" for e in range(3))),
    # a token-budget batch_sampler: 2 to 32 sequences a batch, padded in collate_fn
    "q_token_budget": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 24 batches, sizes 2-32, 240 seqs\n" for e in range(2))),
    # feedline.Loader, decode={"bin": fn} of 6 ms CPU in process workers, on_error="skip"
    "q_feedline_skip": Truth("data-bound", "decode", DATA,
                             "epoch 0: 12 batches\nepoch 1: 12 batches\nsteps 24\n"),
    # -- round 12 (p_*.py)
    # kornia-style augmentation of the batch tensor on the training thread before model(x)
    "p_kornia_augment": Truth("data-bound", "loop_transform", DATA,
                              "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # zip(images, captions): the caption loader tokenises in Python (CPU) in 2 workers
    "p_zip_image_text": Truth("data-bound", "decode", DATA,
                              "epoch 0: 10 steps\nepoch 1: 10 steps\n"),
    # for step in range(max_steps): next(it), iter(loader) again on StopIteration
    "p_step_budget": Truth("compute-bound", "gpu", COMPUTE, "steps 45 passes 8\n"),
    # a length curriculum: the dataset's max_len grows between epochs (workers restart)
    "p_curriculum_length": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: max_len {16 * (e + 1)}, 24 batches\n" for e in range(3))),
    # spawned persistent workers opening a 400 ms connection in worker_init_fn
    "p_spawn_connect": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 12 batches\n" for e in range(3))),
    # gradient checkpointing (checkpoint_sequential): a long backward, real CPU compute
    "p_grad_checkpoint": Truth("compute-bound", "gpu", COMPUTE,
                               "epoch 0: 12 steps\nepoch 1: 12 steps\n"),
    # torch.save of model + Adam state every 8 steps, os.replace, a 40 ms commit
    "p_torch_save_every": Truth("compute-bound", "gpu", COMPUTE,
                                "steps 48 checkpoints 6 size_mb 18\n"),
    # feedline.Loader, thread workers, decode= hands each record to a kept process pool
    "p_feedline_pool_decode": Truth("data-bound", "decode", DATA,
                                    "epoch 0: 24 batches\nepoch 1: 24 batches\n"),
    # -- round 13 (o_*.py)
    # feedline.Loader, process workers, decode= pipes each record to a Popen decoder it keeps
    "o_feedline_process_decoder": Truth("data-bound", "decode", DATA,
                                        "epoch 0: 16 batches\nepoch 1: 16 batches\n"),
    # an HF-like Trainer resumed mid-epoch: a lazily built loader, SkipBatchSampler, callbacks
    "o_hf_resume_skip": Truth("data-bound", "read", DATA,
                              "resumed at update 3, global_step 20, evaluations 5\n"),
    # a LightningModule-like fit: validation every 8 batches mid-epoch, limit_train_batches=16
    "o_lightning_val_interval": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 16 steps, global_step {16 * (e + 1)}\n" for e in range(3))
        + "validations 6\n"),
    # torchrun, 2 gloo ranks, DDP, DistributedSampler.set_epoch, forkserver persistent workers
    "o_torchrun_forkserver_decode": Truth("data-bound", "decode", DATA, "rank 0/2 steps 16\n",
                                          launcher=("-m", "torch.distributed.run", "--standalone",
                                                    "--nproc-per-node", "2")),
    # an IterableDataset streaming JSON lines from 127.0.0.1 over HTTP, shards per worker
    "o_http_chunked_stream": Truth("data-bound", "read", DATA,
                                   "epoch 0: 40 batches\nepoch 1: 40 batches\n"),
    # torch.compile (aot_eager): compiled at the first step, again for the ragged last batch
    "o_compile_ragged_last": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 13 steps, last batch 8\n" for e in range(2))),
    # two training sets taken in turn by epoch: a slow remote one, a quick in-memory one
    "o_alternating_sources": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: {'full 40' if e % 2 == 0 else 'hard 48'} batches\n" for e in range(4))
        + "steps 176\n"),
    # the docs' SimpleCustomBatch with its own pin_memory(), pin_memory=True on a CPU host
    "o_custom_pin_batch": Truth("data-bound", "collate", DATA,
                                "epoch 0: 12 batches\nepoch 1: 12 batches\n"),
    # -- round 14 (n_*.py)
    # torchrun DDP, no_sync() accumulation over 4 micro-batches, rank 1's half of the data slow
    "n_ddp_accum_slow_rank": Truth("data-bound", "read", DATA,
                                   "rank 0 micro-batches 32 updates 8\n",
                                   launcher=("-m", "torch.distributed.run", "--standalone",
                                             "--nproc-per-node", "2")),
    # accelerator.prepare(): a DataLoaderShard subclass one batch ahead, send_to_device
    "n_accelerate_prepare": Truth("data-bound", "decode", DATA, "micro-batches 24 updates 12\n"),
    # an apex-style prefetcher class iterating the loader (num_workers=0) on a side thread
    "n_thread_prefetcher": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: 10 batches\n" for e in range(3)) + "steps 30\n"),
    # tqdm(itertools.islice(loader, 12)) each epoch over a 30-batch persistent-worker loader
    "n_tqdm_islice": Truth("data-bound", "read", DATA, "".join(
        f"epoch {e}: {12 * (e + 1)} steps so far\n" for e in range(3)), needs="tqdm"),
    # batch_size=None, the dataset's own ThreadPoolExecutor fans out HTTP GETs to 127.0.0.1
    "n_http_pool_batch": Truth("data-bound", "read", DATA,
                               "epoch 0: 8 batches\nepoch 1: 8 batches\n"),
    # SWA: AveragedModel, SWALR, and update_bn's no_grad pass over the training loader
    "n_swa_update_bn": Truth("compute-bound", "gpu", COMPUTE, "steps 32 swa models averaged 2\n"),
    # resumed mid-epoch through skip_first_batches' loader, then the ordinary loader
    "n_resume_fresh_loader": Truth("data-bound", "read", DATA, "epoch 0: 13 batches\n"
                                   "epoch 1: 20 batches\nepoch 2: 20 batches\nsteps 53\n"),
    # tar shards through a generator pipeline (split, group, decode, shuffle, batch) in workers
    "n_webdataset_pipeline": Truth("data-bound", "decode", DATA,
                                   "epoch 0: 16 batches\nepoch 1: 16 batches\n"),
    # -- round 15 (ev11_*.py), the evidence audit's outside check
    # HF-Trainer-like: TrainingArguments, accumulation 4, warmup schedule, clipping, eval
    # every 5 updates, HF's default num_workers=0 over a dataset waiting 10 ms a sample
    "ev11_hf_accum": Truth("data-bound", "read", DATA,
                           "epoch 0: 40 batches\nepoch 1: 40 batches\nupdates: 20 evals: 4\n"),
    # Lightning-like FitLoop object (advance / on_advance_end), DataModule, validation at
    # each epoch end through a 25 ms collate: its own line, not the training step's time
    "ev11_lightning_loop": Truth("compute-bound", "gpu", COMPUTE, "".join(
        f"epoch {e}: 16 batches, val 4\n" for e in range(3)) + "global_step: 48\n"),
}
FAST = ("u_next_iter", "u_feedline_process", "u_zip_loaders", "w_loader_per_epoch",
        "x_torchrun", "x_feedline_threads_gil", "y_val_batch1", "y_pool_decode",
        "z_manual_sgd_val_grad", "v_cgan_label_loader", "t_manual_batching", "s_slow_sampler",
        "r_reiter_every_n")
"""The default suite's share (40-50 s on two busy cores): one of each fix (start-up
binding, run-queue wait of process workers, zipped loaders, a loader rebuilt every epoch,
ranks in processes the command starts (torchrun's, judged by the one waiting for data,
the other named with its own verdict), thread workers whose Python holds the GIL or the cores, a no_grad validation loader with
more steps than training, a dataset decoding on its own thread pool, a hand-written
update whose backward passes name the training loader, a loader drawn once per two steps
of another as training data taken in turn, 16 draws a step counted as one step, a slow
sampler binding in the training process, an iterator replaced mid-pass whose workers'
shutdown is data time)."""


def diagnose(out: Path, name: str) -> tuple[int, dict, str, str]:
    """Run one script under diagnose as a user would; exit status, JSON, stdout, stderr."""
    truth = TRUTH[name]
    json_path = out / f"{name.replace(':', '-')}.json"
    cmd = [sys.executable, "-m", "feedline", "diagnose", "--json", str(json_path), "--",
           sys.executable, *(truth.program or (*truth.launcher, f"{truth.script or name}.py")),
           *truth.args]
    # the scripts run from their own folder, as a user runs one: feedline is found by
    # absolute path, whatever relative PYTHONPATH the suite runs with
    src = str(Path(feedline.__file__).resolve().parents[1])
    path = os.pathsep.join([src] + [os.path.abspath(p) for p in
                                    os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False,
                          cwd=SCRIPTS, env=os.environ | dict(truth.env) | {"PYTHONPATH": path})
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    return proc.returncode, data, proc.stdout, proc.stderr


def run_many(out: Path, names: list[str]) -> dict[str, tuple[int, dict, str, str]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {n: pool.submit(diagnose, out, n) for n in names}
        return {n: f.result() for n, f in futs.items()}


def check(name: str, result: tuple[int, dict, str, str]) -> None:
    code, data, out, err = result
    truth = TRUTH[name]
    assert code == truth.code, err[-3000:]
    assert out == truth.stdout, (name, out)  # the same run: epochs, steps, batches
    assert data, f"{name}: no report; stderr:\n{err[-3000:]}"
    got = (data["verdict"], data["binding"])
    assert got == (truth.verdict, truth.binding), (
        name, data["stall_fraction"], data["recommendation"], data["analysis"])
    lo, hi = truth.stall
    assert lo <= data["stall_fraction"] <= hi, (name, data["stall_fraction"])


def available(names: tuple[str, ...] | list[str]) -> list[str]:
    import importlib.util

    return [n for n in names if not TRUTH[n].needs or importlib.util.find_spec(TRUTH[n].needs)]


@pytest.fixture(scope="module")
def fast_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_many(tmp_path_factory.mktemp("user"), list(FAST))


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", FAST)
def test_verdict_binding_stall_and_the_run_unchanged(fast_runs: dict, name: str) -> None:
    check(name, fast_runs[name])


@pytest.mark.timeout(400)
def test_new_iterator_every_step_is_named_with_its_fix(fast_runs: dict) -> None:
    _, data, _, _ = fast_runs["u_next_iter"]
    assert "it = iter(loader)" in data["recommendation"]
    assert "new iterator every step" in " ".join(f["message"] for f in data["findings"])


@pytest.mark.timeout(400)
def test_advice_keeps_the_users_loader_settings(fast_runs: dict) -> None:
    _, proc, _, _ = fast_runs["u_feedline_process"]
    assert "worker_type='process'" in proc["recommendation"]  # threads would hit the GIL
    assert proc["host"].get("loader_runq_per_cpu") is not None


@pytest.mark.timeout(400)
def test_zipped_loaders_are_one_data_path_and_the_slow_one_binds(fast_runs: dict) -> None:
    data = fast_runs["u_zip_loaders"][1]
    (other,) = data["loaders"]
    assert data["loader"]["zipped_with"] == [other["label"]]
    assert other["role"] == "lockstep" and "evaluation" not in other["advice"]  # training data
    assert other["stall_fraction"] < 0.25  # the in-memory loader is always ready
    assert "num_workers=" in data["recommendation"]


@pytest.mark.timeout(400)
def test_a_loader_rebuilt_every_epoch_is_one_training_loader(fast_runs: dict) -> None:
    data = fast_runs["w_loader_per_epoch"][1]
    assert data["loader"]["instances"] == 5 and data["loaders"] == [] and data["steps"] == 39
    (f,) = [f for f in data["findings"] if f["code"] == "epoch-restarts"] or [None]
    assert f is None or "before the epoch loop" in f["fix"]


def ranks_started_by_the_command_are_measured_and_named(data: dict) -> None:
    """The command's own process (torchrun's launcher, ``mp.spawn``'s parent) iterated no
    loader: one of the two ranks it started is the report, named, and the other rank gets
    its own verdict. Which rank is reported depends on which waits more for data (both read
    alike, so a loaded host decides; the choice itself is tests/observe/test_observe_ranks.py),
    and so does the other's verdict: a rank that waits in collectives for the pacing one
    stalls little on its own data (balanced, 5% stall, once)."""
    rank = data["host"]["process"]["rank"]
    assert rank in (0, 1) and data["steps"] == 19
    (note,) = [n for n in data["host"]["notes"] if "iterated no loader" in n]
    assert f"(rank {rank}), one of 2 process(es) it started that trained" in note, note
    other = re.search(rf"the others: process \d+ \(rank {1 - rank}\) "
                      r"(data-bound|balanced|compute-bound) \(\d+% stall, binding \w+", note)
    assert other, note


@pytest.mark.timeout(400)
def test_torchrun_ranks_and_gil_bound_item_code(fast_runs: dict) -> None:
    ranks = fast_runs["x_torchrun"][1]
    ranks_started_by_the_command_are_measured_and_named(ranks)
    gil = fast_runs["x_feedline_threads_gil"][1]
    # CPU in __getitem__ under feedline.Loader is decode (as under a DataLoader); threads
    # seen waiting for the GIL are told to use processes, else to cut the CPU per batch
    assert gil["analysis"]["per_batch"]["decode"] > gil["analysis"]["per_batch"]["read"]
    assert ('worker_type="process"' in gil["recommendation"]) == gil["analysis"]["gil_bound"]
    assert "feedline.Loader" not in gil["recommendation"]


@pytest.mark.timeout(400)
def test_no_grad_validation_and_a_thread_pool_decode(fast_runs: dict) -> None:
    val = fast_runs["y_val_batch1"][1]
    (other,) = val["loaders"]  # 120 validation steps under no_grad against 36 training steps
    assert val["steps"] == 35 and other["steps"] == 120 and other["role"] == "other"
    pool = fast_runs["y_pool_decode"][1]
    # CPU on the dataset's pool threads: decode, one worker per core, not 11 I/O workers
    assert pool["analysis"]["blocked_fraction"] < 0.5
    assert "num_workers=2" in pool["recommendation"]
    assert "sampler=BatchSampler(...)" in pool["recommendation"]  # batch_size=None kept too


@pytest.mark.timeout(400)
def test_a_hand_written_update_names_the_training_loader(fast_runs: dict) -> None:
    data = fast_runs["z_manual_sgd_val_grad"][1]
    (val,) = data["loaders"]  # 72 validation steps under autograd, no backward
    assert data["steps"] == 35 and val["steps"] == 72 and val["role"] == "other"


@pytest.mark.timeout(400)
def test_a_loader_taken_in_turn_is_training_data(fast_runs: dict) -> None:
    data = fast_runs["v_cgan_label_loader"][1]
    (labels,) = data["loaders"]  # one label draw per two image draws: not evaluation
    assert labels["role"] == "lockstep" and data["loader"]["zipped_with"] == [labels["label"]]
    assert data["steps"] == 39 and labels["steps"] == 20


@pytest.mark.timeout(400)
def test_sixteen_draws_between_two_updates_are_one_step(fast_runs: dict) -> None:
    data = fast_runs["t_manual_batching"][1]
    assert data["steps"] == 19 and data["loader"]["draws_per_step"] == 16
    assert "batch_size=None" in data["recommendation"]


def test_a_slow_sampler_is_named_and_not_given_more_workers(fast_runs: dict) -> None:
    data = fast_runs["s_slow_sampler"][1]
    assert data["stages"]["sampler"]["p50"] >= 0.015  # 8 indices x 3 ms a batch
    assert "num_workers=" not in data["recommendation"]


def test_an_iterator_replaced_mid_pass_is_start_up_not_step_time(fast_runs: dict) -> None:
    data = fast_runs["r_reiter_every_n"][1]
    # the old iterator is dropped after the new one is made: not two alive at once, and
    # its workers' shutdown is no part of the 8 ms step
    assert "live_iterators" not in data["loader"] and data["analysis"]["workers"] == 2
    assert data["stages"]["step"]["p95"] < 0.08, data["stages"]["step"]  # 37-160 ms before
    assert "persistent_workers=True" in data["recommendation"]


def round14_checks(results: dict) -> None:
    """Round 14's loaders and ranks, beyond the verdict."""
    # DDP: the rank waiting for data is reported; the other's all-reduce wait is said
    ddp = results["n_ddp_accum_slow_rank"][1]
    assert ddp["host"]["process"]["rank"] == 1, ddp["host"]
    (note,) = [n for n in ddp["host"]["notes"] if "process(es) it started" in n]
    assert "in collectives, not compute" in note, note
    # a resumed epoch's loader and the fresh one over the same dataset: one training loader
    resumed = results["n_resume_fresh_loader"][1]
    assert resumed["loaders"] == [] and resumed["loader"]["continues"] == 1, resumed["loaders"]
    assert resumed["steps"] == 52
    # update_bn's no_grad pass over the training loader: its own line, not training steps
    swa = results["n_swa_update_bn"][1]
    (bn,) = swa["loaders"]
    assert swa["steps"] == 31 and bn["steps"] == 8 and bn["config"]["after_training"], bn


def round13_checks(results: dict) -> None:
    """Round 13's loaders and advice, beyond the verdict."""
    # a decoder process a Loader process worker keeps is CPU: no I/O worker counts
    proc = results["o_feedline_process_decoder"][1]
    assert proc["analysis"]["blocked_fraction"] < 0.5, proc["analysis"]
    rec = proc["recommendation"]
    assert "workers=" not in rec or int(rec.split("workers=")[1].split(",")[0]) <= 2, rec
    # training sets taken in turn by epoch: the one the run waits in is judged, the quick
    # one (more steps) is its own line
    alt = results["o_alternating_sources"][1]
    assert alt["loader"].get("chosen_for") == "time", alt["loader"]
    (hard,) = alt["loaders"]
    assert hard["steps"] == 96 and hard["stall_fraction"] < 0.3, hard
    # validation mid-epoch and a resumed epoch's loader: validation is its own line
    (val,) = results["o_lightning_val_interval"][1]["loaders"]
    assert val["role"] == "other" and val["steps"] == 24, val
    assert "other" in {o["role"] for o in results["o_hf_resume_skip"][1]["loaders"]}
    # no pinning advice without a GPU, even with pin_memory=True and a custom pin_memory()
    pin = results["o_custom_pin_batch"][1]
    assert "pin_memory" not in json.dumps(pin["findings"])
    # torchrun's ranks: one of them is reported, and the note says so
    ranks = results["o_torchrun_forkserver_decode"][1]
    assert any("process(es) it started that trained" in n for n in ranks["host"]["notes"])


def round12_checks(results: dict) -> None:
    """Round 12's stages and advice, beyond the verdict."""
    # augmentation on the training thread: its own stage, out of the step's compute, and
    # the advice moves it into the workers
    aug = results["p_kornia_augment"][1]
    per = aug["analysis"]["per_batch"]
    assert per["loop_transform"] > 2 * per["gpu"], per
    assert "move that work into the dataset's __getitem__" in aug["recommendation"]
    assert aug["predicted_gain"] is not None and aug["predicted_gain"] > 1.3
    # compute-bound loops: what they do before the forward is a sliver of the step
    for name in ("p_step_budget", "p_grad_checkpoint", "p_spawn_connect"):
        per = results[name][1]["analysis"]["per_batch"]
        assert per.get("loop_transform", 0.0) < 0.1 * per["gpu"], (name, per)
    # plain torch.save in the loop: the checkpoint stage, one span a save
    assert results["p_torch_save_every"][1]["stages"]["checkpoint"]["count"] == 6
    # a decode that waits on a kept process pool is CPU: decode, no I/O worker counts
    pool = results["p_feedline_pool_decode"][1]
    assert pool["analysis"]["blocked_fraction"] < 0.5, pool["analysis"]
    rec = pool["recommendation"]
    assert "workers=" not in rec or int(rec.split("workers=")[1].split(",")[0].rstrip(")")) <= 2, rec
    # the slow caption loader binds; the image loader is zipped with it
    zipped = results["p_zip_image_text"][1]
    (images,) = zipped["loaders"]
    assert zipped["loader"]["zipped_with"] == [images["label"]] and images["role"] == "lockstep"


def round11_checks(results: dict) -> None:
    """Round 11's advice and counts, beyond the verdict."""
    # a decoder the dataset keeps (a process pool, a Popen pipe) is CPU: no I/O worker counts
    for name in ("q_pool_decode", "q_popen_pipe"):
        data = results[name][1]
        assert data["analysis"]["blocked_fraction"] < 0.5, (name, data["analysis"])
        rec = data["recommendation"]
        assert "num_workers=" not in rec or int(rec.split("num_workers=")[1].split(",")[0]) <= 2, rec
    # the pool already decodes on both cores: workers for the training process gain little
    gain = results["q_pool_decode"][1]["predicted_gain"]
    assert gain is None or gain < 1.5, gain
    # the larger shards stay with one worker: balance them, not more workers
    shards = results["q_uneven_shards"][1]
    assert shards["analysis"]["uneven_worker"][0] == 0
    assert "num_workers=" not in shards["recommendation"]
    # evaluation every 5 updates and the Lightning-like validation: their own loader lines
    for name, steps in (("q_hf_accum_eval", 8), ("q_lightning_module", 12)):
        (val,) = results[name][1]["loaders"]
        assert val["role"] == "other" and val["steps"] == steps, (name, val)
    assert results["q_hf_accum_eval"][1]["steps"] == 39  # a micro-batch is a step
    # a copied call keeps the token-budget batch sampler
    assert "batch_sampler=TokenBudgetSampler(...)" in results["q_token_budget"][1]["recommendation"]
    # samples skipped by on_error="skip" are counted and said
    skip = results["q_feedline_skip"][1]
    assert skip["loader"]["dropped"]["samples"] >= 10 and skip["loader"]["dropped"]["by"] == "on_error='skip'"
    assert "samples-dropped" in {f["code"] for f in skip["findings"]}


def round10_checks(results: dict) -> None:
    """Round 10's steps, loaders and advice, beyond the verdict."""
    # a no_grad teacher forward inside the step is step time, no loader of its own
    distill = results["r_distill_teacher"][1]
    assert distill["steps"] == 31 and distill["loaders"] == []
    # a training pass under no_grad whose step re-enables autograd is still training
    grad = results["r_enable_grad_inside"][1]
    (val,) = grad["loaders"]
    assert grad["steps"] == 23 and val["steps"] == 6 and val["role"] == "other"
    # torch.func.grad: no backward(), no optimizer: every batch is a step
    assert results["r_func_grad"][1]["steps"] == 19
    # the short, slow loader restarted inside the loop binds; the long one is in lockstep
    cyc = results["r_max_size_cycle"][1]
    (long,) = cyc["loaders"]
    assert cyc["loader"]["zipped_with"] == [long["label"]] and long["role"] == "lockstep"
    assert cyc["loader"]["num_workers"] == 2 and cyc["loader"].get("live_iterators") is None
    # an external decoder is CPU: no more workers than cores
    sub = results["r_subprocess_decode"][1]
    assert sub["analysis"]["blocked_fraction"] < 0.5
    rec = sub["recommendation"]
    assert "num_workers=" not in rec or int(rec.split("num_workers=")[1].split(",")[0]) <= 2, rec
    # one round trip per batch through __getitems__: read, not decode
    per = results["r_getitems_batched"][1]["analysis"]["per_batch"]
    assert per["read"] > 4 * per["decode"], per
    # a collate that drops failed samples: they are counted and said
    bad = results["r_skip_bad_batches"][1]
    assert bad["loader"]["dropped"] == {"samples": 128, "given": 320, "empty_batches": 8,
                                        "by": "collate_fn"}


def round9_checks(results: dict) -> None:
    """Round 9's steps, loaders and advice, beyond the verdict."""
    # a no_grad pass of the training loader inside its own pass: its own loader line
    nested = results["s_eval_same_loader"][1]
    assert nested["steps"] == 39
    (ev,) = nested["loaders"]
    assert ev["steps"] == 8 and ev["role"] == "other"
    assert ev["config"]["nested_in"] == nested["loader"]["label"]
    # a slow sampler: make it cheap, not more workers (they do not run it)
    rec = results["s_slow_sampler"][1]["recommendation"]
    assert "IndexService(...)" in rec and "__iter__" in rec and "num_workers=" not in rec
    # no optimizer at all: every batch is a step
    assert results["s_infer_write"][1]["steps"] == 39
    # no loader to hook: unknown, and how to measure it
    assert "feedline.watch" in results["s_torch_mp_producers"][1]["fix"]
    # I/O in forked process workers: more workers than the 2 it has
    rec = results["s_feedline_fork_read"][1]["recommendation"]
    assert int(rec.split("workers=")[1].split(",")[0]) > 2, rec


def round8_checks(results: dict) -> None:
    """Round 8's steps, workers and advice, beyond the verdict."""
    # a step is what lies between two updates: several backward passes or updates a
    # batch leave one batch a step; two batches a step make one step
    assert results["t_lbfgs_closure"][1]["steps"] == 23
    assert results["t_data_echo"][1]["steps"] == 15
    mix = results["t_mixup_two_iters"][1]
    assert mix["steps"] == 39 and mix["loader"]["draws_per_step"] == 2
    assert mix["loader"]["live_iterators"] == 2 and mix["analysis"]["workers"] == 4
    # one slow shard stays with one worker: split it, do not add workers
    shard = results["t_slow_shard"][1]
    assert shard["analysis"]["uneven_worker"][0] == 1
    assert "num_workers=" not in shard["recommendation"]
    # loaders rebuilt per fold: one training data path, validation its own line
    fold = results["t_kfold"][1]
    assert fold["loader"]["instances"] == 3 and [o["role"] for o in fold["loaders"]] == ["other"]
    assert results["t_batch_size_finder"][1]["steps"] == 39


def round7_checks(results: dict) -> None:
    """Round 7's findings, beyond the verdict."""
    # a torch.save every 5 steps: periodic work in the loop, named before "speed up the step"
    save = results["v_save_every_n"][1]
    assert "long-steps" in {f["code"] for f in save["findings"]}
    assert "make that work rarer" in save["recommendation"]
    # no DataLoader at all: unknown, and how to measure it
    assert "feedline.watch" in results["v_rl_replay"][1]["fix"]
    # a whole batch per item: a copied call keeps batch_size=None
    assert "batch_size=None" in results["v_ready_batches"][1]["recommendation"]
    (labels,) = results["v_cgan_label_loader"][1]["loaders"]
    assert labels["role"] == "lockstep"


def round6_checks(results: dict) -> None:
    """Round 6's advice, beyond the verdict."""
    # GPU habits on a CPU host: no pinning advice
    pin = results["z_pin_nonblocking_cpu"][1]
    assert "pin_memory" not in json.dumps(pin["findings"]) + pin["recommendation"]
    (val,) = results["z_manual_sgd_val_grad"][1]["loaders"]
    assert val["role"] == "other"
    # workers sized for the 3 ms steps the run settles into, not the slow start's mean
    rec = results["z_drift_fast_steps"][1]["recommendation"]
    assert int(rec.split("num_workers=")[1].split(",")[0]) >= 8, rec


def round5_checks(results: dict) -> None:
    """Round 5's advice and per-loader lines, beyond the verdict."""
    # advice keeps how the loader draws and batches: a copied call trains the same way
    bucket = results["y_bucket_variable_step"][1]
    fixes = " ".join(f["fix"] for f in bucket["findings"]) + bucket["recommendation"]
    assert "batch_size=None" not in fixes
    assert "sampler=WeightedRandomSampler(...)" in results["y_weighted_sampler"][1]["recommendation"]
    # three tasks taken in turn: the other two are training data in lockstep, not evaluation
    rr = results["y_round_robin_tasks"][1]
    assert sorted(o["role"] for o in rr["loaders"]) == ["lockstep", "lockstep"]
    # an evaluator that never reaches StopIteration: its passes end at their last batch
    (ev,) = results["y_engine_events"][1]["loaders"]
    assert ev["passes"] == 3 and ev["share_of_wall"] < 0.5
    # collate already in the workers is not told to move there; decode is not told to pack
    assert "already runs in the 2 worker(s)" in results["y_collate_tokenize"][1]["recommendation"]
    assert "pack small files" not in results["y_mmap_zlib"][1]["recommendation"]
    # a no_grad validation loader run each epoch: its own line
    (stop,) = results["y_early_stopping"][1]["loaders"]
    assert stop["steps"] == 15 and stop["role"] == "other"
    # validation with autograd on and more steps: the optimizer's loader is training
    (val,) = results["y_tutorial_phases"][1]["loaders"]
    assert val["steps"] == 36 and val["role"] == "other"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_script_three_times(tmp_path: Path) -> None:
    """Every script right in each of three runs (the machine may be busy)."""
    names = available(list(TRUTH))
    for k in range(3):
        out = tmp_path / str(k)
        out.mkdir()
        results = run_many(out, names)
        for name, result in results.items():
            check(name, result)
        # a copied call keeps the dataset's whole batches
        assert "batch_size=None" in results["u_batch_sampler"][1]["recommendation"]
        # the user's own generator: unknown, and how to measure it
        assert "feedline.watch" in results["u_generator"][1]["fix"]
        # a RAM cache: the first pass is data-bound, later ones are not, and both are said
        cached = results["w_ram_cache"][1]
        first, *later = cached["analysis"]["pass_stalls"]
        assert first > 0.5 and max(later) < 0.2
        assert "passes-differ" in {f["code"] for f in cached["findings"]}
        # more workers for a stream that is not split: say how to split it
        assert "get_worker_info()" in results["w_len_lies"][1]["recommendation"]
        # steps fed from itertools.cycle's memory after the loader's one pass are said
        assert "loader-went-quiet" in {f["code"] for f in results["w_itertools_cycle"][1]["findings"]}
        # no pinning advice without a GPU; compile warm-up is no stall
        assert "pin_memory" not in json.dumps(results["w_accelerate_accum"][1]["findings"])
        assert "pin_memory" not in results["w_accelerate_accum"][1]["recommendation"]
        # a pool thread that only fetches for the trainer: said, and no gain predicted
        pool = results["x_threadpool_prefetch"][1]
        assert "handoff-consumer" in {f["code"] for f in pool["findings"]}
        assert pool["predicted_gain"] is None
        # I/O-bound over HTTP with 6 workers on 2 cores: more workers still, not fewer
        rec = results["x_http_workers"][1]["recommendation"]
        assert int(rec.split("num_workers=")[1].split(",")[0]) > 6, rec
        # SLOW_ONLY: ranks of torch.multiprocessing.spawn; the same contract (ranks the
        # command starts, measured and named) is default-tested on x_torchrun's ranks in
        # test_torchrun_ranks_and_gil_bound_item_code (13.7 s of CPU a run, the costliest script)
        ranks_started_by_the_command_are_measured_and_named(results["w_mp_spawn"][1])
        round5_checks(results)
        round6_checks(results)
        round7_checks(results)
        round8_checks(results)
        round9_checks(results)
        round10_checks(results)
        round11_checks(results)
        round12_checks(results)
        round13_checks(results)
        round14_checks(results)
