"""Lineage across machines (issue 39): edges travel with their rows to the team store and back.

Machine A runs a three-step pipeline in front of a team store (PostgreSQL + moto's S3 server,
and the one-host SQLite + file:// set-up); machine B (a second local store on the same team
store) runs the same pipeline and computes nothing: its rows come from the team store with
their inputs, which name keys and so resolve to B's own evaluation ids; machine C pulls them
(`memolab pull`) and sees the same graph. An edit upstream on A reaches B the same way.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC
from servers.team import LocalTeam  # noqa: F401  (the `team` fixture comes from there)
from test_team_layer import HANG, HEALTHY  # a healthy (or stopped) team store is waited on, not timed

PIPE = '''
import json, os, sys
import numpy as np
import memolab


def note(what):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} {what}\\n")


@memolab.memo
def prepare(n):
    note("prepare")
    x = np.arange(n, dtype=np.float64)
    return {"X": x, "y": x % 2}


@memolab.memo
def train(ds, lr=0.1):
    note("train")
    return {"w": np.full(4, float((ds["X"] * ds["y"]).sum()) * lr)}


@memolab.memo
def evaluate(model, ds):
    note("evaluate")
    return {"score": float(model["w"].sum() / (1 + ds["y"].sum()))}


ds = prepare(int(sys.argv[1]))
print(json.dumps(evaluate(train(ds), ds)))
'''


class Machine:
    def __init__(self, name: str, root: Path, team) -> None:
        self.name, self.root, self.team = name, root, team
        self.store = root / f"store-{name}"

    def env(self) -> dict:
        e = dict(os.environ)
        e.pop("MEMOLAB_HMAC_KEY", None)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(self.store), CALLS=str(self.root / "calls"), MACHINE=self.name,
                 MEMOLAB_REMOTE_TIMEOUT=HEALTHY, MEMOLAB_REMOTE_DRAIN=HEALTHY, PYTHONDONTWRITEBYTECODE="1",
                 **self.team.env)
        return e

    def run(self, n: int) -> dict:
        cp = subprocess.run([sys.executable, str(self.root / "pipe.py"), str(n)], cwd=self.root, env=self.env(),
                            capture_output=True, text=True, timeout=HANG)
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout.strip().splitlines()[-1])

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=self.root, env=self.env(),
                            capture_output=True, text=True, timeout=HANG)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        return cp

    def ids(self, fn: str) -> list:
        return sorted(e["id"] for e in json.loads(self.cli("ls", fn, "--json").stdout)["evaluations"])

    def edges(self, eid: int):
        d = json.loads(self.cli("show", str(eid), "--json").stdout)
        return ([(i["path"], i["function"].split(":")[-1], i["evaluation"]) for i in d["inputs"]],
                [(u["function"].split(":")[-1], u["evaluation"]) for u in d["used_by"]])


def computed(root: Path) -> list:
    p = root / "calls"
    return p.read_text().split("\n")[:-1] if p.exists() else []


@pytest.mark.filterwarnings("ignore:memolab. a team store is configured without MEMOLAB_HMAC_KEY")
def test_edges_travel_to_a_second_machine_and_back(tmp_path, team):
    (tmp_path / "pipe.py").write_text(PIPE)
    a, b, c = (Machine(n, tmp_path, team) for n in "ABC")

    first = a.run(100)
    assert computed(tmp_path) == ["A prepare", "A train", "A evaluate"]
    assert a.edges(3)[0] == [("ds", "prepare", 1), ("model", "train", 2)]
    assert json.loads(a.cli("sync", "--json").stdout)["queued"] == 0

    if team.name == "postgresql+s3":  # the team row itself carries them, by key
        import psycopg

        with psycopg.connect(team.env["MEMOLAB_REMOTE"]) as conn:
            snaps = dict(conn.execute("SELECT fn, snapshot FROM memolab_evaluations").fetchall())
        assert [(i["path"], i["fn"]) for i in json.loads(snaps["__main__:evaluate"])["inputs"]] == [
            ("ds", "__main__:prepare"), ("model", "__main__:train")]

    # B: the same pipeline computes nothing; the rows it adopted keep their edges, in B's ids
    assert b.run(100) == first
    assert len(computed(tmp_path)) == 3
    ids = {fn: b.ids(fn) for fn in ("prepare", "train", "evaluate")}
    assert all(len(v) == 1 for v in ids.values()), ids
    (p1,), (t1,), (e1,) = ids["prepare"], ids["train"], ids["evaluate"]
    assert b.edges(e1)[0] == [("ds", "prepare", p1), ("model", "train", t1)]
    assert b.edges(t1) == ([("ds", "prepare", p1)], [("evaluate", e1)])
    assert sorted(b.edges(p1)[1]) == sorted([("train", t1), ("evaluate", e1)])

    # C pulls everything: the same graph, in C's ids
    pulled = json.loads(c.cli("pull", "--json").stdout)
    assert pulled["imported"] == 3, pulled
    cid = {fn: c.ids(fn)[0] for fn in ("prepare", "train", "evaluate")}
    assert c.edges(cid["evaluate"])[0] == [("ds", "prepare", cid["prepare"]), ("model", "train", cid["train"])]

    # an edit upstream on A: the new chain reaches B with its edges, and B's why names it
    (tmp_path / "pipe.py").write_text(PIPE.replace("x = np.arange(n, dtype=np.float64)",
                                                   "x = np.arange(n, dtype=np.float64) + 1"))
    a.run(100)
    assert computed(tmp_path)[3:] == ["A prepare", "A train", "A evaluate"]
    a.cli("sync")
    b.run(100)
    assert len(computed(tmp_path)) == 6  # B computed nothing again
    new = {fn: max(b.ids(fn)) for fn in ("prepare", "train", "evaluate")}
    assert b.edges(new["evaluate"])[0] == [("ds", "prepare", new["prepare"]), ("model", "train", new["train"])]
    assert b.edges(p1)[1] != b.edges(new["prepare"])[1]  # each version keeps its own users
