"""HF ``datasets`` returned by memoized functions are stored as their Arrow data (docs/hf.md).

Every case runs real scripts in fresh processes against a temporary ``HF_HOME``,
offline, on local files: a result must come back from memolab's blobs alone,
whatever happened to HF's cache or to the files the computation wrote.
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import require

require("datasets")
pytestmark = [pytest.mark.slow, pytest.mark.preload("numpy", "datasets")]  # runs fork from a server (tests/zygote.py)


def hf_env(tmp_path):
    return {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
            "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"), "TOKENIZERS_PARALLELISM": "false"}


BUILD = r'''
import json, sys

import datasets

from memolab import memo


@memo
def build(n):
    with open("runs.txt", "a") as f:
        f.write(f"{n}\n")
    ds = datasets.Dataset.from_dict({"x": list(range(n))})
    ds.save_to_disk("out")  # the same folder for every n
    return datasets.load_from_disk("out")


ds = build(int(sys.argv[1]))
print(json.dumps({"rows": len(ds), "sum": sum(ds["x"])}))
'''


def test_a_result_saved_to_one_folder_comes_back_with_its_own_rows(project, tmp_path):
    # the wrong result of issue 25: stored as paths into "out", build(20) then build(10)
    # hit and returned the rows the other call had written there last
    project.write("build.py", BUILD)
    env = hf_env(tmp_path)
    assert project.run_json("build.py", "20", env=env) == {"rows": 20, "sum": 190}
    assert project.run_json("build.py", "10", env=env) == {"rows": 10, "sum": 45}
    assert project.run_json("build.py", "20", env=env) == {"rows": 20, "sum": 190}  # "out" holds 10 rows now
    shutil.rmtree(project.root / "out")
    assert project.run_json("build.py", "10", env=env) == {"rows": 10, "sum": 45}
    assert (project.root / "runs.txt").read_text().split() == ["20", "10"]  # the last two were hits


PIPELINE = r'''
import json, os, sys, warnings

import datasets
import numpy as np

from memolab import memo
from memolab.hashing import hash_value


def double(batch):
    return {"y": [2 * v for v in batch["x"]], "t": [s.upper() for s in batch["s"]]}


@memo
def prepare(path):
    with open("runs.txt", "a") as f:
        f.write("prepare\n")
    ds = datasets.load_dataset("csv", data_files=path, split="train")
    mapped = ds.map(double, batched=True)
    parts = mapped.train_test_split(test_size=0.25, seed=0)
    return {
        "plain": ds,
        "mapped": mapped,
        "dict": parts,
        "torch": mapped.with_format("torch", columns=["x", "y"]),
        "numpy": mapped.with_format("numpy"),
        "picked": mapped.shuffle(seed=1).select(range(7)),
        "numbers": datasets.Dataset.from_dict({"v": np.arange(50_000, dtype=np.float32)}),
    }


def describe(out):
    import torch

    d = {k: {"rows": len(v) if not isinstance(v, datasets.DatasetDict) else {s: len(p) for s, p in v.items()},
             "format": getattr(v, "format", {}).get("type") if not isinstance(v, datasets.DatasetDict) else None,
             "key": hash_value(v), "kind": type(getattr(v, "_data", None)).__name__}
         for k, v in out.items()}
    d["mapped_rows"] = out["mapped"][:5]
    d["features"] = str(out["mapped"].features)
    d["picked_x"] = list(out["picked"]["x"])
    d["split_x"] = sorted(list(out["dict"]["test"]["x"]))
    d["numbers_sum"] = float(np.asarray(out["numbers"]["v"]).sum())
    t = out["torch"][:4]
    d["torch_rows"] = [type(t["x"]).__name__, t["y"].tolist()]
    d["numpy_type"] = type(out["numpy"][:3]["y"]).__name__
    d["cache_files"] = {k: [c["filename"] for c in v.cache_files] for k, v in out.items()
                        if not isinstance(v, datasets.DatasetDict)}
    # a loaded dataset works on: .map, and a torch DataLoader over its torch format
    again = out["mapped"].map(lambda b: {"z": [v + 1 for v in b["y"]]}, batched=True)
    d["again"] = list(again["z"])[:3]
    loader = torch.utils.data.DataLoader(out["torch"], batch_size=8)
    d["loader"] = [b["y"].tolist() for b in loader][0]
    return d


with warnings.catch_warnings():
    warnings.simplefilter("error", category=UserWarning)  # no "stored result cannot be used; recomputing"
    print(json.dumps(describe(prepare(os.path.abspath("rows.csv")))))
'''


def test_datasets_round_trip_without_hf_cache(project, tmp_path):
    rows = "x,s\n" + "".join(f"{i},w{i}\n" for i in range(40))
    project.write("rows.csv", rows)
    project.write("pipeline.py", PIPELINE)
    env = hf_env(tmp_path)
    first = project.run_json("pipeline.py", env=env)
    assert first["plain"]["kind"] == "MemoryMappedTable"  # computed: HF's own cache files
    shutil.rmtree(tmp_path / "hf")  # HF's cache gone (another machine, a cleaned cache)
    second = project.run_json("pipeline.py", env=env)
    assert (project.root / "runs.txt").read_text().split() == ["prepare"]  # a hit, from memolab's blobs alone
    for k in ("plain", "mapped", "dict", "torch", "numpy", "picked", "numbers"):
        assert second[k]["rows"] == first[k]["rows"], k
        assert second[k]["format"] == first[k]["format"], k
        # the key of a loaded dataset is the key of the dataset that was stored
        assert second[k]["key"] == first[k]["key"], k
    assert second["plain"]["kind"] == "InMemoryTable"
    assert all(not files for files in second["cache_files"].values())  # no path into HF's cache
    for k in ("mapped_rows", "features", "picked_x", "split_x", "numbers_sum", "torch_rows", "numpy_type", "again", "loader"):
        assert second[k] == first[k], k
    assert first["mapped_rows"]["t"] == ["W0", "W1", "W2", "W3", "W4"]
    assert first["torch_rows"][0] == "Tensor" and first["numpy_type"] == "ndarray"


BLOBS = r'''
import sys

import datasets
import numpy as np

from memolab import memo


@memo
def base():
    return datasets.Dataset.from_dict({"a": np.arange(200_000), "b": np.arange(200_000) * 2.0})


@memo
def widened():
    ds = base()
    return ds.add_column("c", np.ones(len(ds)))


print(len(widened()))
'''


def test_columns_are_content_addressed_blobs_shared_between_results(project, tmp_path, blob_results):
    project.write("blobs.py", BLOBS)
    project.run("blobs.py", env=hf_env(tmp_path))
    sizes = sorted(p.stat().st_size for p in (project.store / "blobs").rglob("*") if p.is_file())
    big = [s for s in sizes if s >= 1_600_000]
    # a, b (base), and c (widened): a and b are not stored twice
    assert len(big) == 3, sizes


def features_zoo(datasets, np):
    """Every layout a dataset column takes, nulls and slices included."""
    n = 3000
    feats = datasets.Features({
        "i": datasets.Value("int32"),
        "f": datasets.Value("float64"),
        "s": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["a", "b", "c"]),
        "seq": datasets.List(datasets.Value("int64")),
        "grid": datasets.Array2D(shape=(2, 3), dtype="float32"),
        "rec": {"k": datasets.Value("string"), "v": datasets.Value("int64")},
        "b": datasets.Value("bool"),
        "blob": datasets.Value("binary"),
    })
    rows = {
        "i": [i if i % 7 else None for i in range(n)],
        "f": np.linspace(0, 1, n).tolist(),
        "s": [None if i % 11 == 0 else f"row {i}" * (i % 5) for i in range(n)],
        "label": [i % 3 for i in range(n)],
        "seq": [list(range(i % 6)) if i % 13 else None for i in range(n)],
        "grid": [np.full((2, 3), i, dtype=np.float32) for i in range(n)],
        "rec": [{"k": str(i), "v": i} for i in range(n)],
        "b": [i % 2 == 0 for i in range(n)],
        "blob": [bytes([i % 256]) * (i % 4) for i in range(n)],
    }
    return datasets.Dataset.from_dict(rows, features=feats)


@pytest.mark.parametrize("inline", [False, True], ids=["blobs", "inline"])
def test_every_column_layout_round_trips_through_the_store(tmp_store, tmp_path, monkeypatch, inline):
    import datasets
    import numpy as np

    import memolab
    import memolab.store

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(memolab.store.local, "INLINE_MAX", 1 << 30 if inline else 0)
    zoo = features_zoo(datasets, np)
    cases = {
        "zoo": zoo,
        "sliced": zoo.select(range(1000, 1500)),  # contiguous: a slice of the table, not indices
        "picked": zoo.select([5, 3, 2999, 0]),  # an indices table
        "empty": zoo.select([]),
        "filtered": zoo.filter(lambda r: r["label"] == 1),
        "formatted": zoo.with_format("numpy", columns=["f", "grid"], output_all_columns=True),
        "no_columns": zoo.remove_columns(zoo.column_names),  # rows without columns: only their count
    }

    @memolab.memo
    def give(name):
        return cases[name]

    for name, ds in cases.items():
        give(name)
        give.store().forget()  # the next call loads from the store
        back = give(name)
        assert back is not ds and type(back.data).__name__ == "InMemoryTable", name
        assert back.features == ds.features and back.format == ds.format and len(back) == len(ds), name
        assert back.data.table.equals(ds.data.table), name  # the rows, not just their key
        assert back.to_dict() == ds.to_dict() if not ds.format["type"] else True, name
        if len(ds):
            np.testing.assert_equal(back[:3], ds[:3])
        assert memolab.hashing.hash_value(back) == memolab.hashing.hash_value(ds), name


def test_an_iterable_dataset_is_stored_by_its_configuration(tmp_store, tmp_path, monkeypatch):
    import datasets
    import numpy as np

    import memolab

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    def rows(n):
        for i in range(n):
            yield {"x": i}

    @memolab.memo
    def streams(n):
        over_table = datasets.Dataset.from_dict({"x": np.arange(n)}).to_iterable_dataset(num_shards=2)
        generated = datasets.IterableDataset.from_generator(rows, gen_kwargs={"n": n})
        return over_table, generated

    streams(100)
    streams.store().forget()
    over_table, generated = streams(100)
    assert sum(r["x"] for r in over_table) == sum(range(100))  # its table was stored as data
    assert sum(r["x"] for r in generated) == sum(range(100))  # its generator, by code


NO_CACHING = r'''
import json, os

import datasets

from memolab import memo

datasets.disable_caching()  # .map writes to a temporary folder, deleted when the process ends


@memo
def prepare(path):
    with open("runs.txt", "a") as f:
        f.write("prepare\n")
    ds = datasets.load_dataset("csv", data_files=path, split="train")
    return ds.map(lambda b: {"y": [v * 10 for v in b["x"]]}, batched=True)


ds = prepare(os.path.abspath("rows.csv"))
print(json.dumps({"y": list(ds["y"]), "files": [c["filename"] for c in ds.cache_files]}))
'''


def test_a_result_of_a_process_with_hf_caching_disabled_is_a_hit_in_the_next(project, tmp_path):
    # issue 25: stored as a path into the deleted temporary folder, every hit warned and recomputed
    project.write("rows.csv", "x\n1\n2\n3\n")
    project.write("nocache.py", NO_CACHING)
    env = hf_env(tmp_path)
    first = project.run_json("nocache.py", env=env)
    assert first["y"] == [10, 20, 30] and first["files"]  # computed: HF's temporary files
    cp = project.run("nocache.py", env=env)
    assert "recomputing" not in cp.stderr
    assert json.loads(cp.stdout.strip().splitlines()[-1])["y"] == [10, 20, 30]
    assert (project.root / "runs.txt").read_text().split() == ["prepare"]


def test_a_memory_mapped_dataset_is_stored_as_its_file(tmp_store, tmp_path, monkeypatch, blob_results):
    import datasets
    import numpy as np

    import memolab
    import memolab.hf.keys as hf_keys

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    src = datasets.Dataset.from_dict({"x": np.arange(100_000), "t": [f"w{i}" for i in range(100_000)]})
    src.save_to_disk(str(tmp_path / "saved"))
    src.save_to_disk(str(tmp_path / "shards"), num_shards=3)  # loads as a concatenation of mapped files
    (arrow,) = (tmp_path / "saved").glob("*.arrow")
    shards = sorted((tmp_path / "shards").glob("*.arrow"))

    @memolab.memo
    def give(part):
        if part == "shards":
            return datasets.load_from_disk(str(tmp_path / "shards"))
        ds = datasets.load_from_disk(str(tmp_path / "saved"))  # memory-mapped, with HF's replays
        return ds if part == "all" else ds.select(range(10, 20))  # a small slice of the file

    for part in ("all", "slice", "shards"):
        computed = give(part)
        assert type(computed.data).__name__ == ("ConcatenationTable" if part == "shards" else "MemoryMappedTable")
        give.store().forget()
        loaded = give(part)
        assert not loaded.cache_files
        assert loaded.data.table.equals(computed.data.table) and loaded.features == computed.features
        hashed = []
        monkeypatch.setattr(hf_keys, "table_digest",
                            lambda t, real=hf_keys.table_digest, hashed=hashed: hashed.append(1) or real(t))
        key = memolab.hashing.hash_value(loaded)
        assert not hashed  # the digest stored with the rows, under the stamp of their blobs
        assert key == memolab.hashing.hash_value(computed)
    blobs = [p for p in (tmp_store / "blobs").rglob("*") if p.is_file()]
    # the whole dataset: HF's file itself, one blob, read from HF's own mapping (no copy made);
    # the slice of ten rows: its columns, not the file again
    contents = [p.read_bytes() for p in blobs]
    assert sum(c == arrow.read_bytes() for c in contents) == 1
    assert sum(len(c) >= arrow.stat().st_size for c in contents) == 1
    assert all(shard.read_bytes() in contents for shard in shards)  # each shard: its file
