"""Adversarial review of logging: one bad record must never cost the other logs."""
from __future__ import annotations

import numpy as np
import pytest

import memolab
from conftest import require
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query
from test_tracking import index, points, runs_of


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


def _proc_runs():
    return {r["pid"]: r for f in query.functions(index()) if f["fn"].startswith("<process:") for r in runs_of(f["fn"])}


def test_a_child_forked_inside_a_memoized_call_does_not_collide_with_its_parent(tmp_store):
    # The child inherited the parent's current run *and* its count of points already written per
    # tag, so both numbered their next point of a tag alike: same (run, tag, step, seq), and the
    # second flush failed its primary key on every try, losing all that process's logs.
    import os

    @memo
    def train(n):
        memolab.log.scalar("x", 0.0, step=0)
        memolab.log.flush()  # the parent's count of "x" points is now 1, in both processes after the fork
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                memolab.log.scalar("x", 10.0, step=1)
                memolab.log.flush()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        memolab.log.scalar("x", 1.0, step=1)
        return pid

    pid = train(1)
    (run,) = runs_of(train.symbol)
    assert run["status"] == "done" and run["stored"]
    assert points(run["id"], "x") == [(0, 0.0), (1, 1.0)]  # the evaluation's own curve, nothing from the child
    child = _proc_runs()[pid]  # "A child process has its own process run"
    assert points(child["id"], "x") == [(1, 10.0)]


def test_logs_of_process_pool_workers_are_flushed_when_the_worker_exits(tmp_store):
    # multiprocessing children leave through os._exit, which skips atexit: unflushed logs were lost
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as ex:
        pids = set(ex.map(_worker_logs, range(6)))
    procs = _proc_runs()
    got = sorted(v for p in pids for _, v in points(procs[p]["id"], "work"))
    assert got == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _worker_logs(k):
    import os

    memolab.log.scalar("work", float(k))
    return os.getpid()


def test_the_process_run_of_a_forked_child_names_the_run_it_was_forked_from(tmp_store):
    import os

    @memo
    def spawner(n):
        pid = os.fork()
        if pid == 0:
            try:
                memolab.log.scalar("c", 1.0)
                memolab.log.flush()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        return pid

    pid = spawner(3)
    (run,) = runs_of(spawner.symbol)
    assert _proc_runs()[pid]["parent"] == run["id"]


KILLED_MID_RUN = """
import os, signal, memolab
from memolab import memo

@memo
def work(n):
    for i in range(n):
        memolab.log.scalar("v", i)
    memolab.log.flush()
    os.kill(os.getpid(), signal.SIGKILL)

memolab.log.scalar("outside", 1.0)
work(5)
"""


def test_clear_deletes_lost_runs_too(project):
    # docs/logging.md: "clear FUNC deletes every finished run of the function, failed and lost
    # ones included". A lost run is stored as 'running' (its process died), so clear kept it,
    # and gc never drops it (no evaluation): its logs outlived everything, forever.
    project.write("killed.py", KILLED_MID_RUN)
    cp = project.run("killed.py", check=False)
    assert cp.returncode == -9
    st = get_store(project.store)
    (r,) = query.runs(st.index, "__main__:work")
    assert r["status"] == "lost"
    st.clear("__main__:work")
    assert query.runs(st.index, "__main__:work") == []
    db = st.index.conn()
    assert db.execute("SELECT COUNT(*) FROM scalars WHERE run=?", (r["id"],)).fetchone() == (0,)
    # the killed process's own run is lost too: clearing everything takes it
    (p,) = [x for x in query.runs(st.index) if str(x["fn"]).startswith("<process:")]
    assert p["status"] == "lost"
    st.clear()
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_exporting_again_into_the_same_directory_does_not_double_the_points(tmp_store, tmp_path):
    # Each export wrote a new events.out.tfevents.<now>... file next to the previous one, and
    # TensorBoard reads every event file of a run directory: every point showed up twice.
    ea_mod = require("tensorboard.backend.event_processing.event_accumulator")
    from memolab.tracking import tb_export

    @memo
    def t(x):
        for i in range(3):
            memolab.log.scalar("loss", x + i)
        return x

    t(1.0)
    (d,) = tb_export.export(index(), tmp_path / "tb")
    # (the HParams experiment file beside the first run is another file of the export's own)
    (first,) = [p for p in d.glob("events.out.tfevents.*") if not p.name.endswith(tb_export.EXPERIMENT_SUFFIX)]
    # as if that export was made at an earlier second (the file name holds the time)
    first.rename(d / "events.out.tfevents.0000000001.somehost.memolab")
    own = d / "events.out.tfevents.0000000002.somehost.v2"
    own.write_bytes(b"")  # not ours: an export must leave files it did not write alone
    (d2,) = tb_export.export(index(), tmp_path / "tb")
    assert d2 == d and own.exists()
    ea = ea_mod.EventAccumulator(str(d), size_guidance={"scalars": 0})
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("loss")] == [(0, 1.0), (1, 2.0), (2, 3.0)]
