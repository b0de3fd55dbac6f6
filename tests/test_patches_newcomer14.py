"""Round 14's medical newcomer: int16 3D volumes of varying depth and their masks (parallel
folders, or per-subject .npz), random patches cropped in the workers, read with io='direct'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import feedline
from feedline import patches
from feedline.errors import ArgumentError, ConfigError
from feedline.format import pack
from feedline.format._sources import SourceRules

P = (4, 6, 6)


def _volume(i: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    vol = (np.arange(depth * 10 * 12, dtype=np.int16).reshape(depth, 10, 12) + 1000 * i).astype(np.int16)
    mask = np.zeros(vol.shape, np.uint8)
    mask[depth // 2, 5, 6] = 1                        # one foreground voxel
    return vol, mask


@pytest.mark.timeout(60)
def test_patches_of_volumes_of_varied_depth_batch_densely_with_io_direct(tmp_path: Path) -> None:
    for part in ("volumes", "masks"):
        (tmp_path / "scans" / part).mkdir(parents=True)
    (tmp_path / "subjects").mkdir()
    depths = {f"sub{i}": (3, 8, 12)[i % 3] for i in range(6)}   # depth 3 < the patch: padded
    for i, (name, depth) in enumerate(depths.items()):
        vol, mask = _volume(i, depth)
        np.save(tmp_path / "scans" / "volumes" / f"{name}.npy", vol)
        np.save(tmp_path / "scans" / "masks" / f"{name}.npy", mask)
        np.savez(tmp_path / "subjects" / f"{name}.npz", image=vol, mask=mask, spacing=np.ones(3, np.float32))
    pack([tmp_path / "scans"], tmp_path / "ds", align=4096, rules=SourceRules(key="parallel"))
    pack([tmp_path / "subjects"], tmp_path / "npz", align=4096)
    plain = feedline.Loader(tmp_path / "ds", batch_size=3, workers=1, shuffle=False)
    with plain, pytest.warns(RuntimeWarning, match=r"3D scans .*feedline\.patches\.PatchTransform"):
        assert isinstance(next(iter(plain))["volumes.npy"], list)   # depths differ: a list, and the fix named
    recipes = [("ds", {"volumes.npy": "image", "masks.npy": "mask"}),
               ("npz", {"npz/image": "image", "npz/mask": "mask"})]
    for root, fields in recipes:
        tf = patches.PatchTransform(fields, size=P, foreground=1.0, mask=list(fields)[1],
                                    dtypes={"image": np.float32}, patches=2)
        ds = feedline.open_dataset(tmp_path / root, io="direct")
        with feedline.Loader(ds, batch_size=3, workers=2, seed=0, transform=tf) as loader:
            batches = list(loader)
        assert len(batches) == 2
        for b in batches:
            assert b["image"].shape == (3, 2, *P) and b["image"].dtype == torch.float32
            assert b["mask"].shape == (3, 2, *P) and b["mask"].dtype == torch.uint8
            assert (b["mask"].flatten(2).sum(-1) == 1).all()   # foreground=1: every patch holds the voxel
            if root == "npz":
                assert b["npz"]["spacing"].shape == (3, 3)     # the other members pass through
        assert ds.backend.name == "direct"


@pytest.mark.timeout(30)
def test_random_crop_keeps_the_box_inside_pads_short_axes_and_crops_alike() -> None:
    rng = np.random.default_rng(0)
    vol, mask = _volume(0, 8)
    vol2 = np.stack([vol, vol + 1])                      # a channel axis: kept whole
    for _ in range(50):
        start = patches.random_box(vol.shape, P, rng)
        assert all(0 <= s <= n - p for s, n, p in zip(start, vol.shape, P, strict=True))
        a, c = patches.random_crop(vol, P, start=start), patches.random_crop(vol2, P, start=start)
        assert a.shape == P and c.shape == (2, *P) and np.array_equal(c[0], a)
        z, y, x = start
        assert a[0, 0, 0] == vol[z, y, x]
    short = patches.random_crop(vol[:3], P, rng, pad_value=-1)
    assert short.shape == P and (short[-1] == -1).all() and (short[:-1] != -1).all()   # 3 slices, centred
    with pytest.raises(ArgumentError, match="3-D patch of an array of shape"):
        patches.random_crop(np.zeros((4, 4)), (2, 2, 2))
    tf = patches.PatchTransform({"v": "image", "m": "mask"}, size=P, rng=rng)
    with pytest.raises(ConfigError, match=r"cropped axes differ"):
        tf({"__key__": "k", "v": vol, "m": mask[:, :9]})
    with pytest.raises(ConfigError, match=r"sample 'k' has no field 'm'"):
        tf({"__key__": "k", "v": vol})
    with pytest.raises(ArgumentError, match="needs mask="):
        patches.PatchTransform(["v"], size=P, foreground=0.5)


@pytest.mark.timeout(60)
def test_patches_dataset_reads_only_the_box_rows_and_equals_the_whole_crop(tmp_path: Path) -> None:
    """patches.Patches reads each box's rows by byte ranges (ds.read_ranges), as an
    np.load(mmap_mode="r") crop would, with io='direct' too; every patch equals the crop of the
    whole array at the same box (padded where the scan is shallower than the patch)."""
    (tmp_path / "scans").mkdir()
    arrays = {}
    for i, depth in enumerate((3, 8, 12)):
        vol, _ = _volume(i, depth)
        arrays[f"s{i}"] = np.stack([vol, -vol])                 # a channel axis, kept whole
        np.save(tmp_path / "scans" / f"s{i}.ct.npy", arrays[f"s{i}"])
    pack([tmp_path / "scans"], tmp_path / "ds", align=4096)
    for io in ("buffered", "direct"):
        ds = feedline.open_dataset(tmp_path / "ds", io=io)
        whole = bytes(ds[1]["ct.npy"])
        assert ds.read_ranges(1, "ct.npy", [(0, 6), (200, 50)]).tobytes() == whole[:6] + whole[200:250]
        with pytest.raises(ConfigError, match=r"outside 'ct.npy' of sample 's1'"):
            ds.read_ranges(1, "ct.npy", [(len(whole) - 2, 3)])
        for seed in range(8):
            crops = patches.Patches(ds, {"ct.npy": "image"}, size=P, rng=np.random.default_rng(seed))
            for i, key in enumerate(ds.keys()):
                again = np.random.default_rng(seed)
                for _ in range(i):   # the boxes drawn for the samples before
                    patches.random_box(arrays[ds.keys()[_]].shape, P, again)
                want = patches.random_crop(arrays[key], P, start=patches.random_box(arrays[key].shape, P, again))
                got = crops[i]
                assert got["__key__"] == key and got["image"].shape == (2, *P)
                assert np.array_equal(got["image"], want), (io, seed, key)
    crops = patches.Patches(tmp_path / "ds", {"ct.npy": "image"}, size=P, patches=2, dtypes={"image": np.float32})
    with feedline.Loader(crops, batch_size=3, workers=2, seed=0) as loader:
        (batch,) = list(loader)
    assert batch["image"].shape == (3, 2, 2, *P) and batch["image"].dtype == torch.float32
    with pytest.raises(ArgumentError, match=r"not \.npy"):
        patches.Patches(ds, {"npz/image": "image"}, size=P)
