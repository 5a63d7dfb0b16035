"""Lineage where the calls run elsewhere (issue 39): Dask tasks and torchrun ranks.

- Dask (a ``LocalCluster`` of 2 worker processes, one shared store): a task taking the result
  of another task on the same worker gets the very object, known by its mark; on another worker
  it gets a copy (Dask pickled it across), known by its content (the result's digest as an
  argument); so does the client, which only ever sees copies.
- torchrun (2 ranks, gloo): rank 0 drives and stores the collective calls, so their edges come
  from its objects; a ``main_first`` result that rank 1 loads is marked there too, so a
  rank-local call on rank 1 records it as its input.
"""
from __future__ import annotations

import json
import textwrap

import memolab
from conftest import require, skip_or_fail
from memolab.settings import config
from memolab.store import edges, get_store


def _inputs(store, fn):
    return sorted([(e["path"], e["function"].split(":")[-1], e["evaluation"], e["by"])
                   for row in store.index.evaluations(fn) for e in edges.inputs_of(store.index, row)])


def test_dask_tasks_record_their_inputs_on_one_worker_and_across_workers(tmp_path):
    distributed = require("distributed")
    import lineage_tasks as t
    from memolab.workers import Configure

    old = config.settings()
    try:
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                           dashboard_address=None, worker_dashboard_address=None)
        client = distributed.Client(cluster)
        try:
            client.register_plugin(Configure(store=str(tmp_path / "store")))
            memolab.configure(store=str(tmp_path / "store"))
            client.wait_for_workers(2, timeout=300)  # bounds against a hang, not timings
            w0, w1 = sorted(client.scheduler_info()["workers"])
            ds = client.submit(t.prepare, 1000, workers=[w0], pure=False)
            same = client.submit(t.train, ds, 0.1, workers=[w0], pure=False)  # ds stays on w0: the object
            other = client.submit(t.train, ds, 0.2, workers=[w1], allow_other_workers=False, pure=False)  # a copy
            distributed.wait([same, other], timeout=300)
            client.gather([same, other])
            here = t.train(client.gather(ds), 0.3)  # the client's copy
            assert here["w"].shape == (4,)
        finally:
            client.close()
            cluster.close()
        store = get_store()
        (p,) = [e["id"] for e in t.prepare.evaluations()]
        got = {json.loads(r["snapshot"])["args"]["lr"][1]: [(e["path"], e["evaluation"], e["by"])
                                                             for e in edges.inputs_of(store.index, r)]
               for r in store.index.evaluations(t.train.symbol)}
    finally:
        memolab.configure(store=old.store)
    assert got == {"0.1": [("ds", p, "object")], "0.2": [("ds", p, "content")], "0.3": [("ds", p, "content")]}, got


RANKS = """
import json, os
import torch, torch.distributed as dist
import memolab
from memolab import memo


@memo
def prepare(n: int):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 3, generator=g)


@memo
def train(x, steps: int):
    w = torch.zeros(3)
    for _ in range(steps):
        w = w + x.mean(0) * 0.1
    return {"w": w}


@memo(collective="main_first")
def evaluate(model, x):
    return {"score": float((x @ model["w"]).mean())}


@memo(collective=False)
def report(scores, rank: int):
    return f"rank {rank}: {scores['score']:.4f}"


dist.init_process_group("gloo")
rank = dist.get_rank()
x = prepare(64)
model = train(x, 3)
scores = evaluate(model, x)
line = report(scores, rank)
with open(f"ranks.{rank}.json", "w") as f:
    json.dump({"line": line}, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_torchrun_ranks_record_inputs(tmp_path):
    require("torch")
    import torch.distributed as dist

    if not dist.is_available():
        skip_or_fail("torch.distributed is not available")
    from launchers import launch, results

    (tmp_path / "ranks.py").write_text(textwrap.dedent(RANKS))
    launch(tmp_path, "ranks.py")
    out = results(tmp_path, "ranks")
    assert out[0]["line"].startswith("rank 0") and out[1]["line"].startswith("rank 1")
    old = config.settings()
    memolab.configure(store=str(tmp_path / "store"))
    try:
        store = get_store()
        ids = {fn: [e["id"] for e in store.index.evaluations(f"__main__:{fn}")] for fn in
               ("prepare", "train", "evaluate", "report")}
        (p,), (tr,), (ev,) = ids["prepare"], ids["train"], ids["evaluate"]
        assert _inputs(store, "__main__:train") == [("x", "prepare", p, "object")]
        assert _inputs(store, "__main__:evaluate") == [("model", "train", tr, "object"), ("x", "prepare", p, "object")]
        # one report per rank (rank-local): each names the evaluation it took, rank 1's loaded by main_first
        assert len(ids["report"]) == 2
        assert _inputs(store, "__main__:report") == [("scores", "evaluate", ev, "object")] * 2
    finally:
        memolab.configure(store=old.store)
