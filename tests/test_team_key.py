"""The team's key and the team's clock (issue 36, item 4).

A teammate with a mistyped ``MEMOLAB_HMAC_KEY`` who published first fixed the team's key check:
machines with the right key then recomputed those keys for ever and ``pull`` refused them. The
team's key is now established by ``memolab remote upgrade`` (a check value of the key, never the
key), compared by every client, which refuses to publish when it differs; a correctly signed row
then replaces one signed with another key. And team rows' times were the clients' clocks:
``gc --remote --older-than 30d`` dropped a row a machine 60 days behind had just published.
Machines are fresh processes with local stores of their own in front of one real team store.
"""
from __future__ import annotations

import json
import os
import time

from conftest import SRC
from test_team_layer import JOB, Machine, computed
from test_team_refused_rows import team_rows

KEY = {"MEMOLAB_HMAC_KEY": "team-secret"}
TYPO = {"MEMOLAB_HMAC_KEY": "team-secert"}


def test_a_mistyped_key_published_first_no_longer_decides_the_teams_key(tmp_path, team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    m = Machine("M", tmp_path, team, calls, TYPO)
    admin, b, c, d = (Machine(n, tmp_path, team, calls, KEY) for n in ("admin", "B", "C", "D"))
    m.run(81, 82)  # the mistyped key publishes first: its rows are the team's for these keys
    up = admin.cli("remote", "upgrade")
    assert up.returncode == 0 and "recorded now" in up.stdout, up.stdout + up.stderr
    assert "team-secret" not in up.stdout and "team-secret" not in json.dumps(team_rows(team))  # never the key itself
    b.run(81, 82)  # refused (another key's signatures): recomputed once, and replaces them
    assert computed(calls) == ["M 81", "M 82", "B 81", "B 82"]
    c.run(81, 82)  # a fresh machine with the team's key: team hits
    assert computed(calls) == ["M 81", "M 82", "B 81", "B 82"], "the team's rows are still another key's"
    pulled = json.loads(d.cli("pull", "--json").stdout)
    assert pulled["imported"] == 2 and pulled["refused"] == 0, pulled
    # the mistyped key, now: computes for itself, publishes nothing, says why once
    before = team_rows(team)
    cp = m.run(83)
    assert "not the team's key" in cp.stderr and cp.stderr.count("not the team's key") == 1, cp.stderr
    assert m.cli("sync").returncode != 0
    status = m.cli("remote", "status")
    assert "NOT this machine's MEMOLAB_HMAC_KEY" in status.stdout, status.stdout
    nokey = Machine("N", tmp_path, team, calls)  # no key at all, where the team signs: publishes nothing either
    nokey.run(84)
    assert team_rows(team) == before, "a machine whose key is not the team's published"
    assert m.cli("remote", "upgrade").returncode == 1  # and cannot make its key the team's by accident
    assert "this machine's MEMOLAB_HMAC_KEY" in admin.cli("remote", "status").stdout
    c.run(81, 82)
    assert computed(calls) == ["M 81", "M 82", "B 81", "B 82", "M 83", "N 84"]


SKEWED_CLOCK = """
import os, time
_real = time.time
time.time = lambda: _real() + float(os.environ["SKEW"])
"""


def test_team_times_are_the_database_servers_not_the_machines(tmp_path, pg_team):
    """A machine 60 days behind publishes; `gc --remote --older-than 30d` by another keeps its row,
    and a machine 60 days ahead still pulls it with `--since 1d`."""
    (tmp_path / "job.py").write_text(JOB)
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(SKEWED_CLOCK)  # the machine's whole clock, from interpreter start
    calls = tmp_path / "calls"
    day = 86400
    behind = Machine("S", tmp_path, pg_team, calls, {"PYTHONPATH": f"{skew}{os.pathsep}{SRC}", "SKEW": str(-60 * day)})
    ahead = Machine("F", tmp_path, pg_team, calls, {"PYTHONPATH": f"{skew}{os.pathsep}{SRC}", "SKEW": str(60 * day)})
    a = Machine("A", tmp_path, pg_team, calls)
    behind.run(91)
    behind.run(91)  # a local hit: a process that only hit locally sends nothing (docs/team.md)
    import psycopg

    def team_row():
        with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as c:
            return c.execute("SELECT finished, last_hit, hits FROM memolab_evaluations").fetchone()

    finished, last_hit, hits = team_row()
    now = time.time()
    assert abs(finished - now) < 3600, "the row's finish time is the publishing machine's clock"
    assert (hits, last_hit) == (0, None), "a process that only hit locally connected to send its count"
    cp = behind.cli("sync", "--json")  # the next use of the team store forwards the hit: its last use
    assert cp.returncode == 0, cp.stderr
    finished, last_hit, hits = team_row()
    assert hits == 1 and abs(last_hit - now) < 3600, ("the hit's time is the database server's", hits, last_hit, now)
    gc = a.cli("gc", "--remote", "--older-than", "30d", "--yes", "--json")
    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout)["evaluations"] == 0, gc.stdout
    pulled = ahead.cli("pull", "--since", "1d", "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["imported"] == 1, pulled.stdout
    ahead.run(91)
    assert computed(calls) == ["S 91"]
