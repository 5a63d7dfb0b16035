"""Memoized calls under torchrun / DDP (issue 27; docs/distributed.md).

Real jobs: ``python -m torch.distributed.run --nproc_per_node=2`` on CPU with gloo, each
script in fresh processes, each launch with a deadline (the whole process group is
killed past it: tests/launchers.py) so a hang fails fast instead of waiting for torch's
30 minutes. Body runs are counted through a file each rank appends to.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import require, skip_or_fail

torch = require("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    skip_or_fail("torch.distributed is not available", allow_module_level=True)

from launchers import SRC, launch, launch_accelerate, marks, results  # noqa: E402

# The exact case of the issue: a memoized training step that builds its DDP module inside
# the body, called on every rank. Before: rank 0 took the lease and blocked in DDP's
# constructor waiting for rank 1, which waited for rank 0's lease (hung until the deadline).
TRAIN = """
import json, os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
import memolab

def count(name):
    with open(name, "a") as f:
        f.write(f"{dist.get_rank()}\\n")

@memolab.memo
def train(loader, steps: int, lr: float):
    count("train.marks")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    return model.module.state_dict()

dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("RANK1_STORE") and rank == 1:   # a node-local store: another machine's disk
    memolab.configure(store=os.environ["RANK1_STORE"])
g = torch.Generator().manual_seed(1)
ds = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, shuffle=True, seed=3))
out = {}
if os.environ.get("PLAIN"):
    out["plain"] = {k: v.tolist() for k, v in train.fn(loader, 2, 0.1).items()}
sd = train(loader, 2, 0.1)
out["memo"] = {k: v.tolist() for k, v in sd.items()}
out["bits"] = {k: v.numpy().tobytes().hex() for k, v in sd.items()}
if os.environ.get("PLAIN"):
    out["plain_bits"] = {k: torch.tensor(v).numpy().tobytes().hex() for k, v in out["plain"].items()}
