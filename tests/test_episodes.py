"""feedline.episodes: recorded robot/driving episodes (a folder per sensor, a file per frame,
per-episode arrays) packed one sample per frame and read as training windows that never
cross an episode, with padding flags, a missing camera filled, and point clouds padded."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import feedline
from feedline import episodes
from feedline.errors import ConfigError
from feedline.format import SourceRules
from feedline.format._sources import collect

LENGTHS = (5, 3)


def _log(root: Path) -> Path:
    """Two episodes of 5 and 3 frames; episode 1 lacks cam_right at frame 1; lidar sweeps of
    varying point counts; joints[t] = 10 * episode + t in every column."""
    rng = np.random.default_rng(0)
    for e, n in enumerate(LENGTHS):
        ep = root / f"episode_{e:04d}"
        for cam in ("cam_front", "cam_right"):
            (ep / cam).mkdir(parents=True)
            for t in range(n):
                if not (e == 1 and cam == "cam_right" and t == 1):
                    Image.fromarray(np.full((8, 12, 3), 10 * e + t, np.uint8)).save(ep / cam / f"{t:06d}.png")
        (ep / "lidar").mkdir()
        for t in range(n):
            rng.random((3 + 2 * t + e, 4), dtype=np.float32).tofile(ep / "lidar" / f"{t:06d}.bin")
        np.save(ep / "joints.npy", np.repeat(np.arange(n, dtype=np.float32)[:, None] + 10 * e, 7, 1))
        np.save(ep / "calib.npy", np.eye(3, dtype=np.float32)[None])  # not one row per frame
        (ep / "meta.json").write_text(json.dumps({"task": f"task {e}"}))
    return root


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    out = tmp_path / "frames"
    summary = episodes.pack(_log(tmp_path / "logs"), out, raw={"lidar": ("<f4", 4)})
    assert summary["episodes"] == 2 and summary["frames"] == sum(LENGTHS)
    assert summary["fields"] == {"cam_front.png": 8, "cam_right.png": 7, "lidar.npy": 8, "joints.npy": 8}
    assert sorted(summary["skipped"])[0].startswith("episode_0000/calib.npy (shape (1, 3, 3)")
    return out


@pytest.mark.timeout(30)
def test_windows_stay_inside_their_episode_and_flag_the_frames_repeated(packed: Path) -> None:
    w = episodes.Windows(packed, {"joints.npy": [-1, 0], "cam_front.png": [0, 1], "lidar.npy": 0,
                                  "cam_right.png": [0]})
    assert len(w) == 8 and w.meta["episode_0001"] == {"frames": 3, "meta.json": {"task": "task 1"}}
    first, last = w[0], w[4]  # episode 0: frames 0 and 4
    assert first["__key__"] == "episode_0000/000000" and (first["episode"], first["frame"]) == (0, 0)
    np.testing.assert_array_equal(first["joints.npy"][:, 0], [0, 0])  # frame -1 repeats frame 0
    assert first["joints_is_pad"].tolist() == [True, False]
    assert last["cam_front.png"][:, 0, 0, 0].tolist() == [4, 4] and last["cam_front_is_pad"].tolist() == [False, True]
    np.testing.assert_array_equal(w[5]["joints.npy"][:, 0], [10, 10])  # episode 1 starts afresh
    missing = w[6]  # episode 1, frame 1: no cam_right
    assert missing["cam_right.png"].shape == (1, 8, 12, 3) and not missing["cam_right.png"].any()
    assert missing["cam_right_is_pad"].tolist() == [True]
    assert missing["lidar.npy"].shape == (6, 4) and missing["lidar_is_pad"] is False
    dropped = episodes.Windows(packed, {"joints.npy": [-1, 0], "cam_front.png": [0, 1]}, pad="drop")
    assert len(dropped) == 3 + 1 and [dropped[i]["frame"] for i in range(4)] == [1, 2, 3, 1]


@pytest.mark.timeout(30)
def test_a_loader_of_windows_pads_point_clouds_splits_ranks_and_resumes(packed: Path) -> None:
    w = episodes.Windows(packed, {"joints.npy": range(-1, 2), "lidar.npy": [-1, 0]})
    collate = episodes.Collate(pad={"lidar.npy": None})
    batch = next(iter(feedline.Loader(w, batch_size=4, workers=2, seed=0, shuffle=False, collate=collate)))
    assert batch["joints.npy"].shape == (4, 3, 7) and batch["joints_is_pad"].dtype == torch.bool
    assert batch["lidar.npy"].shape == (4, 2, 9, 4) and batch["lidar_mask"].shape == (4, 2, 9)
    assert batch["lidar_mask"][0].sum(-1).tolist() == [3, 3] and batch["lidar_mask"][3].sum(-1).tolist() == [7, 9]
    seen = []
    for rank in (0, 1):
        loader = feedline.Loader(w, batch_size=2, workers=2, seed=0, rank=rank, world_size=2, collate=collate)
        seen.append([k for b in loader for k in b["__key__"]])
    assert len(seen[0]) == len(seen[1]) == 4 and not set(seen[0]) & set(seen[1])
    loader = feedline.Loader(w, batch_size=2, workers=2, seed=3, collate=collate)
    it = iter(loader)
    head = [k for _ in range(2) for k in next(it)["__key__"]]
    state = json.loads(json.dumps(loader.state_dict()))
    again = feedline.Loader(w, batch_size=2, workers=2, seed=3, collate=collate)
    again.load_state_dict(state)
    tail = [k for b in again for k in b["__key__"]]
    assert sorted(head + tail) == sorted(f"episode_{e:04d}/{t:06d}" for e, n in enumerate(LENGTHS) for t in range(n))
    val = torch.utils.data.Subset(w, w.indices(["episode_0001"]))  # a split by episode
    keys = [k for b in feedline.Loader(val, batch_size=3, workers=1, seed=0, collate=collate) for k in b["__key__"]]
    assert sorted(keys) == [f"episode_0001/{t:06d}" for t in range(3)] and w.indices([0]) == [0, 1, 2, 3, 4]


@pytest.mark.timeout(30)
def test_bad_offsets_and_scattered_episodes_are_named(packed: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'joint\.npy' are not in the dataset"):
        episodes.Windows(packed, {"joint.npy": [0]})
    raw = tmp_path / "raw"
    episodes.pack(tmp_path / "logs", raw)  # lidar/*.bin kept as bytes
    with pytest.raises(ConfigError, match=r"'lidar\.bin' have no decoder"):
        episodes.Windows(raw, {"lidar.bin": [0]})
    sweeps = episodes.Windows(raw, {"lidar.bin": [0, 1]}, decode={"lidar.bin": episodes.Rows("<f4", 4)})
    np.testing.assert_array_equal(sweeps[1]["lidar.bin"][0], episodes.Windows(packed, {"lidar.npy": 1})[0]["lidar.npy"])
    with pytest.raises(ConfigError, match="sequence of ints"):
        episodes.Windows(packed, {"joints.npy": "0"})
    with pytest.raises(ConfigError, match="no window fits"):
        episodes.Windows(packed, {"joints.npy": range(6)}, pad="drop")
    with feedline.DatasetWriter(tmp_path / "mixed") as writer:
        for key in ("a/0", "b/0", "a/1"):
            writer.write({"__key__": key, "x": np.zeros(2, np.float32)})
    with pytest.raises(ConfigError, match="episode 'a': its frames are not consecutive"):
        episodes.Windows(tmp_path / "mixed", {"x.npy": [0]})


@pytest.mark.timeout(30)
def test_pack_names_the_episode_recipe_for_sensor_folders(tmp_path: Path) -> None:
    notes = collect([_log(tmp_path / "logs")]).notes()
    assert any("--key episode" in n and "'cam_front', 'cam_right', 'lidar'" in n for n in notes)
    assert not any("--exclude '*/000000.bin'" in n for n in notes)  # before: advised leaving out the lidar
    notes = collect([tmp_path / "logs"], SourceRules(key="parallel")).notes()  # before: only a partial-field note
    assert len(notes) == 1 and "'episode_0000', 'episode_0001') for fields" in notes[0] and "--key episode" in notes[0]


@pytest.mark.timeout(30)
def test_a_sample_lacking_a_field_is_named_in_the_list_warning(tmp_path: Path) -> None:
    with feedline.DatasetWriter(tmp_path / "d") as writer:
        for i in range(8):
            sample = {"__key__": f"{i:03d}", "x": np.full(3, i, np.float32)}
            if i != 6:
                sample["y"] = np.zeros(2, np.float32)
            writer.write(sample)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        batches = list(feedline.Loader(tmp_path / "d", batch_size=4, workers=1, seed=0, shuffle=False))
    assert isinstance(batches[1]["y.npy"], list) and batches[1]["y.npy"][2] is None
    said = [str(w.message) for w in got if "'y.npy'" in str(w.message)]
    assert len(said) == 1 and "sample '006' lacks it" in said[0] and "decode_size" not in said[0]


@pytest.mark.timeout(30)
def test_pack_key_episode_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from feedline.cli.main import main

    logs = _log(tmp_path / "logs")
    main(["pack", str(logs), "--out", str(tmp_path / "d"), "--key", "episode", "--raw", "lidar:f4:4", "-q"])
    out, err = capsys.readouterr()
    assert "packed 2 episodes, 8 frames" in out and "'cam_right.png' (7 of 8)" in err
    assert "skipped episode_0000/calib.npy" in err
    w = episodes.Windows(tmp_path / "d", {"lidar.npy": [0]})
    assert w[7]["lidar.npy"].shape == (1, 3 + 2 * 2 + 1, 4)
    for args, needle in ((["--raw", "lidar:f4"], "--raw goes with --key episode"),
                         (["--key", "episode", "--raw", "lidar:f4"], "SENSOR:DTYPE:COLUMNS"),
                         (["--key", "episode", "--exclude", "*.json"], "without --exclude")):
        with pytest.raises(SystemExit) as info:
            main(["pack", str(logs), "--out", str(tmp_path / "e"), *args])
        assert info.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_image_transform_gives_a_window_of_frames_one_crop(packed: Path) -> None:
    from feedline import vision

    w = episodes.Windows(packed, {"cam_front.png": [-1, 0, 1]})
    sample = w[2]  # frames 1, 2, 3 of episode 0: flat images of values 1, 2, 3
    sample["cam_front.png"] += (np.arange(12, dtype=np.uint8) * 20)[None, None, :, None]  # a ramp across
    tf = vision.ImageTransform("cam_front.png", size=(4, 6), mean=None)
    vision._local.rng = np.random.default_rng(7)  # a fixed draw of crops (this thread's generator)
    shown = set()
    for _ in range(8):
        frames = tf(dict(sample))["cam_front.png"].astype(int)
        assert frames.shape == (3, 3, 4, 6)  # (T, C, h, w) before batching
        for t in (1, 2):  # the same crop and flip for every frame: only the frame's own +1, +2 differ
            assert np.abs(frames[t] - frames[0] - t).max() <= 1
        shown.add(frames[0, 0, 0, 0] < frames[0, 0, 0, -1])
    assert shown == {True, False}  # both flips drawn: a crop or flip per frame would have shown
    bad = vision.ImageTransform("cam_front.png", size=4, masks="cam_front_is_pad")
    with pytest.raises(ConfigError, match="must be a non-empty uint8 array"):
        bad(w[2])  # masks= goes with single images: the window is refused as before
