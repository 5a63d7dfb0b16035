"""Accepted code changes on a team store (docs/team.md): accepted on one machine, followed on
another; taken back on one, a miss again on the other; accepted while the team store is away,
sent by `memolab sync`. Real team stores (PostgreSQL + moto S3, and SQLite + file://), each
machine a local store used by fresh processes; real computations counted in a file."""
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

JOB = '''
import json, os, sys
import memolab

@memolab.memo
def train(n):
    with open(os.environ["CALLS"], "a") as f:
        f.write(f"{os.environ['MACHINE']} {n}\\n")
    print("training", n)  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return {"n": n, "machine": os.environ["MACHINE"], "pid": os.getpid()}

print(json.dumps(train(int(sys.argv[1]))), flush=True)
'''


class Machine:
    def __init__(self, name: str, root: Path, team, calls: Path) -> None:
        self.name, self.root, self.team, self.calls = name, root, team, calls
        self.store = root / f"store-{name}"

    def env(self, **kw: str) -> dict[str, str]:
        e = dict(os.environ)
        e.pop("MEMOLAB_HMAC_KEY", None)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(self.store), CALLS=str(self.calls), MACHINE=self.name,
                 MEMOLAB_REMOTE_TIMEOUT=HEALTHY, MEMOLAB_REMOTE_DRAIN=HEALTHY, PYTHONDONTWRITEBYTECODE="1",
                 **self.team.env)
        e.update(kw)
        return e

    def run(self, n: int, **kw: str) -> dict:
        cp = subprocess.run([sys.executable, str(self.root / "job.py"), str(n)], cwd=self.root, env=self.env(**kw),
                            capture_output=True, text=True, timeout=HANG)
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout.strip().splitlines()[-1])

    def stopped(self, n: int) -> None:
        """A miss whose computation the user stops: nothing is stored."""
        cp = subprocess.run([sys.executable, str(self.root / "job.py"), str(n)], cwd=self.root,
                            env=self.env(STOP="1"), capture_output=True, text=True, timeout=HANG)
        assert cp.returncode != 0 and "stopped by hand" in cp.stderr, cp.stderr

    def cli(self, *args: str, **kw: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memolab", *args], cwd=self.root, env=self.env(**kw),
                              capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL)


def computed(calls: Path) -> list[str]:
    return calls.read_text().split("\n")[:-1] if calls.exists() else []


def edit(root: Path, line: str) -> None:
    (root / "job.py").write_text(JOB.replace('print("training", n)  # LOG', line))


@pytest.fixture
def machines(tmp_path, team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    return Machine("A", tmp_path, team, calls), Machine("B", tmp_path, team, calls), calls


def test_an_accept_travels_to_another_machine_and_so_does_its_undo(machines, team, tmp_path):
    a, b, calls = machines
    first = a.run(3)  # computed on A, uploaded to the team at exit
    assert computed(calls) == ["A 3"]
    edit(tmp_path, 'print("training", n, "with a log line")  # LOG')
    a.stopped(3)
    assert computed(calls) == ["A 3", "A 3"]

    cp = a.cli("accept", "train", "--yes")
    assert cp.returncode == 0, cp.stderr
    assert "accepted: accept #1" in cp.stdout and "recorded on the team store too" in cp.stdout

    # B never ran anything: it follows the team's accept and downloads A's result
    assert b.run(3) == first
    assert computed(calls) == ["A 3", "A 3"]
    listed = json.loads(b.cli("accept", "train", "--list", "--json").stdout)["accepts"]
    assert [(x["origin"], x["new_code"]) for x in listed] == [("team", json.loads(
        a.cli("accept", "train", "--list", "--json").stdout)["accepts"][0]["new_code"])]

    cp = a.cli("accept", "train", "--undo")
    assert cp.returncode == 0 and "taken back on the team store too" in cp.stdout, cp.stdout + cp.stderr
    got = b.run(3)  # B asks the team: taken back, so a miss, computed on B
    assert got["machine"] == "B" and computed(calls) == ["A 3", "A 3", "B 3"]
    gone = json.loads(b.cli("accept", "train", "--list", "--all", "--json").stdout)["accepts"]
    assert gone[0]["undone"] is not None


def test_an_accept_made_while_the_team_store_is_away_is_sent_by_sync(machines, team, tmp_path):
    a, b, calls = machines
    first = a.run(5)
    edit(tmp_path, 'print("training", n, "offline")  # LOG')
    a.stopped(5)
    team.down()
    try:
        cp = a.cli("accept", "train", "--yes")
        assert cp.returncode == 0, cp.stderr
        assert "unreachable: recorded here only for now" in cp.stdout
        assert a.run(5) == first  # followed on A at once
    finally:
        team.up()
    # moto forgets its objects when restarted: A uploads its results again (--all)
    cp = a.cli("sync", "--all", "--json")
    assert cp.returncode == 0 and json.loads(cp.stdout)["accepts"] == 1, cp.stdout + cp.stderr
    n = len(computed(calls))
    assert b.run(5) == first and len(computed(calls)) == n  # B follows the accept sync sent
    assert json.loads(a.cli("sync", "--json").stdout)["accepts"] == 0  # sent once


def test_a_signed_teams_accept_is_followed_only_under_the_teams_key(tmp_path):
    team = LocalTeam(tmp_path)
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    a, b, c = (Machine(n, tmp_path, team, calls) for n in "ABC")
    key = {"MEMOLAB_HMAC_KEY": "the-teams-key-0123456789"}
    first = a.run(2, **key)
    edit(tmp_path, 'print("training", n, "signed")  # LOG')
    subprocess.run([sys.executable, str(tmp_path / "job.py"), "2"], cwd=tmp_path, env=a.env(STOP="1", **key),
                   capture_output=True, text=True, timeout=HANG)
    cp = a.cli("accept", "train", "--yes", **key)
    assert "recorded on the team store too" in cp.stdout, cp.stdout + cp.stderr
    assert b.run(2, **key) == first  # the team's key: followed
    n = len(computed(calls))
    # another key: the accept (and the results) look forged to C: never followed, computed there
    got = subprocess.run([sys.executable, str(tmp_path / "job.py"), "2"], cwd=tmp_path,
                         env=c.env(MEMOLAB_HMAC_KEY="another-key-0123456789"), capture_output=True, text=True,
                         timeout=HANG)
    assert got.returncode == 0 and json.loads(got.stdout.strip().splitlines()[-1])["machine"] == "C"
    assert len(computed(calls)) == n + 1
