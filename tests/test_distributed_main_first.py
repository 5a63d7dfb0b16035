"""Computed once per job: main-first memoized calls (issue 42; docs/distributed.md, "Computed once per job").

Real jobs under torchrun (2 ranks, gloo) and ``accelerate launch``, each in fresh processes with a
deadline past which the job's process group is killed (tests/launchers.py). Body runs are
counted through files each rank appends to.
"""
from __future__ import annotations

import textwrap

import pytest

from conftest import require, skip_or_fail

torch = require("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    skip_or_fail("torch.distributed is not available", allow_module_level=True)

from launchers import launch, launch_accelerate, marks, results  # noqa: E402

PREPARE = """
import json, os, time, warnings
import torch, torch.distributed as dist
import memolab

def count(name):
    with open(name, "a") as f:
        f.write(f"{dist.get_rank()}\\n")

class Knobs:  # the test's own settings, read outside every computation (opaque: not in any key)
    slow = float(os.environ.get("SLOW", "0"))

memolab.register_opaque(Knobs)
knobs = Knobs()

@memolab.memo(collective="main_first")
def tokenize(n: int):
    count("tokenize.marks")
    time.sleep(knobs.slow)   # longer than the arrival bound: the beats keep rank 1 waiting
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 3, generator=g)

@memolab.memo                                    # collective by default: main-first inside the block
def vocabulary(n: int):
    count("vocabulary.marks")
    return {f"w{i}": i for i in range(n)}

@memolab.memo(collective="local_main_first")     # once per store the ranks share (per node)
def shards(n: int):
    count("shards.marks")
    return [i * i for i in range(n)]

dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("RANK1_STORE") and rank == 1:  # a node-local store: another machine's disk
    memolab.configure(store=os.environ["RANK1_STORE"])
out = {}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out["tokens"] = tokenize(16).numpy().tobytes().hex()
    if os.environ.get("FRESH"):
        out["fresh"] = tokenize.fresh(16).numpy().tobytes().hex()
    with memolab.distributed.main_first():
        out["vocabulary"] = vocabulary(5)
    out["shards"] = shards(6)
    out["warnings"] = [str(x.message) for x in w]
out["stored"] = {f.__name__: len(f.evaluations()) for f in (tokenize, vocabulary, shards)}
with open(f"prepare.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_main_first_computes_once_per_job_while_the_others_wait_then_load_it(tmp_path):
    """The first job computes each main-first call on rank 0 only (rank 1 waits 5 s, past its
    2 s arrival and 3 s silence bounds, kept waiting by rank 0's beats) and both ranks return
    the same value; the next job hits on both ranks; rank 1 on a node-local store gets rank
    0's value for a main-first call and computes a local-main-first one on its own store."""
    (tmp_path / "prepare.py").write_text(textwrap.dedent(PREPARE))
    env = {"SLOW": "5", "MEMOLAB_DIST_TIMEOUT": "2", "MEMOLAB_LEASE_TTL": "1"}
    launch(tmp_path, "prepare.py", env=env)
    for name in ("tokenize", "vocabulary", "shards"):
        assert marks(tmp_path / f"{name}.marks") == ["0"], name  # rank 1 ran no body
    first = results(tmp_path, "prepare")
    for key in ("tokens", "vocabulary", "shards"):
        assert first[0][key] == first[1][key], key
    assert first[0]["stored"] == {"tokenize": 1, "vocabulary": 1, "shards": 1}
    assert first[0]["warnings"] == [] and first[1]["warnings"] == []  # nobody gave up waiting

    # a new job, rank 1 on a store of its own (another node's disk)
    launch(tmp_path, "prepare.py", env={"RANK1_STORE": str(tmp_path / "node1")})
    assert marks(tmp_path / "tokenize.marks") == ["0"]  # rank 1 got rank 0's value, computed nothing
    assert marks(tmp_path / "vocabulary.marks") == ["0"]
    assert marks(tmp_path / "shards.marks") == ["0", "1"]  # its own store's leader: computed once there
    second = results(tmp_path, "prepare")
    for key in ("tokens", "vocabulary", "shards"):
        assert second[0][key] == second[1][key] == first[0][key], key
    assert second[1]["stored"] == {"tokenize": 0, "vocabulary": 0, "shards": 1}  # what rank 1's store holds

    # shared store again: every call hits on both ranks; fresh() recomputes on rank 0 only
    launch(tmp_path, "prepare.py", env={"FRESH": "1"})
    assert marks(tmp_path / "tokenize.marks") == ["0", "0"]
    assert marks(tmp_path / "vocabulary.marks") == ["0"] and marks(tmp_path / "shards.marks") == ["0", "1"]
    third = results(tmp_path, "prepare")
    assert third[0]["fresh"] == third[1]["fresh"] == first[0]["tokens"]
    assert third[0]["stored"] == first[0]["stored"]


COLLECTIVE_INSIDE = """
import json, os
import torch.distributed as dist
import memolab
from memolab.distributed import DistributedError

@memolab.memo(collective="main_first")
def synced(n: int):
    with open("synced.marks", "a") as f:
        f.write(f"{dist.get_rank()}\\n")
    dist.barrier()          # a collective in a main-first body: rank 1 waits in memolab, not here
    return n

@memolab.memo(collective="main_first")
def differs(n: int):
    return n

dist.init_process_group("gloo")
rank = dist.get_rank()
out = {}
try:
    differs(rank)            # keys differ: the same clear error on both ranks, before any body
except DistributedError as e:
    out["mismatch"] = str(e)
try:
    out["value"] = synced(3)
except DistributedError as e:
    out["error"] = str(e)
out["stored"] = len(synced.evaluations())
with open(f"inside.{rank}.json", "w") as f:
    json.dump(out, f)
if rank == 1:
    dist.destroy_process_group()   # rank 0's barrier then fails (its peer is gone) instead of waiting
"""


def test_a_collective_inside_a_main_first_body_is_refused_on_every_rank_not_a_hang(tmp_path):
    (tmp_path / "inside.py").write_text(textwrap.dedent(COLLECTIVE_INSIDE))
    launch(tmp_path, "inside.py", deadline=90)
    out = results(tmp_path, "inside")
    for r in (0, 1):
        assert "keyed differently" in out[r]["mismatch"] and "differs" in out[r]["mismatch"]
        assert "value" not in out[r], out[r]
        assert "entered a torch.distributed collective" in out[r]["error"], out[r]
        assert "synced" in out[r]["error"] and "inside.py" in out[r]["error"]  # names the call and where
    assert out[0]["stored"] == 0  # a body that entered a collective is never stored
    assert marks(tmp_path / "synced.marks") == ["0"]


ACCELERATE = """
import json, os
import torch, torch.distributed as dist
from accelerate import Accelerator
import memolab

@memolab.memo
def tokenize(n: int):
    with open("acc.marks", "a") as f:
        f.write(f"{dist.get_rank()}\\n")
    g = torch.Generator().manual_seed(n)
    return torch.randint(0, 100, (n, 8), generator=g)

acc = Accelerator(cpu=True)            # initialises the group (gloo) under accelerate launch
with memolab.distributed.main_first():  # instead of `with acc.main_process_first():`
    tokens = tokenize(32)
out = {"tokens": tokens.numpy().tobytes().hex(), "world": acc.num_processes}
with open(f"acc.{acc.process_index}.json", "w") as f:
    json.dump(out, f)
acc.wait_for_everyone()
dist.destroy_process_group()
"""


def test_main_first_under_accelerate_launch_computes_on_the_main_process_only(tmp_path):
    require("accelerate")
    (tmp_path / "acc.py").write_text(textwrap.dedent(ACCELERATE))
    launch_accelerate(tmp_path, "acc.py")
    assert marks(tmp_path / "acc.marks") == ["0"]
    first = results(tmp_path, "acc")
    assert first[0]["world"] == 2 and first[0]["tokens"] == first[1]["tokens"]
    launch_accelerate(tmp_path, "acc.py")
    assert marks(tmp_path / "acc.marks") == ["0"]  # the next job: a hit on both processes
    assert results(tmp_path, "acc") == first


def test_collective_accepts_the_main_first_modes_and_refuses_anything_else():
    import memolab

    def f(x):
        return x

    for mode in (True, False, "main_first", "local_main_first"):
        m = memolab.memo(collective=mode)(f)
        fn, args = m.__reduce__()
        assert m.collective == mode and fn(*args).collective == mode  # kept when sent by value
    with pytest.raises(ValueError, match="main_first"):
        memolab.memo(collective="rank0")(f)
    assert f(3) == memolab.memo(collective="main_first")(f)(3)  # outside a group: an ordinary call
