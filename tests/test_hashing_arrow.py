"""Arrow data keys by its value (docs/hashing.md, "Arrow tables and HF datasets").

A table's key is its schema and the logical data of its columns: not how the
data is chunked, sliced or held (mutable or read-only buffers, memory maps),
which is what changes when a table is stored and loaded again. HF ``datasets``
tables key by the rows they hold, in memory or memory-mapped alike, and a
memory-mapped one never by its cache file's path alone.
"""
from __future__ import annotations

import pytest

from conftest import require

pa = require("pyarrow")
np = require("numpy")

from memolab.hashing import hash_value as H  # noqa: E402


def columns():
    return {
        "i": pa.array([1, None, 3, 4, 5, None, 7]),
        "f": pa.array(np.linspace(0, 1, 7)),
        "s": pa.array(["a", None, "ccc", "", "ee", "f", None]),
        "b": pa.array([True, False, None, True, True, False, True]),
        "l": pa.array([[1], [], None, [2, 3], [4], [5, 6, 7], []]),
        "st": pa.array([{"x": i, "y": str(i)} if i != 2 else None for i in range(7)]),
        "d": pa.array(["u", "v", "u", "u", None, "v", "w"]).dictionary_encode(),
        "fl": pa.array([[i, -i] for i in range(7)], type=pa.list_(pa.int16(), 2)),
        "ts": pa.array(np.arange(7).astype("datetime64[s]")),
        "m": pa.array([[("k", i)] for i in range(7)], type=pa.map_(pa.string(), pa.int64())),
    }


def test_a_table_keys_the_same_however_it_is_chunked_or_sliced():
    t = pa.table(columns())
    parts = pa.concat_tables([t.slice(0, 3), t.slice(3, 1), t.slice(4)])
    assert all(c.num_chunks == 3 for c in parts.columns)
    assert H(parts) == H(t)
    assert H(parts.combine_chunks()) == H(t)
    # a slice keys as the copy it stands for: offsets and the parent's spare rows do not count
    copy = pa.table({k: pa.array(t.column(k).to_pylist()[2:6], type=t.schema.field(k).type) for k in t.column_names})
    assert H(t.slice(2, 4)) == H(copy)


def test_mutable_and_read_only_buffers_of_the_same_bytes_key_alike():
    # the store hands results back over read-only mappings of their blobs; pickle's protocol-4
    # form (bytearray vs bytes) must not reach the key
    data = np.arange(100_000, dtype=np.int64).tobytes()
    mutable = pa.Array.from_buffers(pa.int64(), 100_000, [None, pa.py_buffer(bytearray(data))])
    frozen = pa.Array.from_buffers(pa.int64(), 100_000, [None, pa.py_buffer(data)])
    assert mutable.buffers()[1].is_mutable and not frozen.buffers()[1].is_mutable
    assert H(pa.table({"x": mutable})) == H(pa.table({"x": frozen}))
    assert H(mutable) == H(frozen)


def test_any_change_of_value_schema_or_metadata_changes_the_key():
    t = pa.table(columns())
    d = H(t)
    changed = [
        t.set_column(0, "i", pa.array([1, None, 3, 4, 5, None, 8])),  # a value
        t.set_column(0, "i", pa.array([1, 2, None, 4, 5, None, 7])),  # where a null is
        t.set_column(2, "s", pa.array(["a", None, "cc", "c", "ee", "f", None])),  # same bytes, other lengths
        t.set_column(3, "b", pa.array([True, True, None, True, True, False, True])),
        t.set_column(4, "l", pa.array([[1], [2], None, [3], [4], [5, 6, 7], []])),
        t.rename_columns(["j"] + t.column_names[1:]),  # a name
        t.set_column(0, "i", t.column("i").cast(pa.int32())),  # a type
        t.set_column(2, "s", t.column("s").cast(pa.large_string())),
        t.replace_schema_metadata({"source": "a"}),
    ]
    digests = [H(x) for x in changed]
    assert d not in digests and len(set(digests)) == len(digests)
    # metadata is a mapping: its order is not content
    assert H(t.replace_schema_metadata({"a": "1", "b": "2"})) == H(t.replace_schema_metadata({"b": "2", "a": "1"}))