out["evaluations"] = len(train.evaluations())
with open(f"train.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_ddp_training_misses_once_per_rank_then_hits_bitwise_equal_to_an_unmemoized_run(tmp_path):
    """The issue's deadlock case; the second job also has rank 1 on a node-local store (another
    machine's disk) that lacks the result: it gets rank 0's, stores nothing, runs no body.
    (Rank 1 loading a hit from the shared store: ``test_data_preparation_...``.)"""
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    launch(tmp_path, "train.py", env={"PLAIN": "1"})
    # the plain run counted a body per rank, the memoized miss one more per rank
    assert sorted(marks(tmp_path / "train.marks")) == ["0", "0", "1", "1"]
    first = results(tmp_path, "train")
    assert first[0]["evaluations"] == 1  # one stored result (rank 0's)
    for r in (0, 1):
        assert first[r]["bits"] == first[r]["plain_bits"]  # the miss is the un-memoized training
    assert first[0]["bits"] == first[1]["bits"]

    launch(tmp_path, "train.py", env={"RANK1_STORE": str(tmp_path / "node1")})  # a new job: a hit on every rank
    assert sorted(marks(tmp_path / "train.marks")) == ["0", "0", "1", "1"]  # no body ran on any rank
    second = results(tmp_path, "train")
    for r in (0, 1):
        assert second[r]["bits"] == first[r]["plain_bits"]
    assert second[0]["evaluations"] == 1
    assert second[1]["evaluations"] == 0  # rank 1's own store: nothing stored there


CALLS = """
import json, os, warnings
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
import memolab
from memolab.distributed import DistributedError, keying, rank_local

def count(name):
    with open(name, "a") as f:
        f.write(f"{dist.get_rank()}\\n")

@memolab.memo
def prepare(n: int):
    count("prepare.marks")
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 3, generator=g)

@memolab.memo(collective=False)
def report(x):
    count("report.marks")
    return float(x.sum())

@memolab.memo
def local_stat(x):
    count("local.marks")
    return float(x.mean())

@memolab.memo
def shard_sum(x, rank: int):
    return float(x.sum()) + rank

@memolab.memo
def rank_dependent(x):
    count("dependent.marks")
    return float(x.sum()) + dist.get_rank()

@memolab.memo
def consume(loader):
    return 0

@memolab.memo
def feature(i: int):
    return i * 10

class Featurized(torch.utils.data.Dataset):   # memoized calls inside DataLoader workers
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.tensor(feature(i))

@memolab.memo
def make_loader(n: int):
    ds = TensorDataset(torch.zeros(n, 1))
    return DataLoader(ds, sampler=DistributedSampler(ds))

dist.init_process_group("gloo")
rank = dist.get_rank()
out = {}
data = prepare(16)                      # collective: every rank gets the same data
out["data"] = data.numpy().tobytes().hex()
if rank == 0:
    out["report"] = report(data)        # made by rank 0 alone: @memo(collective=False)
    with rank_local():
        out["local"] = local_stat(data)  # made by rank 0 alone: a rank_local() block
try:
    shard_sum(data, rank)               # arguments differ by rank: a clear error on every rank
except DistributedError as e:
    out["mismatch"] = str(e)
try:                                    # rank 1 cannot key the call: rank 0 hears at once
    consume(0 if rank == 0 else (i for i in range(3)))
except Exception as e:
    out["unkeyed"] = f"{type(e).__name__}: {e}"
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out["dependent"] = rank_dependent(data)  # results differ by rank: returned, not stored
    out["dependent_warning"] = [str(x.message) for x in w]
out["dependent_stored"] = len(rank_dependent.evaluations())
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    make_loader(8)                      # each rank's loader yields its own shard: never shared
    out["loader_warning"] = [str(x.message) for x in w]
out["loader_stored"] = len(make_loader.evaluations())
# a worker process inherits the group's state but is no rank: its calls are its own (no wait)
shards = DataLoader(Featurized(), batch_size=2, num_workers=1, sampler=DistributedSampler(Featurized(), shuffle=False))
out["features"] = [int(x) for b in shards for x in b]
ds = TensorDataset(torch.zeros(8, 1))
mine = DistributedSampler(ds)                       # this rank's sampler (world 2)
with keying():
    out["key_collective"] = consume.key(DataLoader(ds, sampler=mine))[2]
out["key_local"] = consume.key(DataLoader(ds, sampler=mine))[2]
torch.manual_seed(0)
net = torch.nn.Linear(2, 1)
ddp = torch.nn.parallel.DistributedDataParallel(net)   # keyed by what it wraps and how it syncs
out["key_ddp"] = consume.key(ddp)[2]
out["key_bare"] = consume.key(net)[2]
with open(f"calls.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_data_preparation_rank_local_calls_and_disagreeing_ranks(tmp_path):
    (tmp_path / "calls.py").write_text(textwrap.dedent(CALLS))
    launch(tmp_path, "calls.py")
    first = results(tmp_path, "calls")
    # a memoized data preparation: computed by both ranks together, stored once
    assert sorted(marks(tmp_path / "prepare.marks")) == ["0", "1"]
    assert first[0]["data"] == first[1]["data"]
    # rank-0-only calls keep the single-process behaviour (no wait for rank 1)
    assert marks(tmp_path / "report.marks") == ["0"] and marks(tmp_path / "local.marks") == ["0"]
    assert "report" not in first[1]
    # unequal keys: the same clear error on both ranks, naming the fix
    for r in (0, 1):
        assert "collective=False" in first[r]["mismatch"] and "shard_sum" in first[r]["mismatch"]
    # a rank that cannot key the call raises its HashError, rank 0 a DistributedError naming it
    assert first[1]["unkeyed"].startswith("HashError") and "generator" in first[1]["unkeyed"]
    assert first[0]["unkeyed"].startswith("DistributedError") and "rank 1: HashError" in first[0]["unkeyed"]
    # a result that depends on the rank: each rank keeps its own, nothing stored, rank 0 warns
    assert first[1]["dependent"] == first[0]["dependent"] + 1
    assert first[0]["dependent_stored"] == 0
    assert any("results differ" in w for w in first[0]["dependent_warning"])
    assert first[0]["features"] == [0, 20] and first[1]["features"] == [10, 30]
    assert first[0]["loader_stored"] == 0 and any("results differ" in w for w in first[0]["loader_warning"])
    # a DistributedSampler of this rank keys alike on every rank in a collective call, apart otherwise
    assert first[0]["key_collective"] == first[1]["key_collective"]
    assert first[0]["key_local"] != first[1]["key_local"]
    # a DDP module keys alike on every rank, apart from the bare module (it trains differently)
    assert first[0]["key_ddp"] == first[1]["key_ddp"] != first[0]["key_bare"]

    launch(tmp_path, "calls.py")  # a new job: every memoized call hits, on every rank that made it
    second = results(tmp_path, "calls")
    assert sorted(marks(tmp_path / "prepare.marks")) == ["0", "1"]
    assert marks(tmp_path / "report.marks") == ["0"] and marks(tmp_path / "local.marks") == ["0"]
    assert second[0]["data"] == second[1]["data"] == first[0]["data"]
    assert sorted(marks(tmp_path / "dependent.marks")) == ["0", "0", "1", "1"]  # never stored: computed again


FORGOT = """
import json, warnings
import torch.distributed as dist
import memolab

@memolab.memo
def summary(n: int):
    return n * 2

dist.init_process_group("gloo")
rank = dist.get_rank()
out = {}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    if rank == 0:
        out["summary"] = summary(21)   # collective by default, but made by rank 0 alone
    out["warnings"] = [str(x.message) for x in w]
out["stored"] = len(summary.evaluations())
with open(f"forgot.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_rank_0_only_call_not_marked_waits_boundedly_then_computes_alone(tmp_path):
    """(Had rank 1 made another collective call meanwhile, both ranks would raise the
    "keyed differently" error at once: ``test_data_preparation_...`` pins that error.)"""
    (tmp_path / "forgot.py").write_text(textwrap.dedent(FORGOT))
    launch(tmp_path, "forgot.py", deadline=60, env={"MEMOLAB_DIST_TIMEOUT": "3"})  # the wait's bound from the environment
    out = results(tmp_path, "forgot")
    assert out[0]["summary"] == 42
    assert any("collective=False" in w and "alone" in w and "within 3 s" in w for w in out[0]["warnings"]), out
    assert out[0]["stored"] == 1  # computed alone the single-process way: stored


def test_world_size_is_in_a_distributed_samplers_key_and_a_ddp_module_keys_by_what_it_wraps():
    """World 2 must not hit world 4's result; in a process that is not in a group the
    sampler's rank is an ordinary setting. (No group needed: keys only.)"""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import memolab

    @memolab.memo
    def consume(loader):
        return 0

    ds = TensorDataset(torch.zeros(8, 1))

    def key(**kw):
        return consume.key(DataLoader(ds, sampler=DistributedSampler(ds, **kw)))[2]

    assert key(num_replicas=2, rank=0) != key(num_replicas=4, rank=0)
    assert key(num_replicas=2, rank=0) != key(num_replicas=2, rank=1)
    assert key(num_replicas=2, rank=1) == key(num_replicas=2, rank=1)


RESUME = """
import json, os, signal
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
import memolab

def count(name, text):
    with open(name, "a") as f:
        f.write(f"{dist.get_rank()}:{text}\\n")

@memolab.memo
def train(epochs: int):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    sampler = DistributedSampler(ds, shuffle=True, seed=5)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    ck = memolab.checkpoint(model=model, optimizer=opt, every=1)
    state = ck.restore(epoch=0)
    count("resume.marks", state["epoch"])
    for epoch in range(state["epoch"], epochs):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            # the trigger is read at run time: the killed job and the next one make the same call
            if epoch == int(os.environ.get("KILL_AT", "-1")) and i == 1 and dist.get_rank() == 0:
                pids = [int(p) for p in open("pids").read().split()] + [os.getppid()]
                for p in pids:             # the whole job: the other rank, torchrun, this rank
                    if p != os.getpid():
                        os.kill(p, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
        ck.step(epoch=epoch + 1)           # saved by rank 0 after every epoch
    return model.module.state_dict()

dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("RANK1_STORE") and rank == 1:   # a node-local store: another machine's disk
    memolab.configure(store=os.environ["RANK1_STORE"])
with open("pids", "a") as f:
    f.write(f"{os.getpid()}\\n")
out = {}
if "KILL_AT" not in os.environ and "RANK1_STORE" not in os.environ:
    out["plain"] = {k: v.numpy().tobytes().hex() for k, v in train.fn(3).items()}
out["memo"] = {k: v.numpy().tobytes().hex() for k, v in train(3).items()}
with open(f"resume.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_ddp_checkpoint_sigkill_of_the_whole_job_then_resume_equals_an_uninterrupted_run(tmp_path):
    """Rank 0 saves, every rank restores the same epoch, the result is an uninterrupted run's."""
    (tmp_path / "resume.py").write_text(textwrap.dedent(RESUME))
    cp = launch(tmp_path, "resume.py", env={"KILL_AT": "2"}, check=False)
    assert cp.returncode != 0
    assert not (tmp_path / "resume.0.json").exists()
    assert sorted(marks(tmp_path / "resume.marks")) == ["0:0", "1:0"]
    (tmp_path / "pids").unlink()
    # rank 1 on a node-local store without the checkpoint: both ranks refuse to resume apart
    cp = launch(tmp_path, "resume.py", env={"RANK1_STORE": str(tmp_path / "node1")}, check=False)
    assert cp.returncode != 0 and "ranks found different checkpoints" in cp.stderr
    assert "rank 0: step 2, rank 1: step none" in cp.stderr
    (tmp_path / "pids").unlink()
    launch(tmp_path, "resume.py")
    # the plain run (not memoized: no checkpoint) started at 0, the resumed one at epoch 2 on both ranks
    assert sorted(marks(tmp_path / "resume.marks")) == ["0:0", "0:0", "0:2", "1:0", "1:0", "1:2"]
    out = results(tmp_path, "resume")
    for r in (0, 1):
        assert out[r]["memo"] == out[r]["plain"]


ACCELERATE = """
import json, os
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from accelerate import Accelerator
import memolab

@memolab.memo
def train(epochs: int, lr: float):
    with open("acc.marks", "a") as f:
        f.write(f"{dist.get_rank()}\\n")
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model, opt, loader = acc.prepare(model, opt, DataLoader(ds, batch_size=8, shuffle=True,
                                                            generator=torch.Generator().manual_seed(2)))
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            acc.backward(torch.nn.functional.mse_loss(model(xb), yb))
            opt.step()
    return acc.unwrap_model(model).state_dict()

acc = Accelerator(cpu=True)            # initialises the group (gloo) under accelerate launch
rank = acc.process_index
out = {"world": acc.num_processes}
if os.environ.get("PLAIN"):
    out["plain"] = {k: v.numpy().tobytes().hex() for k, v in train.fn(2, 0.1).items()}
out["memo"] = {k: v.numpy().tobytes().hex() for k, v in train(2, 0.1).items()}
with open(f"acc.{rank}.json", "w") as f:
    json.dump(out, f)
acc.wait_for_everyone()
dist.destroy_process_group()
"""


def test_accelerate_launch_with_2_cpu_processes_misses_then_hits(tmp_path):
    require("accelerate")
    (tmp_path / "acc.py").write_text(textwrap.dedent(ACCELERATE))
    launch_accelerate(tmp_path, "acc.py", env={"PLAIN": "1"})
    assert sorted(marks(tmp_path / "acc.marks")) == ["0", "0", "1", "1"]  # plain + the miss, per rank
    first = results(tmp_path, "acc")
    assert first[0]["world"] == 2
    launch_accelerate(tmp_path, "acc.py")
    assert sorted(marks(tmp_path / "acc.marks")) == ["0", "0", "1", "1"]  # the hit ran no body
    second = results(tmp_path, "acc")
    for r in (0, 1):
        assert first[r]["memo"] == first[r]["plain"] == second[r]["memo"]


def test_import_memolab_and_its_distributed_module_import_no_torch():
    code = ("import sys, memolab, memolab.distributed\n"
            "@memolab.memo(collective=False)\n"
            "def f(x):\n    return x\n"
            "assert f(1) == 1 and not f.collective\n"
            "assert 'torch' not in sys.modules and 'torch.distributed' not in sys.modules, sorted(sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": SRC}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=env, capture_output=True)


def test_a_memo_rebuilt_in_another_process_keeps_collective_false():
    """A memo sent by value (a function of ``__main__``: Dask, Ray) keeps its options."""
    import memolab

    def f(x):
        return x

    m = memolab.memo(collective=False, global_rng=False, env=["X"])(f)
    fn, args = m.__reduce__()
    rebuilt = fn(*args)
    assert rebuilt.collective is False and rebuilt.global_rng is False and rebuilt.env == ("X",)
    fn, args = memolab.memo(f).__reduce__()
    assert fn(*args).collective is True and fn(*args).global_rng is True


SLOWMOD = """
import os, time

import memolab

@memolab.memo
def slow(n: int):
    with open("slow.marks", "a") as f:
        f.write(os.environ.get("RANK", "solo") + "\\n")
    time.sleep(float(os.environ.get("SLOW_SECONDS", "0")))
    return n * 3
"""

WAITER = """
import json, warnings
import torch.distributed as dist
import memolab
from slowmod import slow

memolab.distributed.configure(timeout=2)   # far below the other job's 10 s: only the beats keep rank 1 waiting
dist.init_process_group("gloo")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    value = slow(7)                     # another job holds the key's lease: rank 0 waits, beating
    out = {"value": value, "warnings": [str(x.message) for x in w]}
with open(f"waiter.{dist.get_rank()}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_followers_wait_while_rank_0_waits_for_another_jobs_lease(tmp_path):
    """Rank 0 waits longer than the followers' bounds (arrival 2 s, silence 3 lease TTLs = 3 s)
    for a key another process is computing; its beats keep them waiting; all then load the result.
    (Fails with the beats switched off: rank 1 gives up and computes alone.)"""
    import time

    (tmp_path / "slowmod.py").write_text(textwrap.dedent(SLOWMOD))
    (tmp_path / "waiter.py").write_text(textwrap.dedent(WAITER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path)]), "MEMOLAB_STORE": str(tmp_path / "store"),
           "PYTHONDONTWRITEBYTECODE": "1", "MEMOLAB_LEASE_TTL": "1"}
    other = subprocess.Popen([sys.executable, "-c", "from slowmod import slow; slow(7)"], cwd=tmp_path,
                             env={**env, "SLOW_SECONDS": "10"})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "slow.marks").exists():  # the other job holds the lease now
            assert time.monotonic() < deadline and other.poll() is None
            time.sleep(0.05)
        launch(tmp_path, "waiter.py", env={"MEMOLAB_LEASE_TTL": "1"})
        assert other.wait(timeout=60) == 0
    finally:
        if other.poll() is None:
            other.kill()
    assert marks(tmp_path / "slow.marks") == ["solo"]  # the job ran no body: it loaded the other's result
    out = results(tmp_path, "waiter")
    for r in (0, 1):
        assert out[r]["value"] == 21 and not out[r]["warnings"]


SEEDED = """
import json, os
import torch, torch.distributed as dist
import memolab

def count(name):
    with open(name, "a") as f:
        f.write(f"{dist.get_rank()}\\n")

@memolab.memo
def noisy(n: int):
    count("noisy.marks")
    return torch.randn(n).tolist()

dist.init_process_group("gloo")
rank = dist.get_rank()
seed = int(os.environ["SEED"])
torch.manual_seed(seed)   # every rank the same seed: a collective call from equal states
value = noisy(3)
after = torch.rand(1).item()
with open(f"seeded.{rank}.json", "w") as f:
    json.dump({"value": value, "after": after}, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_collective_call_drawing_from_the_seeded_generator_is_keyed_by_the_seed(tmp_path):
    """Issue 34 under torchrun: the ranks agree on the key they all made, rank 0's lookup is
    routed to the key of the generator state (seed 1 never gets seed 0's result), and a hit
    leaves every rank's generator where the body left it."""
    (tmp_path / "seeded.py").write_text(textwrap.dedent(SEEDED))
    out = {}
    for seed in ("0", "1", "0"):
        launch(tmp_path, "seeded.py", env={"SEED": seed})
        out.setdefault(seed, []).append(results(tmp_path, "seeded"))
    torch = require("torch")
    for seed in ("0", "1"):
        torch.manual_seed(int(seed))
        truth = {"value": torch.randn(3).tolist(), "after": torch.rand(1).item()}
        for job in out[seed]:
            for r in (0, 1):
                assert job[r]["value"] == pytest.approx(truth["value"], abs=0) and job[r]["after"] == truth["after"]
    assert sorted(marks(tmp_path / "noisy.marks")) == ["0", "0", "1", "1"]  # seeds 0 and 1 once each, then a hit
