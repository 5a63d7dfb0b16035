"""Issue 53 §2: ``ls FUNC`` lists the runs that stored nothing (computing in another process, failed,
interrupted) among its evaluations, with a STATUS, what the store knows of them, and their arguments
in the form the evaluations show theirs: a sweep's constant arguments stay in the shared line."""
from __future__ import annotations

import re

DRIVER = r"""
import contextlib, dataclasses, io, json, os, signal, sqlite3, subprocess, sys, time
from memolab import memo
from memolab.cli import main


class Net:
    def __repr__(self):
        return "Net(42 params)"


@dataclasses.dataclass(frozen=True)
class Cfg:  # a config: a run's hyperparameters hold it as {"depth": 2}, its evaluations as Cfg(depth=2)
    depth: int = 2


@memo
def train(model, optimizer, lr, seed=1, epochs=3, cfg=Cfg()):
    if lr > 1:
        raise ValueError(f"diverged at lr={lr}\nsee the log for the steps")
    if lr in (0.5, 0.7):  # computes until stopped: the parent watches it computing, then stops it
        open(os.environ["STARTED"] + str(lr), "w").close()
        end = time.monotonic() + 120
        while time.monotonic() < end:
            time.sleep(0.05)
    return lr


def ls(*extra):
    with contextlib.redirect_stdout(io.StringIO()) as o:
        assert main(["ls", "train", *extra]) == 0
    return o.getvalue()


def until(what, seconds=60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


if sys.argv[1:2] == ["child"]:
    train(Net(), "adam", float(sys.argv[2]))
    sys.exit(0)

model = Net()
for opt in ("adam", "sgd"):
    for lr in (0.1, 0.01):
        train(model, opt, lr)
try:
    train(model, "sgd", 5.0)
except ValueError:
    pass
child = subprocess.Popen([sys.executable, __file__, "child", "0.5"])
out = {}
# the child's run is written by its log flusher (about a second after it starts): wait for that
until(lambda: any(r["status"] == "computing" for r in json.loads(ls("--json"))["unstored_runs"]))
out["computing"], out["computing_json"] = ls(), json.loads(ls("--json"))
child.send_signal(signal.SIGTERM)
out["rc"] = child.wait(60)
out["interrupted"], out["interrupted_json"] = ls(), json.loads(ls("--json"))
out["limited"] = ls("--limit", "2")
out["one"] = ls("--limit", "1")
# killed without a word (SIGKILL): its run still says running, its process is gone: lost
child = subprocess.Popen([sys.executable, __file__, "child", "0.7"])
until(lambda: any(r["status"] == "computing" for r in json.loads(ls("--json"))["unstored_runs"]))
child.kill()
child.wait(60)
out["lost"] = ls()
# runs written before runs kept their arguments' texts have their hyperparameters only
c = sqlite3.connect(os.path.join(os.environ["MEMOLAB_STORE"], "index.sqlite"))
with c:
    c.execute("UPDATE runs SET argtext = NULL")
c.close()
out["older"] = ls()
print(json.dumps(out))
"""

SHARED = "same in all 6: model=Net(42 params), seed=1, epochs=3, cfg=Cfg(depth=2)"


def _rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.match(r"\s*r?\d+  ", ln)]


def test_ls_lists_computing_failed_and_interrupted_runs_with_the_evaluations_arguments(project, tmp_path):
    project.write("sweep.py", DRIVER)
    out = project.run_json("sweep.py", env={"COLUMNS": "200", "STARTED": str(tmp_path / "started")}, timeout=240)
    assert out["rc"] == -15  # (the child dies of SIGTERM, as without memolab)
    for phase, status in (("computing", "computing"), ("interrupted", "interrupted")):
        text = out[phase]
        # the constant arguments are said once, the runs' rows included; no row repeats them
        assert SHARED in text, text
        rows = _rows(text)
        assert len(rows) == 6, text
        for r in rows:
            assert "model=" not in r and "seed=" not in r and "epochs=" not in r and "cfg=" not in r, r
            assert re.search(r"optimizer='(adam|sgd)', lr=", r), r
        (mine,) = [r for r in rows if "lr=0.5" in r]
        assert re.match(r"\s*r\d+ ", mine) and f" {status}" in mine and "optimizer='adam'" in mine, mine
        (failed,) = [r for r in rows if "lr=5.0" in r]
        # the error's first line, not the rest of its message
        assert "failed: ValueError: diverged at lr=5.0" in failed and "see the log" not in failed, failed
        assert sum(bool(re.search(r"\b(stored|hit)\b", r)) for r in rows) == 4, text
        assert "without a stored evaluation" not in text, text  # (every one is a row)
    computing = out["computing_json"]["unstored_runs"]
    assert [r["status"] for r in computing] == ["computing", "failed"], computing
    now = computing[0]
    assert now["ended"] is None and now["seconds"] > 0 and now["error"] is None
    # the same form as the evaluations' arguments (a string quoted, a number as its text)
    ev_args = out["computing_json"]["evaluations"][0]["arguments"]
    assert now["arguments"] == {**ev_args, "optimizer": "'adam'", "lr": "0.5"}, (now, ev_args)
    assert computing[1]["error"] == "ValueError: diverged at lr=5.0"
    assert {e["state"] for e in out["computing_json"]["evaluations"]} == {"stored"}
    assert out["computing_json"]["unstored_total"] == {"computing": 1, "failed": 1}
    stopped = out["interrupted_json"]["unstored_runs"]
    assert [r["status"] for r in stopped] == ["interrupted", "failed"], stopped
    assert stopped[0]["ended"] >= stopped[0]["started"] and stopped[0]["error"] == "SIGTERM"
    assert stopped[0]["run"] == now["run"]
    # --limit N: the newest N rows; what is left out is counted
    limited = out["limited"]
    assert len(_rows(limited)) == 2 and "interrupted" in limited and "failed:" in limited, limited
    assert "0 of 4 evaluations shown" in limited and "without a stored evaluation" not in limited, limited
    one = out["one"]
    assert len(_rows(one)) == 1 and "interrupted" in one, one
    assert "also 1 failed run(s) without a stored evaluation: memolab runs train" in one, one
    # a run stored before runs kept their texts: its hyperparameters read as the texts they stand for
    # where one of their forms is one (a config kept as a dict is not: it shows in the run's row)
    older = out["older"]
    assert "same in all 7: model=Net(42 params), seed=1, epochs=3\n" in older and len(_rows(older)) == 7, older
    lost = out["lost"]
    (row,) = [r for r in _rows(lost) if "lr=0.7" in r]
    assert " lost " in row and "same in all 7: model=Net(42 params), seed=1, epochs=3, cfg=Cfg(depth=2)" in lost, lost
