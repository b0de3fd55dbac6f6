"""``python -m feedline.demo.examples``: the README's example inputs, written once, never over
a user's folders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from feedline.demo.examples import write_examples
from feedline.errors import ConfigError


def test_examples_write_the_readme_inputs_and_refuse_to_overwrite(tmp_path: Path) -> None:
    made = write_examples(tmp_path / "try")
    assert [p.name for p in made] == ["train", "photos", "old-shards", "episodes", "corpus", "speech",
                                      "kaggle", "scans"]
    assert len((tmp_path / "try" / "kaggle" / "train.csv").read_text().splitlines()) == 1 + 40
    assert len(list((tmp_path / "try" / "kaggle" / "images").glob("*.png"))) == 8
    assert len(list((tmp_path / "try" / "scans" / "masks").glob("*.npy"))) == 6
    assert len((tmp_path / "try" / "speech" / "metadata.csv").read_text().splitlines()) == 1 + 24
    assert len(list((tmp_path / "try" / "speech" / "wavs").glob("*.wav"))) == 24
    assert sorted(p.name for p in (tmp_path / "try" / "corpus").rglob("*.*")) == [
        "book0.txt", "book1.txt", "part-000.jsonl", "part-001.jsonl"]
    assert len(list((tmp_path / "try" / "episodes").glob("episode_*/cam_wrist/*.jpg"))) == 12 + 5 + 9
    assert sorted(p.name for p in (tmp_path / "try" / "train").iterdir()) == ["__MACOSX", "cats", "dogs", "owls"]
    assert len(list((tmp_path / "try" / "photos").glob("*.cls"))) == 40
    mine = tmp_path / "try" / "train" / "cats" / "IMG_2023.01.00_1000.jpg"
    before = mine.read_bytes()
    with pytest.raises(ConfigError) as e:
        write_examples(tmp_path / "try")
    assert e.value.place["path"] == str(tmp_path / "try" / "train") and e.value.fix
    assert mine.read_bytes() == before
    again = subprocess.run([sys.executable, "-m", "feedline.demo.examples", str(tmp_path / "try")],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "feedline: error: already exists" in again.stderr, again.stderr
