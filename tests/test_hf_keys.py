"""Keys of HF ``datasets`` (docs/hf.md, "Keys"): by content, computed once per Arrow table
where a stamp vouches for it, rehashed whenever the data can have changed, never
depending on HF's fingerprint or cache paths."""
from __future__ import annotations

import os

import pytest

from conftest import require

datasets = require("datasets")
np = require("numpy")
pa = require("pyarrow")

import memolab.hf.keys as hf_keys  # noqa: E402
from memolab.hashing import hash_value as H  # noqa: E402

# The scripts import datasets (numpy) before memolab and check no module list: their runs fork
# from a server that imported both (tests/zygote.py).
pytestmark = pytest.mark.preload("numpy", "datasets")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))


@pytest.fixture
def digests(monkeypatch):
    """Counts the tables whose content is actually hashed."""
    seen = []
    real = hf_keys.table_digest

    def counting(table):
        seen.append(table.num_rows)
        return real(table)

    monkeypatch.setattr(hf_keys, "table_digest", counting)
    return seen


def write_arrow(path, values, old=True):
    """An Arrow stream file as HF's cache holds them, aged past the racy window."""
    table = pa.table({"a": pa.array(values, type=pa.int64())})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    if old:
        os.utime(path, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))


def rewrite_in_place(path, values):
    """New values in the same file (same inode, same size), its mtime put back: a
    memory map of it sees them."""
    st = os.stat(path)
    tmp = str(path) + ".new"
    write_arrow(tmp, values, old=False)
    data = open(tmp, "rb").read()
    os.unlink(tmp)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_memory_mapped_dataset_is_hashed_once_while_its_file_is_unchanged(offline, tmp_path, digests, monkeypatch):
    # a file this fresh is never trusted (its ctime is now): pretend it has been quiet long enough
    monkeypatch.setattr(hf_keys, "RACY_NS", 0)
    path = tmp_path / "data.arrow"
    write_arrow(path, [1, 2, 3])
    ds = datasets.Dataset.from_file(str(path))
    assert type(ds.data).__name__ == "MemoryMappedTable"
    first = H(ds)
    assert H(ds) == first and H(ds.with_format("numpy")) != first  # the format counts
    assert len(digests) == 1  # the table's content was hashed once (the format copy shares it)
    # rewritten in place with its mtime put back: the ctime moved, so the stamp did
    rewrite_in_place(path, [2, 4, 6])
    assert list(ds["a"]) == [2, 4, 6]  # the mapping sees the new rows
    second = H(ds)
    assert second != first and len(digests) == 2
    assert H(ds) == second and len(digests) == 2


def test_a_file_modified_within_the_racy_window_is_not_trusted(offline, tmp_path, digests):
    path = tmp_path / "data.arrow"
    write_arrow(path, [1, 2, 3], old=False)
    ds = datasets.Dataset.from_file(str(path))
    H(ds), H(ds)
    assert len(digests) == 2  # rehashed: a rewrite within the same tick could keep its stat


def test_in_memory_data_of_unknown_ownership_is_rehashed_every_call(offline, digests):
    import pandas as pd

    # from_pandas shares the DataFrame's memory: a write to the frame is a write to the dataset
    frame = pd.DataFrame({"x": np.arange(1000)})
    ds = datasets.Dataset.from_pandas(frame)
    before = H(ds)
    frame.loc[0, "x"] = 5
    assert ds[0]["x"] == 5
    assert H(ds) != before
    assert len(digests) == 2
    # from_dict's own arrays look no different from the frame's: rehashed too
    built = datasets.Dataset.from_dict({"x": np.arange(10)})
    H(built), H(built)
    assert len(digests) == 4


def test_schema_metadata_keys_without_hf_fingerprint(offline):
    ds = datasets.Dataset.from_dict({"x": [1, 2, 3]})
    t = ds.data.table
    meta = dict(t.schema.metadata)
    import json

    doc = json.loads(meta[b"huggingface"])
    a = t.replace_schema_metadata({**meta, b"huggingface": json.dumps({**doc, "fingerprint": "aaaa"}).encode()})
    b = t.replace_schema_metadata({**meta, b"huggingface": json.dumps({**doc, "fingerprint": "bbbb"}).encode()})
    assert H(a) == H(b)
    c = t.replace_schema_metadata({**meta, b"huggingface": json.dumps({**doc, "other": 1}).encode()})
    assert H(c) != H(a)  # the rest of HF's metadata (features) is content


REWRITE = r'''
import json, os, sys

import datasets
import pyarrow as pa

from memolab import memo


@memo
def total(ds):
    with open("runs.txt", "a") as f:
        f.write("total\n")
    return int(sum(ds["a"]))


def write(path, values):
    table = pa.table({"a": pa.array(values, type=pa.int64())})
    with pa.OSFile(path + ".new", "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    data = open(path + ".new", "rb").read()
    os.unlink(path + ".new")
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:  # in place: same inode
        f.write(data)
    os.utime(path, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))


path = os.path.abspath("cache-0001.arrow")
write(path, [1, 2, 3])
ds = datasets.Dataset.from_file(path)
out = [total(ds), total(ds)]
write(path, [2, 4, 6])
out.append(total(ds))
write(path, [3, 6, 9])
out.append(total(ds))
print(json.dumps(out))
'''


@pytest.mark.slow
def test_a_dataset_whose_file_was_rewritten_in_place_is_keyed_by_its_new_rows(project, tmp_path):
    project.write("rewrite.py", REWRITE)
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert project.run_json("rewrite.py", env=env) == [6, 6, 12, 18]  # issue 25: 6, then 6 and 6 again
    assert (project.root / "runs.txt").read_text().split() == ["total"] * 3