def test_tables_batches_and_arrays_key_apart_and_by_value():
    t = pa.table({"a": [1, 2, 3]})
    assert len({H(t), H(t.to_batches()[0]), H(t.column("a")), H(t.column("a").chunk(0))}) == 4
    assert H(pa.record_batch({"a": [1, 2, 3]})) == H(t.to_batches()[0])
    assert H(pa.chunked_array([[1], [2, 3]])) == H(pa.chunked_array([[1, 2], [3]]))
    assert H(pa.array([1, 2, 3]).slice(1)) == H(pa.array([2, 3]))
    # a table held twice is a back-reference, as for any container
    assert H((t, t)) != H((t, pa.table({"a": [1, 2, 3]})))


def test_layouts_read_through_ipc_hash_deterministically():
    # unions and run-end encoded arrays are keyed by Arrow's IPC encoding
    u = pa.UnionArray.from_sparse(pa.array([0, 1, 0], type=pa.int8()),
                                  [pa.array([1, 2, 3]), pa.array(["a", "b", "c"])])
    r = pa.RunEndEncodedArray.from_arrays([2, 3], [1.0, 2.0])
    assert H(pa.table({"u": u, "r": r})) == H(pa.table({"u": u, "r": r}))
    r2 = pa.RunEndEncodedArray.from_arrays([2, 3], [1.0, 3.0])
    assert H(pa.table({"u": u, "r": r2})) != H(pa.table({"u": u, "r": r}))


# -- Hugging Face datasets ---------------------------------------------------------------------


@pytest.fixture
def hf_offline(tmp_path, monkeypatch):
    datasets = require("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return datasets


def test_a_dataset_keys_the_same_in_memory_and_memory_mapped(hf_offline, tmp_path):
    datasets = hf_offline
    ds = datasets.Dataset.from_dict({"x": np.arange(5000), "t": [str(i) for i in range(5000)]})
    ds.save_to_disk(str(tmp_path / "saved"), max_shard_size="20KB")
    loaded = datasets.load_from_disk(str(tmp_path / "saved"))
    assert type(ds.data).__name__ == "InMemoryTable"
    assert type(loaded.data).__name__ != "InMemoryTable"  # memory-mapped (concatenated shards)
    assert loaded.data.table.column("x").num_chunks > 1
    assert H(loaded) == H(ds)
    assert H(loaded.select(range(10))) == H(ds.select(range(10)))  # an indices table counts by content too
    assert H(ds.select(range(10))) != H(ds.select(range(1, 11)))
    assert H(ds) != H(datasets.Dataset.from_dict({"x": np.arange(5000), "t": [str(i + 1) for i in range(5000)]}))


HF_SCRIPT = r'''
import json, os, sys

import datasets
import pyarrow as pa

from memolab import memo


@memo
def total(ds):
    return int(sum(ds["a"]))


path = os.path.abspath("rows.csv")
ds = datasets.load_dataset("csv", data_files=path, split="train", cache_dir=os.path.abspath("hf-cache"))
cache = ds.cache_files[0]["filename"]
if sys.argv[1] == "rewrite":
    # the cache file rewritten in place (as a forced re-download or another writer would):
    # same path, other rows
    table = pa.table({"a": pa.array([10, 20], type=ds.features.arrow_schema.field("a").type)})
    table = table.replace_schema_metadata(ds.data.table.schema.metadata)
    with pa.OSFile(cache + ".tmp", "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    os.replace(cache + ".tmp", cache)
    sys.exit(0)
print(json.dumps({"rows": list(ds["a"]), "total": total(ds), "cache": cache}))
'''


@pytest.mark.slow
def test_a_rewritten_cache_file_changes_the_dataset_key(project, tmp_path):
    require("datasets")
    project.write("rows.csv", "a\n1\n2\n")
    project.write("job.py", HF_SCRIPT)
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    first = project.run_json("job.py", "read", env=env)
    assert first["rows"] == [1, 2] and first["total"] == 3
    project.run("job.py", "rewrite", env=env)
    second = project.run_json("job.py", "read", env=env)
    assert second["cache"] == first["cache"]  # the same file, read again: HF's cache was reused
    assert second["rows"] == [10, 20]
    assert second["total"] == 30  # keyed by path, the result of the old rows came back (3)
