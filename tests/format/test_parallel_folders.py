"""--key parallel: one folder per field (images/x.jpg + masks/x.png), one sample per name."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

import feedline
from feedline.errors import ConfigError
from feedline.format import pack
from feedline.format._sources import SourceRules, collect

PARALLEL = SourceRules(key="parallel")


def _png(mask: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(mask, "L").save(out, "PNG")
    return out.getvalue()


def _seg_tree(root: Path, stems: list[str], masks_for: list[str] | None = None) -> dict[str, np.ndarray]:
    masks = {}
    (root / "images" / "train").mkdir(parents=True)
    (root / "masks" / "train").mkdir(parents=True)
    for i, stem in enumerate(stems):
        (root / "images" / "train" / f"{stem}.JPEG").write_bytes(
            simplejpeg.encode_jpeg(np.full((8, 12, 3), 10 * i, np.uint8)))
        masks[f"train/{stem}"] = np.arange(96, dtype=np.uint8).reshape(8, 12) % (i + 2)
        if masks_for is None or stem in masks_for:
            (root / "masks" / "train" / f"{stem}.png").write_bytes(_png(masks[f"train/{stem}"]))
    return masks


def test_parallel_folders_pair_files_of_the_same_name_into_one_sample(tmp_path: Path) -> None:
    _seg_tree(tmp_path / "seg", ["a", "b.v2", "c"])
    (tmp_path / "seg" / "README.md").write_text("about")
    found = collect([tmp_path / "seg"], PARALLEL)
    assert [(s.key, [f.field for f in s.files]) for s in found.samples] == [
        ("train/a", ["images.jpg", "masks.png"]),
        ("train/b%2Ev2", ["images.jpg", "masks.png"]),
        ("train/c", ["images.jpg", "masks.png"]),
    ]
    assert [s.name for s in found.skipped] == ["README.md"]
    assert "not inside a field folder" in found.notes()[0]


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_batch_holds_the_image_and_its_mask_of_the_same_name(tmp_path: Path, worker_type: str) -> None:
    masks = _seg_tree(tmp_path / "seg", [f"img.{i:03d}" for i in range(6)])
    pack([tmp_path / "seg"], tmp_path / "ds", rules=PARALLEL)
    loader = feedline.Loader(tmp_path / "ds", batch_size=3, workers=2, worker_type=worker_type, seed=0)
    seen = []
    try:
        for batch in loader:
            assert batch["images.jpg"].shape == (3, 8, 12, 3)
            for row, key in enumerate(batch["__key__"]):
                np.testing.assert_array_equal(batch["masks.png"][row].numpy(), masks[key], err_msg=key)
                seen.append(key)
    finally:
        loader.close()
    assert sorted(seen) == sorted(masks)


def test_a_missing_partner_is_said_and_the_default_rule_points_to_parallel(tmp_path: Path) -> None:
    _seg_tree(tmp_path / "seg", ["a", "b", "c"], masks_for=["a", "c"])
    notes = collect([tmp_path / "seg"], PARALLEL).notes()
    assert notes == ["field 'masks.png' is in 2 of 3 samples only: a batch reads it per sample "
                     "(use --exclude to leave such files out, or convert them to one format)"]
    (default,) = collect([tmp_path / "seg"]).notes()
    assert "--key parallel" in default and "'images', 'masks'" in default


def test_parallel_folders_refuse_labels(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"labels/x\.cls"):
        SourceRules(key="parallel", labels="from-folder")


@pytest.mark.timeout(60)
def test_episode_folders_are_not_parallel_and_their_meta_files_are_named(tmp_path: Path) -> None:
    """Robot episodes, ``episode_000/step_0001.{cam.png, imu.f32}`` with an ``episode_000/meta.json``
    in each (before: pack said to use --key parallel, which would make one sample of every
    episode's step_0001; the meta files, samples with every other field missing, went unnamed)."""
    for e in range(3):
        for t in range(4):
            (tmp_path / "log" / f"episode_{e:03d}").mkdir(parents=True, exist_ok=True)
            (tmp_path / "log" / f"episode_{e:03d}" / f"step_{t:04d}.cam.png").write_bytes(_png(np.zeros((2, 2), np.uint8)))
            (tmp_path / "log" / f"episode_{e:03d}" / f"step_{t:04d}.imu.f32").write_bytes(bytes(24))
        (tmp_path / "log" / f"episode_{e:03d}" / "meta.json").write_text('{"hz": 10}')
    (note,) = collect([tmp_path / "log"]).notes()
    assert "--key parallel" not in note and "3 sample(s) share no field" in note
    assert "episode_000/meta (json)" in note and "--exclude '*/meta.json'" in note
    assert collect([tmp_path / "log"], SourceRules(exclude=("*/meta.json",))).notes() == []
