"""memolab.log / SummaryWriter: logs attach to the evaluation that made them, and are never lost."""
from __future__ import annotations

import asyncio
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

import memolab
from conftest import Calls, require
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query


def index():
    return get_store().index


def runs_of(fn_symbol):
    return [r for r in query.runs(index(), fn_symbol) if isinstance(r["id"], int)]


def points(run_id, tag):
    s = query.scalars(index(), run_id, tag, max_points=10**9)
    return list(zip(s["step"], s["value"], strict=False))


def test_logs_attach_to_the_evaluation_and_survive_a_hit(tmp_store):
    @memo
    def train(lr, epochs=3):
        for i in range(epochs):
            memolab.log.scalar("loss", lr / (i + 1))
        return lr * 10

    assert train(0.5) == 5.0
    (run,) = runs_of(train.symbol)
    assert run["status"] == "done" and run["stored"]
    assert run["hparams"] == {"lr": 0.5, "epochs": 3}  # bound arguments, defaults included
    ev = train.evaluations()[0]
    assert run["eval_id"] == ev["id"]
    assert points(run["id"], "loss") == [(0, 0.5), (1, 0.25), (2, 0.5 / 3)]

    # a hit does not run the function: no new run, and the stored curves are still those of the evaluation
    assert train(0.5) == 5.0
    get_store().flush_hits()
    (run2,) = runs_of(train.symbol)
    assert run2["id"] == run["id"] and run2["hits"] == 1
    assert points(run["id"], "loss") == [(0, 0.5), (1, 0.25), (2, 0.5 / 3)]

    # other arguments: a second run, compared side by side
    train(0.1)
    rs = runs_of(train.symbol)
    assert sorted(r["hparams"]["lr"] for r in rs) == [0.1, 0.5]
    hp = query.hparams(index(), train.symbol)
    assert hp["hparams"] == ["epochs", "lr"] and hp["metrics"] == ["loss"]
    finals = {r["hparams"]["lr"]: r["metrics"]["loss"] for r in hp["rows"]}
    assert finals == {0.5: pytest.approx(0.5 / 3), 0.1: pytest.approx(0.1 / 3)}


def test_nested_memoized_calls_log_to_their_own_runs(tmp_store):
    @memo
    def inner(x):
        memolab.log.scalar("inner_metric", x)
        return x + 1

    @memo
    def outer(x):
        memolab.log.scalar("outer_metric", 1.0)
        y = inner(x)
        memolab.log.scalar("outer_metric", 2.0)  # after the inner call returns, logs go back to outer's run
        return y

    outer(7)
    (o,) = runs_of(outer.symbol)
    (i,) = runs_of(inner.symbol)
    assert points(o["id"], "outer_metric") == [(0, 1.0), (1, 2.0)]
    assert points(o["id"], "inner_metric") == []
    assert points(i["id"], "inner_metric") == [(0, 7.0)]
    assert i["parent"] == o["id"] and o["parent"] is None


def test_a_raising_function_keeps_its_logs_and_is_marked_failed(tmp_store):
    @memo
    def diverge(n):
        for i in range(n):
            memolab.log.scalar("loss", 10.0 ** i)
        raise FloatingPointError("loss exploded")

    with pytest.raises(FloatingPointError):
        diverge(4)
    (run,) = runs_of(diverge.symbol)
    assert run["status"] == "failed" and run["eval_id"] is None
    assert [v for _, v in points(run["id"], "loss")] == [1.0, 10.0, 100.0, 1000.0]


def test_logs_outside_memoized_functions_go_to_a_process_run(tmp_store):
    memolab.log.scalar("outside", 1.5, step=3)
    memolab.log.text("note", "hello")
    memolab.log.flush()
    fns = [f["fn"] for f in query.functions(index())]
    proc = [f for f in fns if f.startswith("<process:")]
    assert len(proc) == 1
    (run,) = runs_of(proc[0])
    assert run["status"] == "running" and run["pid"] == os.getpid()  # this process is alive
    assert points(run["id"], "outside") == [(3, 1.5)]
    assert query.texts(index(), run["id"], "note")[0]["text"] == "hello"