UNHASHABLE = r'''
import json, sqlite3

import datasets

from memolab.hashing import hash_value

con = sqlite3.connect(":memory:")


def lookup(batch):
    con.execute("select 1")  # HF cannot fingerprint a function holding a connection
    return {"y": [v * 2 for v in batch["x"]]}


ds = datasets.Dataset.from_dict({"x": list(range(100))}).map(lookup, batched=True)
print(json.dumps({"key": hash_value(ds), "fingerprint": ds._fingerprint}))
'''


@pytest.mark.slow
def test_a_map_hf_cannot_fingerprint_keys_alike_in_every_process(project, tmp_path):
    project.write("unhashable.py", UNHASHABLE)
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    a = project.run_json("unhashable.py", env=env)
    b = project.run_json("unhashable.py", env=env)
    assert a["fingerprint"] != b["fingerprint"]  # HF's: random in each process
    assert a["key"] == b["key"]


LOADED = r'''
import json, sys

import datasets
import numpy as np

import memolab.hf.keys as hf_keys
from memolab import memo
from memolab.hashing import hash_value

hashed = []
real = hf_keys.table_digest
hf_keys.table_digest = lambda t: hashed.append(t.num_rows) or real(t)


@memo
def make():
    return datasets.Dataset.from_dict({"x": np.arange(300_000), "s": [str(i) for i in range(300_000)]})


ds = make()
keys = [hash_value(ds), hash_value(ds), hash_value(ds.with_format("torch"))]
out = {"keys": keys, "hashed": len(hashed), "kind": type(ds.data).__name__}
sub = ds.select(range(100, 200))  # a slice of the loaded table: new Arrow objects over the blobs
out["select"] = [hash_value(sub), hash_value(sub)]
out["hashed_after_select"] = len(hashed)
print(json.dumps(out))
'''


@pytest.mark.slow
def test_a_loaded_dataset_keys_as_stored_without_rehashing(project, tmp_path):
    project.write("loaded.py", LOADED)
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    computed = project.run_json("loaded.py", env=env)
    loaded = project.run_json("loaded.py", env=env)
    assert computed["kind"] == "InMemoryTable" and loaded["kind"] == "InMemoryTable"
    assert loaded["keys"][:2] == computed["keys"][:2] and loaded["keys"][2] == computed["keys"][2]
    assert loaded["select"] == computed["select"]
    # the loaded rows were never hashed in the loading process (the digest stored with them);
    # the slice once, then trusted: all its memory lies in the blobs' read-only mappings
    assert loaded["hashed"] == 0
    assert loaded["hashed_after_select"] == 1
    assert computed["hashed_after_select"] - computed["hashed"] == 2  # computed here: from_dict memory


def test_what_a_dataset_key_holds_besides_its_rows(offline):
    labels = datasets.ClassLabel(names=["neg", "pos"])
    base = datasets.Dataset.from_dict({"x": [1, 2, 3], "y": [0, 1, 0]},
                                      features=datasets.Features({"x": datasets.Value("int64"), "y": labels}))
    d = H(base)
    renamed = datasets.Dataset.from_dict(
        {"x": [1, 2, 3], "y": [0, 1, 0]},
        features=datasets.Features({"x": datasets.Value("int64"), "y": datasets.ClassLabel(names=["bad", "good"])}))
    others = [
        renamed,  # the same integers, other label names
        base.with_format("numpy"),
        base.with_format("numpy", columns=["x"]),
        datasets.Dataset.from_dict({"x": [1, 2, 3], "y": [0, 1, 0]}, features=base.features, split="train"),
        base.select([0, 2, 1]),
        base.cast_column("x", datasets.Value("int32")),
    ]
    keys = [H(o) for o in others]
    assert d not in keys and len(set(keys)) == len(keys)
    described = datasets.Dataset.from_dict({"x": [1, 2, 3], "y": [0, 1, 0]}, features=base.features)
    described.info.description = "changed"
    assert H(described) != d
    same = datasets.Dataset.from_dict({"x": [1, 2, 3], "y": [0, 1, 0]}, features=base.features)
    same._fingerprint = "something else"
    assert H(same) == d  # HF's name for its cache is not content

    class Mine(datasets.Dataset):  # a user's subclass: its code counts, as for any class
        pass

    mine = Mine(base.data)
    assert H(mine) != H(datasets.Dataset(base.data))


def test_a_concatenation_is_trusted_only_as_far_as_every_block_is(offline, tmp_path, digests, monkeypatch):
    monkeypatch.setattr(hf_keys, "RACY_NS", 0)
    path = tmp_path / "data.arrow"
    write_arrow(path, [1, 2, 3])
    mapped = datasets.Dataset.from_file(str(path))
    doubled = datasets.concatenate_datasets([mapped, mapped])  # two memory-mapped blocks
    assert type(doubled.data).__name__ == "ConcatenationTable"
    H(doubled), H(doubled)
    assert len(digests) == 1
    import pandas as pd

    frame = pd.DataFrame({"b": np.arange(3)})
    widened = datasets.concatenate_datasets([mapped, datasets.Dataset.from_pandas(frame)], axis=1)
    before = H(widened)
    frame.loc[0, "b"] = 9  # the in-memory block shares the frame's memory
    assert H(widened) != before
    assert len(digests) == 3  # the concatenation with an untrusted block: rehashed every call
