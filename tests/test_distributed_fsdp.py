"""A memoized FSDP training under torchrun (issue 42; docs/distributed.md, "FSDP").

FSDP (``fully_shard``, and the older ``FullyShardedDataParallel``) trains on CPU with gloo in
torch 2.13. The body builds and shards the model, trains, and returns the full state dict,
gathered on every rank: the ranks' results agree, rank 0 stores it once, and the next job
hits on every rank. A state dict gathered to rank 0 only (``cpu_offload=True``: the other
ranks get an empty dict) is a result the ranks disagree on: returned, never stored. Jobs run
with a deadline past which their process group is killed (tests/launchers.py).
"""
from __future__ import annotations

import textwrap

import pytest

from conftest import require, skip_or_fail

torch = require("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    skip_or_fail("torch.distributed is not available", allow_module_level=True)

from launchers import launch, marks, results  # noqa: E402

FSDP = """
import json, os, warnings
import torch, torch.distributed as dist
import memolab

@memolab.memo
def train(version: int, steps: int, rank0_only: bool):
    with open("train.marks", "a") as f:
        f.write(f"{dist.get_rank()}\\n")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    if version == 2:
        from torch.distributed.fsdp import fully_shard
        for layer in model[0], model[2]:
            fully_shard(layer)
        fully_shard(model)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    r = dist.get_rank()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[r::2]), y[r::2]).backward()
        opt.step()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    # full_state_dict: gathered whole; cpu_offload=True keeps it on rank 0 only
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))

dist.init_process_group("gloo")
rank = dist.get_rank()
version, rank0_only = int(os.environ["FSDP"]), bool(os.environ.get("RANK0_ONLY"))
out = {}
if os.environ.get("PLAIN"):
    out["plain"] = {k: v.numpy().tobytes().hex() for k, v in train.fn(version, 3, rank0_only).items()}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out["memo"] = {k: v.numpy().tobytes().hex() for k, v in train(version, 3, rank0_only).items()}
    out["warnings"] = [str(x.message) for x in w if "memolab" in type(x.message).__module__]
out["stored"] = len(train.evaluations())
with open(f"fsdp.{rank}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
# The rank leaves as the interpreter would, up to its finalization (as tests/zygote.py's children
# do): threads joined, exit functions run, streams flushed, then os._exit. torch 2.13 keeps this
# group's gloo worker threads past destroy_process_group (the device mesh stays referenced from
# DTensor's caches); a worker still releasing an all-gather whose output this rank dropped (rank
# 1's rank-0-only state dict) takes the GIL for that tensor's Python object, and during the
# interpreter's finalization Python ends such a thread with pthread_exit, which a noexcept C++
# frame turns into std::terminate: SIGABRT after a correct run (reproduced with the gloo threads
# starved; a core dump's stack: runLoop > ~AsyncAllgatherCoalescedWork > decref > take_gil >
# PyThread_exit_thread). torch's, not memolab's: nothing of memolab runs in those threads.
import atexit, sys, threading
threading._shutdown()
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.parametrize("version", [2, 1])  # fully_shard (FSDP2), FullyShardedDataParallel (FSDP1)
def test_a_memoized_fsdp_training_returning_a_full_state_dict_misses_once_then_hits(tmp_path, version):
    (tmp_path / "fsdp.py").write_text(textwrap.dedent(FSDP))
    env = {"FSDP": str(version)}
    launch(tmp_path, "fsdp.py", env={**env, "PLAIN": "1"})
    assert sorted(marks(tmp_path / "train.marks")) == ["0", "0", "1", "1"]  # plain + the miss, per rank
    first = results(tmp_path, "fsdp")
    assert first[0]["stored"] == 1 and first[0]["warnings"] == []
    assert first[0]["memo"] == first[1]["memo"] == first[0]["plain"] == first[1]["plain"]
    assert set(first[0]["memo"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    launch(tmp_path, "fsdp.py", env=env)  # the next job: a hit on every rank, no body run
    assert sorted(marks(tmp_path / "train.marks")) == ["0", "0", "1", "1"]
    second = results(tmp_path, "fsdp")
    assert second[0]["memo"] == second[1]["memo"] == first[0]["memo"]


def test_an_fsdp_state_dict_gathered_on_rank_0_only_is_returned_but_never_stored(tmp_path):
    (tmp_path / "fsdp.py").write_text(textwrap.dedent(FSDP))
    launch(tmp_path, "fsdp.py", env={"FSDP": "2", "RANK0_ONLY": "1"})
    out = results(tmp_path, "fsdp")
    assert len(out[0]["memo"]) == 4 and out[1]["memo"] == {}  # what get_model_state_dict gives each rank
    assert out[0]["stored"] == 0
    assert any("results differ" in w for w in out[0]["warnings"]), out[0]["warnings"]