def test_step_defaults_to_one_more_than_the_last_step_of_that_tag(tmp_store):
    @memo
    def f():
        memolab.log.scalar("a", 1)            # 0
        memolab.log.scalar("a", 2)            # 1
        memolab.log.scalar("a", 3, step=10)   # 10
        memolab.log.scalar("a", 4)            # 11
        memolab.log.scalar("b", 5)            # 0: steps are per tag
        memolab.log.scalars({"x": 1, "y": 2}, step=5, main_tag="m")
        return 0

    f()
    (run,) = runs_of(f.symbol)
    assert [s for s, _ in points(run["id"], "a")] == [0, 1, 10, 11]
    assert points(run["id"], "b") == [(0, 5.0)]
    assert points(run["id"], "m/x") == [(5, 1.0)] and points(run["id"], "m/y") == [(5, 2.0)]


def test_async_memoized_function_logs_to_its_run(tmp_store):
    @memo
    async def job(k):
        for i in range(3):
            memolab.log.scalar("v", k * i)
            await asyncio.sleep(0)
        return k

    async def main():
        return await asyncio.gather(job(1), job(2))

    assert asyncio.run(main()) == [1, 2]
    by_k = {r["hparams"]["k"]: r for r in runs_of(job.symbol)}
    assert [v for _, v in points(by_k[1]["id"], "v")] == [0.0, 1.0, 2.0]
    assert [v for _, v in points(by_k[2]["id"], "v")] == [0.0, 2.0, 4.0]


def test_histograms_images_text_roundtrip(tmp_store):
    PIL = require("PIL.Image")
    rng = np.random.default_rng(0)
    w = rng.normal(size=1000)
    rgb = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    chw = rng.random((1, 4, 6))

    @memo
    def f():
        memolab.log.histogram("weights", w, step=0, bins=20)
        memolab.log.histogram("weights", np.append(w, [np.nan, np.inf]), step=1, bins=20)
        memolab.log.image("rgb", rgb, step=0)
        memolab.log.image("grey", chw, step=0)  # CHW floats in [0, 1]
        memolab.log.text("summary", "héllo\nworld", step=2)
        return 1

    f()
    (run,) = runs_of(f.symbol)
    h0, h1 = query.events(index(), run["id"], "histogram", "weights")
    counts, edges = np.histogram(w, bins=20)
    assert h0["meta"]["counts"] == counts.tolist()
    assert h0["meta"]["limits"] == pytest.approx(edges[1:].tolist())
    assert h0["meta"]["num"] == 1000 and h0["meta"]["sum"] == pytest.approx(w.sum())
    assert h1["meta"]["nonfinite"] == 2 and h1["meta"]["num"] == 1000
    import io

    (img,) = query.events(index(), run["id"], "image", "rgb", with_data=True)
    decoded = np.asarray(PIL.open(io.BytesIO(bytes(img["data"]))))
    assert decoded.shape == (5, 7, 3) and (decoded == rgb).all()
    (grey,) = query.events(index(), run["id"], "image", "grey", with_data=True)
    g = np.asarray(PIL.open(io.BytesIO(bytes(grey["data"]))))
    assert g.shape == (4, 6) and (g == np.rint(chw[0] * 255).astype(np.uint8)).all()
    assert query.texts(index(), run["id"], "summary") == [
        {"step": 2, "wall": pytest.approx(time.time(), abs=60), "text": "héllo\nworld"}]


def test_nan_and_inf_scalars(tmp_store):
    @memo
    def f():
        for v in (1.0, float("nan"), float("inf"), 2.0):
            memolab.log.scalar("x", v)
        return 0

    f()
    (run,) = runs_of(f.symbol)
    s = query.scalars(index(), run["id"], "x")
    assert s["value"] == [1.0, None, None, 2.0]  # JSON has no NaN/inf: the chart draws gaps
    raw = query.all_scalars(index(), run["id"])["x"]
    assert math.isnan(raw[1][2]) and raw[2][2] == math.inf


