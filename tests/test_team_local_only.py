"""``@memo(team=False)`` (issue 55 §3): a function's results stay on this machine. Its calls neither
ask the team store nor publish to it; ``memolab sync`` (also ``--all``) and ``pull`` leave it alone
in processes that never import it (the mark is in the local index). Real team store: PostgreSQL +
moto S3, machines as fresh processes on their own local stores."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg

from conftest import SRC
from servers.team import LocalTeam  # noqa: F401  (the `pg_team` fixture comes from there)
from test_team_layer import HANG, HEALTHY  # a healthy (or stopped) team store is waited on, not timed

JOB = '''
import json, os, sys
import memolab


def note(what):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} {what}\\n")


@memolab.memo(team=os.environ.get("SHARE_SECRET") == "1")
def secret(n):
    note(f"secret {n}")
    return bytes([n]) * (70000 if n % 2 else 10)  # odd: blob files; even: an inline row


@memolab.memo
def shared(n):
    note(f"shared {n}")
    return bytes([n]) * 70000


out = [len(secret(int(a))) + len(shared(int(a))) for a in sys.argv[1:]]
print(json.dumps(out))
'''


def test_a_team_false_functions_rows_never_reach_the_team_index(tmp_path, pg_team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"

    def env(machine, **kw):
        e = dict(os.environ)
        e.pop("MEMOLAB_HMAC_KEY", None)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(tmp_path / f"store-{machine}"), CALLS=str(calls), MACHINE=machine,
                 MEMOLAB_REMOTE_TIMEOUT=HEALTHY, MEMOLAB_REMOTE_DRAIN=HEALTHY, PYTHONDONTWRITEBYTECODE="1",
                 MEMOLAB_TEAM_UNSIGNED="1", **pg_team.env)
        e.update(kw)
        return e

    def run(machine, *args, **kw):
        cp = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env(machine, **kw), capture_output=True,
                            text=True, timeout=HANG)
        assert cp.returncode == 0, cp.stderr
        return cp

    def team_rows():
        with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as c:
            return sorted(r[0].rsplit(":", 1)[-1] for r in c.execute("SELECT fn FROM memolab_evaluations"))

    def computed():
        return calls.read_text().splitlines() if calls.exists() else []

    run("A", "job.py", "1", "2")  # uploaded at exit: shared only
    assert team_rows() == ["shared", "shared"]
    run("A", "-m", "memolab", "sync", "--all")  # a process that never imports the function
    assert team_rows() == ["shared", "shared"]
    # B: shared comes from the team, secret is computed on B
    run("B", "job.py", "1", "2")
    assert sorted(x for x in computed() if x.startswith("B")) == ["B secret 1", "B secret 2"]
    assert team_rows() == ["shared", "shared"]

    # C shares what the function computes (team=True there): its rows reach the team ...
    run("C", "job.py", "3", SHARE_SECRET="1")
    assert team_rows() == ["secret", "shared", "shared", "shared"]
    # ... and B, where it is team=False, neither reads them (it computes secret 3 itself) ...
    run("B", "job.py", "3")
    assert "B secret 3" in computed() and "B shared 3" not in computed()
    with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as c:  # the very key C published: B did not ask
        on_team = c.execute("SELECT fn, code, args, schema FROM memolab_evaluations WHERE fn LIKE '%secret'").fetchone()
    import sqlite3

    with sqlite3.connect(tmp_path / "store-B" / "index.sqlite") as c:
        assert c.execute("SELECT COUNT(*) FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?",
                         on_team).fetchone()[0] == 1
    # ... nor pulls them, in a process that never imports it
    pulled = json.loads(run("D", "-m", "memolab", "pull", "--json").stdout)  # D: a new machine pulls both
    assert pulled["imported"] == 4
    pulled = json.loads(run("B", "-m", "memolab", "pull", "--json").stdout)
    assert pulled["imported"] == 0, pulled
    ls = json.loads(run("B", "-m", "memolab", "ls", "--json").stdout)
    assert {f["fn"].rsplit(":", 1)[-1]: f["evaluations"] for f in ls["functions"]} == {"secret": 3, "shared": 3}
