"""Round 15 of hostile inputs (issue 13): user code in workers that raises what a sample's
code should not (``SystemExit``, ``KeyboardInterrupt``, an exception whose ``str()`` raises
or that does not unpickle) and a dataset whose ``__len__`` is not a length
(``sweep_round15.py``, run by ``hostile_sweep.py``). A quick test for each failure the round
found and closed."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from faults_helpers import Numbers

import feedline
from feedline.errors import ConfigError, WorkerError


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")


class NoPickle(Exception):
    """Pickles as ``NoPickle("1/2")``, which its ``__init__`` refuses."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")


def _raise_at(sample: dict[str, Any], what: str, at: int = 5) -> dict[str, Any]:
    if int(sample["y"]) == at:
        if what == "systemexit":
            raise SystemExit(0)
        if what == "keyboardinterrupt":
            raise KeyboardInterrupt
        if what == "badstr":
            raise BadStr()
        raise NoPickle(1, 2)
    return sample


def _first_error(worker_type: str, what: str) -> WorkerError:
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type=worker_type, shuffle=False,
                         transform=functools.partial(_raise_at, what=what), timeout=60) as loader, \
            pytest.raises(WorkerError) as info:
        list(loader)
    return info.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["systemexit", "keyboardinterrupt", "badstr"])
def test_a_transform_raising_what_no_sample_should_is_a_worker_error_naming_the_key(what: str) -> None:
    """Before (thread workers): ``SystemExit``/``KeyboardInterrupt`` ended the epoch in the
    loop as themselves; ``BadStr`` escaped as the ``RuntimeError`` of its ``str()``."""
    err = _first_error("thread", what)
    assert err.key == "5" and err.place["stage"] == "transform"
    assert type(err.__cause__).__name__ == {"systemexit": "SystemExit", "keyboardinterrupt": "KeyboardInterrupt",
                                            "badstr": "BadStr"}[what]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["systemexit", "nopickle"])
def test_process_workers_name_the_key_of_an_exit_or_an_exception_that_does_not_unpickle(what: str) -> None:
    """Before: ``sys.exit()`` in a transform was ``WorkerDied`` "exited with code 0" and no key;
    an exception whose ``__init__`` refuses its pickled args reached the loop as a raw
    ``TypeError`` from unpickling it."""
    err = _first_error("process", what)
    assert err.key == "5" and err.place["stage"] == "transform"
    assert ("SystemExit in transform" if what == "systemexit" else "NoPickle in transform: 1/2") in str(err)


class Lying(Numbers):
    def __init__(self, length: Any) -> None:
        super().__init__(8)
        self.length = length

    def __len__(self) -> Any:
        return self.length


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("length", "words"), [(-3, "returned -3"), (40.5, "returned 40.5"), ("8", "returned '8'")])
def test_a_dataset_whose_len_is_not_a_length_is_a_config_error(length: Any, words: str) -> None:
    """Before: Python's ``ValueError`` "__len__() should return >= 0" or ``TypeError``, raw."""
    with pytest.raises(ConfigError, match=words) as info:
        feedline.Loader(Lying(length), batch_size=4, workers=1)
    assert info.value.field == "dataset"
