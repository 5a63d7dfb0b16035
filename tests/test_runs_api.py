"""Runs you can name and read back (issue 28): SummaryWriter(log_dir) runs, names, nested configs
flattened, failures with their traceback and output, interrupted runs, and ``memolab.runs()``.
Scripts run in fresh processes; what they stored is read back with the public API."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import memolab
from conftest import require
from memolab.tracking import names

SWEEP = """
import sys
import memolab
from memolab import SummaryWriter, memo

# the classic TensorBoard sweep: one writer per log_dir, in a loop, outside any memoized call
for lr in (0.1, 0.01, 0.001):
    w = SummaryWriter(f"runs/lr{lr}")
    for step in range(4):
        w.add_scalar("loss", lr * step, step)
    w.close()

@memo
def train(cfg, writer=None):
    with open("calls.txt", "a") as f:
        f.write(f"{cfg['optim']['lr']}\\n")
    print("epoch 0 of", cfg["optim"]["lr"])
    for step in range(3):
        (writer.add_scalar if writer is not None else memolab.log.scalar)("val/acc", cfg["optim"]["lr"] * step, step)
    if cfg.get("name"):
        memolab.log.name(cfg["name"])
    if cfg["optim"]["lr"] > 1:
        print("loss is nan, giving up", file=sys.stderr)
        raise FloatingPointError("diverged at step 3")
    if cfg["optim"]["lr"] < 0:
        raise KeyboardInterrupt
    return cfg["optim"]["lr"]

base = {"data": {"batch": 256}, "optim": {"lr": 0.1, "momentum": 0.9}}
train(base, SummaryWriter("tb/base"))
train({**base, "optim": {"lr": 0.01, "momentum": 0.9}})
train({**base, "optim": {"lr": 0.5, "momentum": 0.9}, "name": "my favourite"})
try:
    train({**base, "optim": {"lr": 5.0, "momentum": 0.9}})
except FloatingPointError:
    pass
try:
    train({**base, "optim": {"lr": -1.0, "momentum": 0.9}})
except KeyboardInterrupt:
    pass
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from conftest import Project

    project = Project(tmp_path_factory.mktemp("runs") / "proj")
    project.write("sweep.py", SWEEP)
    project.run("sweep.py")
    project.run("sweep.py")  # every stored evaluation is a hit: no new runs
    return project


def test_each_log_dir_of_a_sweep_is_its_own_run_named_after_it(swept):
    rs = memolab.runs("sweep.py", store=str(swept.store))
    # three log_dirs in two processes: six runs, never one run whose steps repeat (the saw-tooth)
    assert sorted(r.name for r in rs) == sorted(["runs/lr0.1", "runs/lr0.01", "runs/lr0.001"] * 2)
    for r in rs:
        assert r.status == "done" and r.fn == "<process:sweep.py>"
        s = r.scalars("loss")
        assert s.step == [0, 1, 2, 3]
        assert s.value == pytest.approx([float(r.name[len("runs/lr"):]) * k for k in range(4)])


def test_names_flattened_configs_and_the_stored_evaluation(swept):
    rs = memolab.runs("train", store=str(swept.store))
    assert (swept.root / "calls.txt").read_text().split() == ["0.1", "0.01", "0.5", "5.0", "-1.0",
                                                              "5.0", "-1.0"]  # failures recompute
    by_name = {r.name: r for r in rs}
    # a writer's log_dir names the memoized run; log.name() names it; else the arguments that differ
    assert {"tb/base", "my favourite", "lr=0.01"} <= set(by_name)
    assert [r.name for r in rs if r.status == "failed"] == ["lr=5.0", "lr=5.0"]
    base = by_name["tb/base"]
    assert base.hparams == {"cfg.data.batch": 256, "cfg.optim.lr": 0.1, "cfg.optim.momentum": 0.9}  # no writer
    assert base.metrics == {"val/acc": pytest.approx(0.2)}
    assert base.evaluation is not None and base.evaluation.result == "0.1"
    assert base.scalars("val/acc").step == [0, 1, 2]
    assert by_name["my favourite"].hparams["cfg.name"] == "my favourite"
    with pytest.raises(KeyError, match="its tags: val/acc"):
        base.scalars("loss")


