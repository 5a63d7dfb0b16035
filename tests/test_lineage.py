"""Lineage: every result knows what it was made from (issue 39; docs/cache-rules.md, "Lineage").

A three-step pipeline in fresh processes, then an edit upstream: the edges ``memolab show
--json`` reports before and after, ``why`` naming the upstream change, ``clear --downstream``;
edges at any depth of the arguments; an equal object from another evaluation keys the same
(lineage is never part of a key); evaluations cleared or collected upstream shown as such.
"""
from __future__ import annotations

import copy
import json
import sqlite3

import numpy as np
import pytest

import memolab
from memolab import memo
from memolab.inputs import upstream
from memolab.store import get_store

PIPE = """
import numpy as np
from memolab import memo


@memo
def prepare(n):
    x = np.arange(n, dtype=np.float64)
    return {"X": x, "y": x % 2}


@memo
def train(ds, lr=0.1):
    w = float((ds["X"] * ds["y"]).sum()) * lr
    return {"w": np.full(4, w)}


@memo
def evaluate(model, ds):
    return {"score": float(model["w"].sum() / (1 + ds["y"].sum()))}
"""

RUN = """
import json, pipe
ds = pipe.prepare(1000)
model = pipe.train(ds)
print(json.dumps(pipe.evaluate(model, ds)))
"""


def cli_json(project, *args, check=True):
    cp = project.run("-m", "memolab", *args, "--json", check=check)
    return json.loads(cp.stdout)


def edges_of(project, eid):
    d = cli_json(project, "show", str(eid))
    return ([(i["path"], i["function"], i["evaluation"]) for i in d["inputs"]],
            [(u["function"], u["evaluation"]) for u in d["used_by"]])


def ids_of(project, fn):
    return sorted(e["id"] for e in cli_json(project, "ls", fn)["evaluations"])


@pytest.fixture
def pipeline(project):
    project.write("pipe.py", PIPE)
    project.write("run.py", RUN)
    return project


def test_a_three_step_pipeline_then_an_upstream_edit(pipeline):
    p = pipeline
    first = p.run_json("run.py")
    assert (ids_of(p, "prepare"), ids_of(p, "train"), ids_of(p, "evaluate")) == ([1], [2], [3])
    assert edges_of(p, 1) == ([], [("pipe:train", 2), ("pipe:evaluate", 3)])
    assert edges_of(p, 2) == ([("ds", "pipe:prepare", 1)], [("pipe:evaluate", 3)])
    assert edges_of(p, 3) == ([("ds", "pipe:prepare", 1), ("model", "pipe:train", 2)], [])
    d = cli_json(p, "show", "3")
    assert d["inputs"][0] == {"path": "ds", "function": "pipe:prepare", "evaluation": 1, "by": "object"}
    assert d["used_by"] == []
    assert cli_json(p, "show", "2")["used_by"] == [{"function": "pipe:evaluate", "evaluation": 3, "path": "model",
                                                    "by": "object"}]

    # a new process: every call hits, nothing is recorded again
    assert p.run_json("run.py") == first
    assert ids_of(p, "evaluate") == [3] and edges_of(p, 3)[0] == [("ds", "pipe:prepare", 1), ("model", "pipe:train", 2)]

    # results loaded from the store (prepare's, in a fresh process) are inputs too
    p.run("-m", "memolab", "clear", "evaluate", "--yes")
    assert p.run_json("run.py") == first
    assert ids_of(p, "evaluate") == [4]
    assert edges_of(p, 4)[0] == [("ds", "pipe:prepare", 1), ("model", "pipe:train", 2)]

    # an edit upstream: prepare's code changes, and with it everything after it
    p.write("pipe.py", PIPE.replace("x = np.arange(n, dtype=np.float64)", "x = np.arange(n, dtype=np.float64) * 2"))
    p.run_json("run.py")
    assert (ids_of(p, "prepare"), ids_of(p, "train"), ids_of(p, "evaluate")) == ([1, 5], [2, 6], [4, 7])
    assert edges_of(p, 6) == ([("ds", "pipe:prepare", 5)], [("pipe:evaluate", 7)])
    assert edges_of(p, 7)[0] == [("ds", "pipe:prepare", 5), ("model", "pipe:train", 6)]
    # the old chain keeps its own edges
    assert edges_of(p, 1)[1] == [("pipe:train", 2), ("pipe:evaluate", 4)]
    assert edges_of(p, 5)[1] == [("pipe:train", 6), ("pipe:evaluate", 7)]

    why = p.run("-m", "memolab", "why", "train").stdout
    assert "argument `ds` now comes from `prepare` #5 (was #1: `prepare`'s code changed — diff below)" in why, why
    assert "diff of pipe:prepare:" in why and "+    x = np.arange(n, dtype=np.float64) * 2" in why
    assert "new arguments: ds" not in why  # said better above
    miss = cli_json(p, "why", "evaluate")["miss"]
    assert "argument `ds` now comes from `prepare` #5 (was #1: `prepare`'s code changed — diff below)" in miss["reasons"]
    assert ("argument `model` now comes from `train` #6 (was #2: `train`'s arguments changed: its argument `ds` "
            "comes from `prepare` #5 (was #1))") in miss["reasons"], miss["reasons"]
    assert "pipe:prepare" in miss["diffs"]

    # the Python API: a run's inputs and users
    script = ("import json, memolab\n"
              "r = [x for x in memolab.runs('train') if x.evaluation and x.evaluation.id == 6][0]\n"
              "print(json.dumps({'inputs': r.inputs, 'used_by': r.used_by}))")
    assert p.run_json("-c", script) == {"inputs": [["ds", "pipe:prepare", 5]], "used_by": [["model", "pipe:evaluate", 7]]}


