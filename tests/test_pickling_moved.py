"""Results stored before the layout of issue 56 name memolab's modules by their old
paths (``memolab.files``, ``memolab.memo``): they still load, through the one map of
``memolab.pickling.moved``, and a module that is really gone is still a miss."""
# relayout: leave this file alone (it names the old module paths on purpose)
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import memolab
from memolab import pickling
from memolab.calls import memo as memo_module
from memolab.errors import StoreMiss
from memolab.hashing.files import File
from memolab.pickling import moved
from memolab.store.inline import loads_result


def _as_stored_before(value: object) -> bytes:
    """``value`` pickled as 0.3.0 wrote it: memolab's modules by their old names (protocol 2
    writes a global as text, so renaming it in the bytes is exact)."""
    data = pickle.dumps(value, protocol=2)
    for old, new in moved.MOVED.items():
        data = data.replace(f"c{new}\n".encode(), f"c{old}\n".encode())
    return data


def test_a_result_naming_an_old_module_path_loads(tmp_path: Path):
    f = tmp_path / "data.txt"
    f.write_text("abc")
    value = {"file": File(f), "fn": memo_module._memo_by_name, "cls": File}
    data = _as_stored_before(value)
    assert b"cmemolab.files\n" in data and b"cmemolab.memo\n" in data
    assert b"memolab.hashing.files" not in data
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(data)  # what a plain unpickler makes of it
    for load in (loads_result, pickling.loads):  # the store's path (inline rows and blobs), and pickling's
        got = load(data, ())
        assert type(got["file"]) is File and Path(got["file"].path) == Path(f)
        assert got["fn"] is memo_module._memo_by_name and got["cls"] is File
    assert memolab.File is File


def test_a_module_that_is_really_gone_is_still_a_miss():
    data = b"cmemolab.no_such_module\nThing\n."
    for load in (loads_result, pickling.loads):
        with pytest.raises(StoreMiss):
            load(data, ())


def test_the_map_names_every_old_module_once_and_every_new_one_exists():
    import importlib

    assert len(set(moved.MOVED.values())) == len(moved.MOVED)
    for old, new in moved.MOVED.items():
        importlib.import_module(new)
        if old == "memolab.arrow":  # now a package: its old names live in arrow.keys
            assert not hasattr(importlib.import_module(old), "register_arrow")
            assert moved.loads(b"cmemolab.arrow\nregister_arrow\n.") is importlib.import_module(new).register_arrow
            continue
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