def test_bad_input_names_the_tag(tmp_store):
    with pytest.raises(TypeError, match=r"scalar\('loss'\): value must be a number, got list"):
        memolab.log.scalar("loss", [1, 2])
    with pytest.raises(TypeError, match="tag must be a str, got int 3"):
        memolab.log.scalar(3, 1.0)
    with pytest.raises(ValueError, match=r"image\('img'\): an image must have 2 or 3 dimensions, got shape \(2, 2, 2, 2\)"):
        memolab.log.image("img", np.zeros((2, 2, 2, 2)))
    with pytest.raises(ValueError, match=r"image\('img'\): dataformats 'CHW' does not fit shape \(4, 4\)"):
        memolab.log.image("img", np.zeros((4, 4)), dataformats="CHW")
    with pytest.raises(TypeError, match=r"text\('t'\): value must be a str, got int"):
        memolab.log.text("t", 5)
    with pytest.raises(TypeError, match=r"step for 'loss' must be an int, got str 'x'"):
        memolab.log.scalar("loss", 1.0, step="x")


def test_summary_writer_is_a_drop_in(tmp_store):
    torch = require("torch")
    plt = require("matplotlib.pyplot")
    from memolab import SummaryWriter

    @memo
    def train(lr):
        writer = SummaryWriter("runs/exp1")
        for step in range(4):
            writer.add_scalar("loss", torch.tensor(1.0 / (step + 1)), step)
            writer.add_scalars("acc", {"train": 0.5 + step / 10, "val": 0.4 + step / 10}, step)
        writer.add_histogram("w", torch.randn(100, requires_grad=True), 0)
        writer.add_image("img", torch.rand(3, 8, 8), 0)
        writer.add_text("cfg", f"lr={lr}", 0)
        fig = plt.figure(figsize=(2, 2))
        plt.plot([1, 2, 3])
        writer.add_figure("fig", fig, 0)
        writer.add_hparams({"batch": 32}, {"hparam/final": 0.9})
        writer.flush()
        writer.close()
        return lr

    train(0.01)
    (run,) = runs_of(train.symbol)
    rid = run["id"]
    assert [round(v, 6) for _, v in points(rid, "loss")] == [1.0, 0.5, round(1 / 3, 6), 0.25]
    assert [s for s, _ in points(rid, "acc/train")] == [0, 1, 2, 3] and len(points(rid, "acc/val")) == 4
    assert points(rid, "hparam/final") == [(0, pytest.approx(0.9))]
    assert run["hparams"] == {"lr": 0.01, "batch": 32}
    tags = query.tags(index(), [rid])
    assert tags["histogram"] == ["w"] and sorted(tags["image"]) == ["fig", "img"] and tags["text"] == ["cfg"]
    (img,) = query.events(index(), rid, "image", "img")
    assert img["meta"] == {"height": 8, "width": 8, "channels": 3}
    (fig_ev,) = query.events(index(), rid, "image", "fig")
    assert fig_ev["meta"]["width"] > 50