def test_clear_downstream_says_what_it_forgets_and_forgets_it(pipeline):
    p = pipeline
    p.run_json("run.py")
    p.write("pipe.py", PIPE.replace("return {\"X\": x, \"y\": x % 2}", "return {\"X\": x + 1, \"y\": x % 2}"))
    p.run_json("run.py")
    p.write("pipe.py", PIPE)
    # an unrelated function stays
    p.write("other.py", "from memolab import memo\n\n@memo\ndef other(k):\n    return k * 2\n\nprint(other(3))\n")
    p.run("other.py")
    before = cli_json(p, "ls")
    # a dry run first: what would go, nothing gone
    dry = cli_json(p, "clear", "prepare", "--downstream", "--dry-run")
    assert dry["dry_run"] is True and dry["evaluations"] == 6
    assert sorted((d["function"], d["evaluation"]) for d in dry["downstream"]) == [
        ("pipe:evaluate", 3), ("pipe:evaluate", 6), ("pipe:train", 2), ("pipe:train", 5)]
    text = p.run("-m", "memolab", "clear", "prepare", "--downstream", "--dry-run").stdout
    assert "pipe:evaluate  #3, #6" in text and "pipe:train  #2, #5" in text and "nothing cleared" in text
    # without a terminal and without --yes: the plan is said, nothing is deleted (exit 2)
    cp = p.run("-m", "memolab", "clear", "prepare", "--downstream", check=False)
    assert cp.returncode == 2 and "pipe:train  #2, #5" in cp.stdout and "pass --yes" in cp.stderr
    assert cli_json(p, "ls") == before
    cp = p.run("-m", "memolab", "clear", "prepare", "--downstream", "--yes")
    assert "cleared pipe:prepare (and 4 evaluations built on it): 6 evaluations" in cp.stdout, cp.stdout
    fns = {f["fn"]: f["evaluations"] for f in cli_json(p, "ls")["functions"]}
    assert fns == {"__main__:other": 1}
    # the pipeline computes again, and records its edges again
    p.run_json("run.py")
    assert edges_of(p, 10)[0] == [("ds", "pipe:prepare", 8), ("model", "pipe:train", 9)]
    # clear --downstream needs a function
    cp = p.run("-m", "memolab", "clear", "--downstream", "--yes", check=False)
    assert cp.returncode == 2 and "needs a function" in cp.stderr


def test_an_upstream_cleared_or_collected_is_shown_as_missing_never_an_error(pipeline):
    p = pipeline
    first = p.run_json("run.py")
    cp = p.run("-m", "memolab", "clear", "prepare", "--yes")
    assert "2 evaluations built on them stay" in cp.stdout
    d = cli_json(p, "show", "3")
    assert d["inputs"] == [{"path": "ds", "function": "pipe:prepare", "evaluation": None, "by": "object",
                            "missing": True},
                           {"path": "model", "function": "pipe:train", "evaluation": 2, "by": "object"}]
    assert "ds     <- pipe:prepare (not stored any more: cleared or collected)" in p.run(
        "-m", "memolab", "show", "3").stdout
    r = p.run_json("-c", "import json, memolab; print(json.dumps([r.inputs for r in memolab.runs('evaluate')]))")
    assert r == [[["ds", "pipe:prepare", None], ["model", "pipe:train", 2]]]

    # prepare computed again: the same key, a new evaluation; edges name keys, so they find it
    assert p.run_json("run.py") == first
    assert ids_of(p, "prepare") == [4] and ids_of(p, "train") == [2]
    assert edges_of(p, 3)[0] == [("ds", "pipe:prepare", 4), ("model", "pipe:train", 2)]

    # collected by gc: made old, then dropped by --older-than
    con = sqlite3.connect(p.store / "index.sqlite")
    with con:
        con.execute("UPDATE evaluations SET finished = finished - 90000, last_hit = NULL WHERE fn = 'pipe:train'")
    con.close()
    p.run("-m", "memolab", "gc", "--older-than", "1d", "--yes")
    assert ids_of(p, "train") == []
    assert edges_of(p, 3)[0] == [("ds", "pipe:prepare", 4), ("model", "pipe:train", None)]
    assert edges_of(p, 4)[1] == [("pipe:evaluate", 3)]
    # why still explains a later miss (against an evaluation whose input is gone)
    p.write("pipe.py", PIPE.replace("lr=0.1", "lr=0.2"))
    p.run_json("run.py")
    assert "miss" in p.run("-m", "memolab", "why", "evaluate").stdout