def test_a_failed_run_keeps_its_traceback_and_output_and_ctrl_c_is_interrupted(swept):
    failed = memolab.runs("train", status="failed", store=str(swept.store))
    assert len(failed) == 2 and all(r.evaluation is None for r in failed)
    r = failed[0]
    assert r.error == "FloatingPointError: diverged at step 3"
    assert 'sweep.py", line' in r.traceback and r.traceback.rstrip().endswith("FloatingPointError: diverged at step 3")
    assert "memolab/" not in r.traceback  # the decorator's own frames are left out
    assert r.output == "epoch 0 of 5.0\nloss is nan, giving up\n"  # stdout and stderr, in order
    stopped = memolab.runs("train", status="interrupted", store=str(swept.store))
    assert [x.hparams["cfg.optim.lr"] for x in stopped] == [-1.0, -1.0]
    assert stopped[0].error == "KeyboardInterrupt" and "KeyboardInterrupt" in stopped[0].traceback
    # a successful run stores no output (only failures keep theirs)
    assert all(x.output is None for x in memolab.runs("train", status="done", store=str(swept.store)))


def test_runs_api_filters_and_pandas(swept):
    st = str(swept.store)
    everything = memolab.runs(store=st)
    assert {r.fn for r in everything} == {"<process:sweep.py>", "__main__:train"}
    assert [r.name for r in memolab.runs(store=st, name=r"^runs/lr0\.1$")] == ["runs/lr0.1"] * 2
    assert len(memolab.runs("train", store=st, limit=2)) == 2
    with pytest.raises(ValueError, match="unknown status"):
        memolab.runs(store=st, status="finished")
    with pytest.raises(LookupError, match="no function matches 'trian'.*did you mean sweep.py:train"):
        memolab.runs("trian", store=st)
    df = memolab.runs("train", status="done", store=st).to_pandas()
    assert {"name", "cfg.optim.lr", "val/acc"} <= set(df.columns) and len(df) == 3
    assert list(memolab.runs("train", store=st)[0].scalars("val/acc").to_pandas().columns) == ["step", "value", "wall"]


def test_import_memolab_runs_the_module_stays_callable(swept):
    import memolab.ui.runs as module

    assert callable(memolab.runs) and callable(module)
    assert len(module("train", store=str(swept.store))) == len(memolab.runs("train", store=str(swept.store)))


def test_labels_use_the_arguments_that_differ():
    rows = [{"id": 1, "hparams": {"cfg": {"optim": {"lr": 0.1}, "seed": 1}, "epochs": 10}},
            {"id": 2, "hparams": {"cfg": {"optim": {"lr": 0.01}, "seed": 1}, "epochs": 10}},
            {"id": 3, "name": "baseline", "hparams": {"cfg": {"optim": {"lr": 0.01}, "seed": 2}, "epochs": 10}}]
    assert names.flatten(rows[0]["hparams"]) == {"cfg.optim.lr": 0.1, "cfg.seed": 1, "epochs": 10}
    assert names.labels(rows) == ["lr=0.1 seed=1", "lr=0.01 seed=1", "baseline"]
    assert names.labels(rows[:1]) == ["run 1"]  # nothing differs: its id


def test_nested_configs_are_kept_nested_within_a_budget():
    from dataclasses import dataclass
    from types import SimpleNamespace

    from memolab.tracking.hparams import hparam_value

    @dataclass
    class Optim:
        lr: float = 0.1
        betas: tuple = (0.9, 0.99)

    v = hparam_value({"optim": Optim(), "ns": SimpleNamespace(a=1), "big": list(range(100))})
    assert v["optim"] == {"lr": 0.1, "betas": [0.9, 0.99]} and v["ns"] == {"a": 1}
    assert isinstance(v["big"], str)  # a long list is a short repr, not 100 columns
    deep: dict = {}
    d = deep
    for _ in range(20):
        d["x"] = {}
        d = d["x"]
    ((key, value),) = names.flatten(hparam_value(deep)).items()
    assert key == "x.x.x.x.x.x" and isinstance(value, str)  # six levels, then a short repr