def test_import_memolab_does_not_load_logging_numpy_or_torch():
    code = ("import sys, memolab; bad = [m for m in ('numpy', 'torch', 'memolab.tracking.log', 'memolab.ui.server') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert out.strip() == "[]"


# -- end to end: real processes ------------------------------------------------------------------
TRAIN = """
import json, sys, memolab
from memolab import memo

@memo
def fit(lr, epochs=5):
    for e in range(epochs):
        memolab.log.scalar("loss", lr * (epochs - e))
    return lr * {factor}

print(json.dumps({{"result": fit(float(sys.argv[1]))}}))
"""


def _db(project):
    return sqlite3.connect(str(project.store / "index.sqlite"))


@pytest.mark.slow
def test_e2e_logs_on_miss_hit_and_code_change(project):
    project.write("train.py", TRAIN.format(factor=2))
    assert project.run_json("train.py", "0.5") == {"result": 1.0}
    assert project.run_json("train.py", "0.5") == {"result": 1.0}  # hit in a new process: no new run
    db = _db(project)
    runs = db.execute("SELECT id, status, eval_id, code FROM runs WHERE fn='__main__:fit'").fetchall()
    assert len(runs) == 1 and runs[0][1] == "done"
    (hits,) = db.execute("SELECT hits FROM evaluations WHERE id=?", (runs[0][2],)).fetchone()
    assert hits == 1
    vals = [v for (v,) in db.execute("SELECT value FROM scalars WHERE run=? ORDER BY step", (runs[0][0],))]
    assert vals == [2.5, 2.0, 1.5, 1.0, 0.5]

    project.write("train.py", TRAIN.format(factor=3))  # code edit: a miss, a second run with another code digest
    assert project.run_json("train.py", "0.5") == {"result": 1.5}
    runs = db.execute("SELECT id, status, eval_id, code FROM runs WHERE fn='__main__:fit' ORDER BY started").fetchall()
    assert len(runs) == 2 and runs[0][3] != runs[1][3] and all(r[1] == "done" for r in runs)
    assert runs[0][2] != runs[1][2]


KILLED = """
import sys, time, memolab
from memolab import memo

@memo
def long_training(n):
    for i in range(n):
        memolab.log.scalar("loss", float(i), step=i)
    memolab.log.flush()
    print("flushed", flush=True)
    for i in range(n, 2 * n):
        memolab.log.scalar("loss", float(i), step=i)
    time.sleep(600)
    return n

long_training(int(sys.argv[1]))
"""


@pytest.mark.slow
def test_logs_survive_sigkill_after_a_flush(project):
    import memolab.tracking.sink as sink

    project.write("killed.py", KILLED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project.root), *sys.path]),
               MEMOLAB_STORE=str(project.store))
    p = subprocess.Popen([sys.executable, "killed.py", "1000"], cwd=project.root, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "flushed"
        os.kill(p.pid, signal.SIGKILL)  # no atexit, no finally: only what was committed survives
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    db = _db(project)
    (run_id, status) = db.execute("SELECT id, status FROM runs WHERE fn='__main__:long_training'").fetchone()
    assert status == "running"  # it never finished; the dashboard shows it as such
    steps = [s for (s,) in db.execute("SELECT step FROM scalars WHERE run=? ORDER BY step", (run_id,))]
    # everything logged before the flush is there, exactly once; later points may or may not be
    assert steps[:1000] == list(range(1000))
    assert steps == list(range(len(steps)))
    assert sink.INTERVAL <= 1.0
    # the dashboard does not show it as running forever: its lease is gone, so it is "lost"
    db.execute("DELETE FROM leases")  # what a waiter does once the dead owner's lease goes stale
    db.commit()
    (r,) = [r for r in query.runs(get_store(project.store).index, "__main__:long_training") if r["id"] == run_id]
    assert r["status"] == "lost"
    assert [f["running"] for f in query.functions(get_store(project.store).index)] == [0]


LIVE = """
import time, memolab
from memolab import memo

@memo
def slow(n):
    for i in range(n):
        memolab.log.scalar("progress", i)
        time.sleep(0.01)
    time.sleep(600)

slow(50)
"""


@pytest.mark.slow
def test_background_flush_makes_a_running_evaluation_visible(project):
    """No explicit flush: the background thread writes while the function is still running (live charts)."""
    project.write("live.py", LIVE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project.root), *sys.path]),
               MEMOLAB_STORE=str(project.store))
    p = subprocess.Popen([sys.executable, "live.py"], cwd=project.root, env=env)
    try:
        deadline = time.time() + 60
        n = 0
        while time.time() < deadline:
            try:
                db = _db(project)
                row = db.execute("SELECT r.status, t.n FROM runs r JOIN scalar_tags t ON t.run = r.id "
                                 "WHERE r.fn='__main__:slow' AND t.tag='progress'").fetchone()
                db.close()
            except sqlite3.OperationalError:  # tables not created yet
                row = None
            if row and row[1] >= 50:
                assert row[0] == "running"
                n = row[1]
                break
            time.sleep(0.2)
        assert n == 50
    finally:
        p.kill()
        p.wait(10)