def test_inputs_at_any_depth_of_the_arguments(tmp_store):
    class Loader:
        def __init__(self, dataset):
            self.dataset = dataset
            self.batch_size = 4

    @memo
    def split(n):
        x = np.arange(n, dtype=np.float64)
        return x[: n // 2].copy(), x[n // 2:].copy()

    @memo
    def prep(n):
        return np.full(n, float(n))

    @memo
    def metrics(k):
        return {"acc": 0.5 + k / 100, "loss": 1.0 / k}

    @memo
    def arrays(n):
        return {"X": np.ones(n), "y": np.zeros(n)}

    @memo
    def fit(loader, results, extra, m, data):
        return float(loader.dataset.sum() + results["a"].sum() + results["b"].sum() + m["acc"] + data["X"].sum())

    tr, te = split(10)  # a tuple of two arrays: each comes from split
    r1, r2 = prep(3), prep(4)
    fit(Loader(tr), {"a": r1, "b": r2}, [1, 2, 3], metrics(3), arrays(5))
    store = get_store()
    (row,) = [r for r in store.index.evaluations(fit.symbol)]
    from memolab.store import edges

    got = [(e["path"], e["function"].split(".")[-1], e["evaluation"]) for e in edges.inputs_of(store.index, row)]
    ids = {f.__name__: sorted(e["id"] for e in f.evaluations()) for f in (split, prep, metrics, arrays)}
    assert got == [("data", "arrays", ids["arrays"][0]),  # a dict of its arrays: one edge, at the dict
                   ("loader.dataset", "split", ids["split"][0]),
                   ("m", "metrics", ids["metrics"][0]),  # a small dict of floats: held, so known
                   ("results['a']", "prep", ids["prep"][0]),
                   ("results['b']", "prep", ids["prep"][1])], got
    # the same call from results loaded from the store (another process's, here: forgotten in memory)
    store.forget()
    fit.clear()
    tr, te = split(10)
    fit(Loader(tr), {"a": prep(3), "b": prep(4)}, [1, 2, 3], metrics(3), arrays(5))
    (row,) = [r for r in store.index.evaluations(fit.symbol)]
    assert [(e["path"], e["evaluation"]) for e in edges.inputs_of(store.index, row)] == [(g[0], g[2]) for g in got]


def test_an_equal_object_from_another_evaluation_keys_the_same(project):
    """Lineage is information: the key hashes content, so the result of another evaluation
    (or a plain copy) equal to the one a stored call was made from is a hit."""
    project.write("eq.py", """
        import json, sys
        import numpy as np
        from memolab import memo

        calls = []

        @memo
        def from_a(n):
            return np.arange(n, dtype=np.float64)

        @memo
        def from_b(n):
            return np.arange(n, dtype=np.float64) * 1.0

        @memo
        def total(x):
            calls.append(1)
            return float(x.sum())

        src = {"a": from_a, "b": from_b, "copy": lambda n: np.array(from_a(n))}[sys.argv[1]]
        x = src(100)
        k = total.key(x)
        total(x)
        print(json.dumps({"computed": len(calls), "key": list(k)}))
    """)
    a = project.run_json("eq.py", "a")
    b = project.run_json("eq.py", "b")
    c = project.run_json("eq.py", "copy")
    assert a["computed"] == 1 and b["computed"] == 0 and c["computed"] == 0
    assert a["key"] == b["key"] == c["key"]
    # the stored evaluation names where its input came from when it was computed
    d = json.loads(project.run("-m", "memolab", "show", "2", "--json").stdout)  # from_a #1, total #2
    assert d["fn"] == "__main__:total" and [(i["path"], i["function"]) for i in d["inputs"]] == [("x", "__main__:from_a")]


def test_a_hit_records_nothing_and_looks_for_nothing(tmp_store, monkeypatch):
    calls = []
    real = upstream.input_edges
    monkeypatch.setattr(upstream, "input_edges", lambda *a, **k: calls.append(1) or real(*a, **k))

    @memo
    def prep(n):
        return np.ones(n)

    @memo
    def use(x):
        return float(x.sum())

    use(prep(5))
    assert len(calls) == 2  # two misses
    use(prep(5))  # two hits from memory
    get_store().forget()
    use(prep(5))  # two hits from the store
    assert len(calls) == 2
    # a miss with no upstream object records no edge
    use(np.ones(6))
    assert len(calls) == 3
    newest = max(get_store().index.evaluations(use.symbol), key=lambda r: r["id"])
    assert "inputs" not in json.loads(newest["snapshot"])


def test_a_copy_is_known_by_content(tmp_store):
    @memo
    def prep(n):
        return {"X": np.arange(n, dtype=np.float64), "meta": "v1"}

    @memo
    def use(ds):
        return float(ds["X"].sum())

    @memo
    def plain(k):
        return k + 1  # no array: no content lineage (equal plain data is too common)

    @memo
    def use_plain(v):
        return v * 2

    ds = prep(50)
    use(copy.deepcopy(ds))  # no mark on the copy: found by its digest
    use_plain(plain(1) + 0)
    store = get_store()
    from memolab.store import edges

    (row,) = store.index.evaluations(use.symbol)
    assert [(e["path"], e["function"], e["by"]) for e in edges.inputs_of(store.index, row)] == [
        ("ds", prep.symbol, "content")]
    (row,) = store.index.evaluations(use_plain.symbol)
    assert edges.inputs_of(store.index, row) == []


def test_a_miss_explained_later_names_the_upstream_evaluation_too(tmp_store):
    @memo
    def prep(n):
        return np.arange(n, dtype=np.float64)

    @memo
    def use(x):
        return float(x.sum())

    use(prep(10))
    use(prep(20))  # code seen stored, no row for the key: explained when asked
    raw = get_store().index.last_miss(use.symbol)
    assert raw.get("pending") and raw["inputs"][0]["fn"] == prep.symbol
    from memolab.calls.explain import last_miss

    ex = last_miss(get_store(), use.symbol)
    assert ex["reasons"] == ["argument `x` now comes from `prep` #3 (was #1: `prep`'s arguments changed: "
                             "new arguments: n 10 -> 20)"], ex["reasons"]
    # and f.explain(...) before a call says the same (against the newest evaluation of its code)
    ex = use.explain(prep(30))
    assert ex.reasons == ["argument `x` now comes from `prep` #5 (was #3: `prep`'s arguments changed: "
                          "new arguments: n 20 -> 30)"], ex.reasons


def test_a_snapshot_that_is_not_json_indexes_nothing_and_stores(tmp_store):
    @memo
    def f(x):
        return x

    f(1)
    store = get_store()
    key = ("m:g", "c", "a", "s")
    store.index.record(key, "", {"snapshot": "{not json \"inputs\"", "payload": "p", "payload_size": 1,
                                 "buffers": "[]", "size": 1}, {})
    c = store.index.conn()
    assert c.execute("SELECT COUNT(*) FROM evaluations WHERE fn='m:g'").fetchone()[0] == 1
    assert c.execute("SELECT COUNT(*) FROM inputs").fetchone()[0] == 0
    # replaced (INSERT OR REPLACE, as fresh() does) and deleted: no entry left behind
    snap = json.dumps({"inputs": [{"path": "x", "fn": "m:h", "code": "c", "args": "a", "schema": "s"}]})
    store.index.record(key, "", {"snapshot": snap, "payload": "p", "payload_size": 1, "buffers": "[]", "size": 1}, {})
    assert c.execute("SELECT path, fn FROM inputs").fetchall() == [("x", "m:h")]
    (eid,) = c.execute("SELECT id FROM evaluations WHERE fn='m:g'").fetchone()
    store.index.mark_corrupt(eid, "stale", status="stale")  # out of use: the next record replaces it
    store.index.record(key, "", {"snapshot": snap.replace('"x"', '"y"'), "payload": "p", "payload_size": 1,
                                 "buffers": "[]", "size": 1}, {})
    assert c.execute("SELECT path, fn FROM inputs").fetchall() == [("y", "m:h")]
    store.index.clear("m:g")
    assert c.execute("SELECT COUNT(*) FROM inputs").fetchone()[0] == 0


def test_memolab_runs_rows_expose_inputs_and_users(tmp_store):
    @memo
    def prep(n):
        return np.ones(n)

    @memo
    def use(x, k=1):
        return float(x.sum()) * k

    use(prep(3), k=2)
    (u,) = memolab.runs("use")
    (pr,) = memolab.runs("prep")
    assert u.inputs == [("x", prep.symbol, pr.evaluation.id)] and u.used_by == []
    assert pr.used_by == [("x", use.symbol, u.evaluation.id)] and pr.inputs == []
    assert u.to_dict()["inputs"] == [{"path": "x", "fn": prep.symbol, "evaluation": pr.evaluation.id}]