SIGTERM_JOB = """
import time
import memolab
from memolab import memo

@memo
def train(lr):
    print("starting", lr, flush=True)
    memolab.log.scalar("loss", 1.0)
    memolab.log.flush()
    open("ready", "w").close()
    time.sleep(60)
    return lr

train(0.1)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_marks_the_run_interrupted_and_still_dies_of_sigterm(project):
    project.write("job.py", SIGTERM_JOB)
    p = project.start("job.py", ready="ready")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGTERM  # the exit a supervisor sees is unchanged
    (r,) = memolab.runs("train", store=str(project.store))
    assert r.status == "interrupted" and r.error == "SIGTERM"
    assert r.output == "starting 0.1\n" and r.metrics == {"loss": 1.0}


CRASH = """
import sys
import memolab
from memolab import SummaryWriter

w = SummaryWriter("runs/never-closed")
w.add_scalar("loss", 1.0, 0)
memolab.log.scalar("outside", 2.0)
raise {exc}
"""


@pytest.mark.parametrize("exc,status,error", [("RuntimeError('boom')", "failed", "RuntimeError: boom"),
                                              ("KeyboardInterrupt", "interrupted", "KeyboardInterrupt")])
def test_a_script_that_dies_ends_its_process_and_writer_runs_as_it_ended(project, exc, status, error):
    project.write("crash.py", CRASH.format(exc=exc))
    cp = project.run("crash.py", check=False)
    assert cp.returncode != 0
    rs = memolab.runs("crash.py", store=str(project.store))
    assert sorted((r.name, r.status) for r in rs) == [("crash.py", status), ("runs/never-closed", status)]
    (proc,) = [r for r in rs if r.name == "crash.py"]
    assert proc.error == error and 'crash.py", line 9, in <module>' in proc.traceback


OLD_RUNS_DDL = """CREATE TABLE runs(id INTEGER PRIMARY KEY, fn TEXT NOT NULL, code TEXT, args TEXT, schema TEXT,
    parent INTEGER, name TEXT, started REAL NOT NULL, finished REAL, updated REAL, status TEXT NOT NULL,
    hparams TEXT, eval_id INTEGER, pid INTEGER, host TEXT)"""


def test_a_store_made_before_the_new_run_columns_gains_them(project):
    import sqlite3

    project.write("ok.py", "from memolab import memo\n@memo\ndef f(x):\n    return x\nf(1)\n")
    project.run("ok.py")
    c = sqlite3.connect(project.store / "index.sqlite")
    with c:  # the runs table as the first logging release wrote it, with one finished run (no kept counts)
        c.execute("DELETE FROM meta WHERE key LIKE 'kept:%'")
        c.execute("DROP TABLE runs")
        c.execute(OLD_RUNS_DDL)
        c.execute("INSERT INTO runs(id, fn, started, finished, updated, status, hparams) VALUES "
                  "(7, '__main__:f', 1.0, 2.0, 2.0, 'done', '{\"x\": 0}')")
    c.close()
    project.write("bad.py", "from memolab import memo\n@memo\ndef f(x):\n    print('about to fail')\n"
                            "    raise ValueError('no')\ntry:\n    f(2)\nexcept ValueError:\n    pass\n")
    project.run("bad.py")
    c = sqlite3.connect(project.store / "index.sqlite")
    cols = {r[1] for r in c.execute("PRAGMA table_info(runs)")}
    c.close()
    assert {"error", "traceback", "output", "script"} <= cols
    rs = {r.id: r for r in memolab.runs("f", store=str(project.store))}
    assert rs[7].status == "done" and rs[7].hparams == {"x": 0} and rs[7].traceback is None and rs[7].script is None
    (new,) = [r for r in rs.values() if r.status == "failed"]
    assert new.output == "about to fail\n" and new.traceback.rstrip().endswith("ValueError: no")
    assert new.script == str(project.root / "bad.py")


def test_writers_with_other_log_dirs_inside_one_computation_are_its_children(tmp_store):
    from memolab import SummaryWriter, memo

    @memo
    def sweep(lrs):
        for lr in lrs:
            w = SummaryWriter(f"runs/lr{lr}")
            for step in range(3):
                w.add_scalar("loss", lr * step, step)
            w.close()  # inside a computation: the run ends with the computation, not here
        return len(lrs)

    assert sweep((0.1, 0.2, 0.3)) == 3 and sweep((0.1, 0.2, 0.3)) == 3  # the second call is a hit
    rs = memolab.runs(sweep)
    by_name = {r.name: r for r in rs}
    assert sorted(by_name) == ["runs/lr0.1", "runs/lr0.2", "runs/lr0.3"] and len(rs) == 3
    top = by_name["runs/lr0.1"]  # the first writer names the computation's own run
    assert top.parent is None and top.evaluation is not None
    for name in ("runs/lr0.2", "runs/lr0.3"):
        child = by_name[name]
        assert child.parent == top.id and child.status == "done"
        assert child.evaluation is not None and child.evaluation.id == top.evaluation.id  # gc'd with it
        assert child.scalars("loss").step == [0, 1, 2]
    assert top.scalars("loss").step == [0, 1, 2]


def test_a_state_dict_argument_stays_one_short_repr():
    # keeping it nested would repr each of its tensors at every computation's start
    torch = require("torch")
    from memolab.tracking.hparams import hparam_value

    assert isinstance(hparam_value({f"layer{i}.weight": torch.zeros(2) for i in range(50)}), str)
    assert hparam_value({"lr": 0.1, "root": __import__("pathlib").Path("/data")}) == {"lr": 0.1, "root": "PosixPath('/data')"}


def test_import_memolab_stays_cheap():
    # memolab.runs, pandas, asyncio (30 ms; the "interrupted" status needs it only once it is imported)
    # and signal are loaded on first use only
    from conftest import SRC

    code = ("import sys, memolab; print(sorted(m for m in ('memolab.ui.runs', 'pandas', 'asyncio', 'signal', "
            "'memolab.tracking.names', 'memolab.tracking.query') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC), capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_cancelled_async_computation_is_interrupted(tmp_store):
    import asyncio

    from memolab import memo

    @memo
    async def slow(x):
        memolab.log.scalar("started", 1.0)
        await asyncio.sleep(30)
        return x

    async def main():
        task = asyncio.ensure_future(slow(1))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (r,) = memolab.runs(slow)
    assert r.status == "interrupted" and r.error == "CancelledError" and r.metrics == {"started": 1.0}


CHAINED_SIGTERM_JOB = """
import signal, sys, time
import memolab
from memolab import memo

