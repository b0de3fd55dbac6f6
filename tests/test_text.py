"""feedline.text: documents -> token blocks in shards -> fixed-length windows for a GPT (round 13's NLP newcomer)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import feedline
from feedline import text
from feedline.errors import ConfigError


def _docs(n: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(1, 500, rng.integers(1, 30)).tolist() for _ in range(n)]


@pytest.mark.timeout(60)
def test_token_blocks_make_every_token_a_target_once_across_ranks_and_a_resume(tmp_path: Path) -> None:
    docs = _docs()
    got = text.write_token_blocks(iter(docs), tmp_path / "tok", block=8, eot=0)
    stream = np.concatenate([np.array([*d, 0]) for d in docs])
    n = (len(stream) - 1) // 8
    assert got == {"documents": 40, "tokens": len(stream), "blocks": n, "dropped_tokens": len(stream) - 1 - n * 8}
    ds = feedline.open_dataset(tmp_path / "tok")
    assert ds.schema["tokens.npy"].kind == "npy" and ds.schema["tokens.npy"].shape == (9,)  # a column at this block size, read into rows at real ones
    # two ranks, shuffled: disjoint halves; together with the rest, every block in stream order
    seen = {}
    for rank in (0, 1):
        with feedline.Loader(ds, batch_size=4, rank=rank, world_size=2, workers=1, seed=3) as loader:
            for batch in loader:
                x, y = text.inputs_targets(batch)
                assert x.dtype == torch.int64 and x.shape == (4, 8) and torch.equal(x[:, 1:], y[:, :-1])
                for key, row in zip(batch["__key__"], batch["tokens.npy"], strict=True):
                    assert key not in seen
                    seen[key] = row.numpy()
    assert len(seen) == n // 8 * 8  # drop_last: whole batches on both ranks
    with feedline.Loader(ds, batch_size=n, shuffle=False, drop_last=False, workers=1) as loader:
        blocks = next(iter(loader))["tokens.npy"].numpy()
    np.testing.assert_array_equal(np.concatenate([blocks[:, :-1].ravel(), blocks[-1, -1:]]), stream[:n * 8 + 1])
    # resume mid-epoch from plain JSON: the rest of the epoch, nothing repeated
    with feedline.Loader(ds, batch_size=4, workers=1, seed=5) as loader:
        keys = [b["__key__"] for b in loader]
    with feedline.Loader(ds, batch_size=4, workers=1, seed=5) as loader:
        it = iter(loader)
        head = [next(it)["__key__"] for _ in range(3)]
        state = json.loads(json.dumps(loader.state_dict()))
    with feedline.Loader(ds, batch_size=4, workers=1, seed=5) as loader:
        loader.load_state_dict(state)
        assert head + [b["__key__"] for b in loader] == keys


@pytest.mark.timeout(30)
def test_documents_reads_jsonl_json_and_text_files_and_names_a_bad_record(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "books").mkdir(parents=True)
    (corpus / "a.jsonl").write_text('{"text": "one"}\n\n"two"\n')
    (corpus / "b.json").write_text(json.dumps([{"text": "three"}, "four"]))
    (corpus / "books" / "c.txt").write_text("five six")
    (corpus / "notes.csv").write_text("x\n")
    (corpus / ".hidden.txt").write_text("never")
    with pytest.warns(RuntimeWarning, match=r"skipped 1 file\(s\) of other types: notes\.csv"):
        assert list(text.documents(corpus)) == ["one", "two", "three", "four", "five six"]
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"content": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl, record 2: it has no text field 'text' \(it has \['content'\]\)"):
        list(text.documents(tmp_path / "bad.jsonl"))
    with pytest.raises(ConfigError, match="does not exist"):
        list(text.documents(tmp_path / "nope"))


def test_token_blocks_refuse_ids_that_do_not_fit_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"document 1 has a token id outside uint16 \(3\.\.70000\)") as info:
        text.write_token_blocks([[1, 2], [3, 70000]], tmp_path / "t", block=4)
    assert "uint32" in info.value.fix and not (tmp_path / "t" / "manifest.json").exists()
    with pytest.raises(ConfigError, match="block must be a positive int"):
        text.write_token_blocks([[1]], tmp_path / "t", block=0)
    with pytest.raises(ConfigError, match="not a flat list of token ids"):
        text.write_token_blocks(["hello world"], tmp_path / "t", block=4)
