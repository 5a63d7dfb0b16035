"""Adversarial review of logging: one bad record must never cost the other logs."""
from __future__ import annotations

import numpy as np
import pytest

import memolab
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query


def index():
    return get_store().index


def runs_of(fn_symbol):
    return [r for r in query.runs(index(), fn_symbol) if isinstance(r["id"], int)]


def points(run_id, tag):
    s = query.scalars(index(), run_id, tag, max_points=10**9)
    return list(zip(s["step"], s["value"]))


def test_a_histogram_of_huge_values_does_not_poison_the_queue(tmp_store):
    # sum_squares of 1e200 overflows to inf; the flusher must not fail on it forever
    # (the whole batch, this call's scalars and its END record, used to be put back on every try)
    @memo
    def f():
        memolab.log.scalar("loss", 1.0)
        memolab.log.histogram("w", np.array([1e200, -1e200, 3e200]))
        memolab.log.scalar("loss", 2.0)
        return 0

    f()
    (run,) = runs_of(f.symbol)
    assert run["status"] == "done" and run["stored"]
    assert points(run["id"], "loss") == [(0, 1.0), (1, 2.0)]
    (h,) = query.events(index(), run["id"], "histogram", "w")
    assert h["meta"]["num"] == 3 and h["meta"]["min"] == -1e200 and h["meta"]["max"] == 3e200
    assert sum(h["meta"]["counts"]) == 3


def test_a_histogram_spanning_the_whole_double_range_is_logged(tmp_store):
    # hi - lo overflows: numpy cannot make finite bins, and the call used to raise inside training
    memolab.log.histogram("wide", np.array([-1.7e308, 0.0, 1.7e308]))
    memolab.log.flush()
    run = memolab.log.current_run()
    (h,) = query.events(index(), run, "histogram", "wide")
    assert h["meta"]["left"] == -1.7e308 and h["meta"]["limits"][-1] == 1.7e308
    assert sum(h["meta"]["counts"]) == 3 and h["meta"]["counts"][0] == 1 and h["meta"]["counts"][-1] == 1


@pytest.mark.parametrize("bad", [dict(step=2**64), dict(walltime="yesterday"), dict(step=-2**70)])
def test_an_unstorable_step_or_walltime_is_refused_at_the_call(tmp_store, bad):
    # checked on the caller's thread, naming the tag, instead of failing every later flush of the process
    @memo
    def g():
        memolab.log.scalar("ok", 1.0)
        with pytest.raises((TypeError, ValueError), match="'x'"):
            memolab.log.scalar("x", 1.0, **bad)
        with pytest.raises((TypeError, ValueError), match="'t'"):
            memolab.log.text("t", "hello", **bad)
        memolab.log.scalar("ok", 2.0)
        return 0

    g()
    (run,) = runs_of(g.symbol)
    assert run["status"] == "done" and run["stored"]
    assert points(run["id"], "ok") == [(0, 1.0), (1, 2.0)]


def test_export_and_listing_include_every_run_not_the_newest_5000(tmp_store, tmp_path):
    # query.runs had LIMIT 5000: export-tb silently skipped the oldest runs, and the
    # dashboard listed their stored evaluations as "stored without logs"
    from memolab.tracking import runs as _runs, tb_export

    @memo
    def oldest(x):
        memolab.log.scalar("first", 42.0)
        return x

    oldest(1)
    st = get_store()
    for i in range(5000):  # the hooks memo.py calls around a computation, without 5,000 computations
        h = _runs.begin("m:many", ("m:many", "c", f"a{i}", "s"), {"i": i}, st)
        _runs.end(h, "done")
    listed = query.runs(index())
    (old,) = [r for r in listed if r["fn"] == oldest.symbol]
    assert isinstance(old["id"], int) and old["stored"]  # its run, with its logs, not a bare "e<id>" row
    dirs = tb_export.export(index(), tmp_path / "tb")
    assert len(dirs) == 5001
    assert any(d.parent.name == tb_export._slug(oldest.symbol.replace(":", "."), 120) for d in dirs)