def test_a_summary_writer_argument_is_not_part_of_the_key(tmp_store):
    from memolab import SummaryWriter

    calls = Calls()  # counts runs without joining the key

    @memo
    def train(lr, writer):
        calls.append(lr)
        writer.add_scalar("loss", lr)
        return lr

    train(0.1, SummaryWriter("runs/a"))
    train(0.1, SummaryWriter("runs/b"))  # another log_dir: still a hit
    assert calls == [0.1]
    (run,) = runs_of(train.symbol)
    assert points(run["id"], "loss") == [(0, 0.1)]
    # the writer is no hyperparameter (it cannot change the result); its log_dir names the run
    assert "writer" not in run["hparams"] and run["hparams"] == {"lr": 0.1}
    assert run["name"] == run["label"] == "runs/a"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_logs_to_its_own_runs(tmp_store):
    @memo
    def work(k):
        memolab.log.scalar("k", k)
        return k

    memolab.log.scalar("parent", 1.0)  # the parent's process run (and its flusher thread) exist before the fork
    pid = os.fork()
    if pid == 0:  # child: no flusher thread was inherited; os._exit skips atexit
        code = 1
        try:
            work(5)
            memolab.log.scalar("child", 2.0)
            memolab.log.flush()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    memolab.log.flush()
    (run,) = runs_of(work.symbol)
    assert run["pid"] == pid and points(run["id"], "k") == [(0, 5.0)]
    procs = {r["pid"]: r for f in query.functions(index()) if f["fn"].startswith("<process:") for r in runs_of(f["fn"])}
    assert points(procs[os.getpid()]["id"], "parent") == [(0, 1.0)] and points(procs[os.getpid()]["id"], "child") == []
    assert points(procs[pid]["id"], "child") == [(0, 2.0)]


def test_pil_images_are_logged_as_their_pixels(tmp_store):
    Image = require("PIL.Image")
    import io

    rgb = Image.new("RGB", (4, 3), (10, 200, 30))
    pal = rgb.convert("P")  # palette image: its raw array holds palette indices, not colours

    @memo
    def f():
        memolab.log.image("rgb", rgb, step=0)
        memolab.log.image("pal", pal, step=0)
        return 0

    f()
    (run,) = runs_of(f.symbol)
    for tag in ("rgb", "pal"):
        (ev,) = query.events(index(), run["id"], "image", tag, with_data=True)
        px = np.asarray(Image.open(io.BytesIO(bytes(ev["data"]))))
        assert px.shape == (3, 4, 3) and (px == np.asarray(pal.convert("RGB") if tag == "pal" else rgb)).all()


def test_logs_live_as_long_as_their_evaluation(tmp_store):
    @memo
    def f(x):
        memolab.log.scalar("v", x)
        if x < 0:
            raise ValueError("negative")
        return x

    @memo
    def g(x):
        memolab.log.scalar("w", x)
        return x

    f(1), f(2), g(3)
    with pytest.raises(ValueError):
        f(-1)
    store = get_store()
    db = store.index.conn()
    by_x = {r["hparams"]["x"]: r["id"] for r in runs_of(f.symbol)}
    assert set(by_x) == {1, 2, -1}

    # gc drops evaluation f(1): its run and its points go; f(2), the failed f(-1) and g stay
    (e1,) = [r["eval_id"] for r in runs_of(f.symbol) if r["hparams"]["x"] == 1]
    store.index.delete_evaluations([e1])
    store.collect_garbage()
    assert {r["hparams"]["x"] for r in runs_of(f.symbol)} == {2, -1}
    assert db.execute("SELECT COUNT(*) FROM scalars WHERE run=?", (by_x[1],)).fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM scalar_tags WHERE run=?", (by_x[1],)).fetchone() == (0,)

    # clearing a function removes all of its finished runs, failed ones included; other functions keep theirs
    f.clear()
    assert runs_of(f.symbol) == []
    assert db.execute("SELECT COUNT(*) FROM scalars WHERE run IN (?,?)", (by_x[2], by_x[-1])).fetchone() == (0,)
    (gr,) = runs_of(g.symbol)
    assert points(gr["id"], "w") == [(0, 3.0)]
