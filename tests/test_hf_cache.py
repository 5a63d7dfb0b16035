"""HF's cache never outranks memolab's (docs/hf.md, "HF's own cache"): inside a memoized
computation a recomputation runs the current code, never HF's cached ``.map`` rows of
an older version of it. Fresh processes sharing one ``HF_HOME``; the helper the map
function calls is edited between runs, in both directions."""
from __future__ import annotations

import pytest

from conftest import require

require("datasets")
# JOB imports datasets before memolab and no test checks a module list: the runs fork from a
# server that imported numpy and datasets (tests/zygote.py); the test of datasets first imported
# inside the computation has real starts.
pytestmark = [pytest.mark.slow, pytest.mark.preload("numpy", "datasets")]

JOB = r'''
import json, os, sys

import datasets

import helpers
from memolab import memo


def scaled(batch):
    return {"y": [helpers.scale(v) for v in batch["x"]]}


@memo
def prepare(path, reuse):
    ds = datasets.load_dataset("csv", data_files=path, split="train")
    return ds.map(scaled, batched=True, load_from_cache_file=reuse)


print(json.dumps(list(prepare(os.path.abspath("rows.csv"), sys.argv[1] == "reuse")["y"])))
'''


def helper(factor):
    return f"def scale(v):\n    return v * {factor}\n"


def run(project, tmp_path, mode, store):
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "MEMOLAB_STORE": str(tmp_path / store)}
    return project.run_json("job.py", mode, env=env)


def test_an_edited_map_helper_is_run_not_read_from_hf_cache(project, tmp_path):
    project.write("rows.csv", "x\n1\n2\n3\n")
    project.write("job.py", JOB)
    project.write("helpers.py", helper(2))
    assert run(project, tmp_path, "reuse", "s1") == [2, 4, 6]
    project.write("helpers.py", helper(3))
    # memolab misses (the helper is part of prepare's code); HF's fingerprint of `scaled`
    # holds the module by name, so without memolab's code digest in it .map served [2, 4, 6]
    assert run(project, tmp_path, "reuse", "s2") == [3, 6, 9]
    project.write("helpers.py", helper(2))
    # back again, in a store that never saw it: HF's file of that code holds that code's rows
    assert run(project, tmp_path, "reuse", "s3") == [2, 4, 6]
    project.write("helpers.py", helper(3))
    assert run(project, tmp_path, "reuse", "s4") == [3, 6, 9]


def test_without_hf_cache_reuse_an_edit_and_its_revert_return_their_own_rows(project, tmp_path):
    # issue 25: with load_from_cache_file=False HF rewrote one cache file for both versions,
    # and the hit after reverting the edit read the edited code's rows through its path
    project.write("rows.csv", "x\n1\n2\n3\n")
    project.write("job.py", JOB)
    project.write("helpers.py", helper(2))
    assert run(project, tmp_path, "recompute", "s") == [2, 4, 6]
    project.write("helpers.py", helper(3))
    assert run(project, tmp_path, "recompute", "s") == [3, 6, 9]
    project.write("helpers.py", helper(2))
    assert run(project, tmp_path, "recompute", "s") == [2, 4, 6]


JOB_IMPORTING_IN_BODY = r'''
import importlib, json, os, sys

import helpers
from memolab import memo


def scaled(batch):
    return {"y": [helpers.scale(v) for v in batch["x"]]}


@memo
def prepare(path, library="datasets"):
    # first imported inside the computation, by a name memolab's code analysis cannot see
    # (an ``import datasets`` statement it would resolve, importing the module before the call)
    datasets = importlib.import_module(library)
    ds = datasets.load_dataset("csv", data_files=path, split="train")
    return ds.map(scaled, batched=True)


print(json.dumps(list(prepare(os.path.abspath("rows.csv"))["y"])))
'''


@pytest.mark.preload()  # real starts: its point is datasets imported after memolab, inside the body
def test_datasets_first_imported_inside_the_computation_gets_the_code_digest_too(project, tmp_path):
    project.write("rows.csv", "x\n1\n2\n3\n")
    project.write("job.py", JOB_IMPORTING_IN_BODY)
    project.write("helpers.py", helper(2))
    assert run(project, tmp_path, "-", "s1") == [2, 4, 6]
    project.write("helpers.py", helper(3))
    assert run(project, tmp_path, "-", "s2") == [3, 6, 9]