stop = []

@memo
def train(lr):
    previous = signal.getsignal(signal.SIGTERM)  # memolab's, installed when this computation began

    def graceful(signum, frame):  # what Lightning's trainer does: note it, chain the previous handler
        stop.append(signum)
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, graceful)
    open("ready", "w").close()
    for step in range(600):
        memolab.log.scalar("loss", 1.0 / (step + 1))
        if stop:
            raise SystemExit(143)  # Lightning's SIGTERMException is a SystemExit
        time.sleep(0.05)
    return lr

train(0.1)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_handler_chained_after_memolabs_keeps_its_graceful_stop(project):
    project.write("job.py", CHAINED_SIGTERM_JOB)
    p = project.start("job.py", ready="ready")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == 143  # the program's own graceful exit, not a death by SIGTERM
    (r,) = memolab.runs("train", store=str(project.store))
    assert r.status == "interrupted" and r.error == "SystemExit: 143" and "loss" in r.metrics


def test_an_object_argument_shows_without_its_address():
    """A default repr's address differs in every process: two runs with equal arguments would
    show different values, and a label (the arguments that differ) would be only addresses."""
    from memolab.settings.text import short_repr

    class Data:
        pass

    assert short_repr(Data()) == short_repr(Data()) and "0x" not in short_repr([Data(), Data()])
