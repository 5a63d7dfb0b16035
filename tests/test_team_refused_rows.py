"""A refused team row is replaced by a correctly signed recomputation (issue 22).

With ``MEMOLAB_HMAC_KEY`` a team row whose signature is missing (published by a machine
without the key) or wrong (forged) is refused by every machine. It used to stay the
key's 'done' row: every fresh machine recomputed it, and ``pull`` refused it, forever.
Now the first machine with the key that recomputes it publishes its signed row in its
place (a compare-and-swap on the values it judged), and a machine whose key is not the
team's (``signing.key_check``) never replaces a row. Machines are fresh processes on
local stores of their own in front of one real team store (PostgreSQL + S3, and the
one-host SQLite + file:// set-up); the index-level rule runs against both indexes.
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from test_team_layer import JOB, Machine, computed

KEY = {"MEMOLAB_HMAC_KEY": "team-secret"}


def set_team_signatures(team, value) -> int:
    """Overwrite the signature of every team row (a forger with write access to the index)."""
    if team.name == "sqlite+file":
        with sqlite3.connect(team.root / "team" / "index.sqlite") as c:
            return c.execute("UPDATE evaluations SET signature=?", (value,)).rowcount
    import psycopg

    with psycopg.connect(team.env["MEMOLAB_REMOTE"]) as c:
        return c.execute("UPDATE memolab_evaluations SET signature=%s", (value,)).rowcount


def team_rows(team):
    if team.name == "sqlite+file":
        with sqlite3.connect(team.root / "team" / "index.sqlite") as c:
            return c.execute("SELECT id, args, status, signature FROM evaluations ORDER BY args").fetchall()
    import psycopg

    with psycopg.connect(team.env["MEMOLAB_REMOTE"]) as c:
        return c.execute("SELECT id, args, status, signature FROM memolab_evaluations ORDER BY args").fetchall()


@pytest.fixture
def job(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    return tmp_path, tmp_path / "calls"


def test_a_row_published_without_the_key_is_replaced_by_a_signed_recomputation(job, team):
    root, calls = job
    u = Machine("U", root, team, calls)  # no key: publishes unsigned rows
    b, c, d = (Machine(n, root, team, calls, KEY) for n in "BCD")
    u.run(61, 62)  # a blob result and an inline one
    up = b.cli("remote", "upgrade")  # the team's key is established (here after U published)
    assert up.returncode == 0 and "recorded now" in up.stdout, up.stdout + up.stderr
    b.run(61, 62)
    assert computed(calls) == ["U 61", "U 62", "B 61", "B 62"], "refused, so recomputed (once)"
    assert all(sig for _, _, _, sig in team_rows(team)), "the signed recomputations replaced the unsigned rows"
    c.run(61, 62)  # a fresh machine: team hits
    assert computed(calls) == ["U 61", "U 62", "B 61", "B 62"]
    pulled = d.cli("pull", "f", "--json")
    assert pulled.returncode == 0, pulled.stderr
    got = json.loads(pulled.stdout)
    assert got["imported"] == 2 and got["refused"] == 0, got


def test_a_forged_row_is_replaced_and_a_valid_one_never_is(job, team):
    root, calls = job
    a, b, c = (Machine(n, root, team, calls, KEY) for n in "ABC")
    m = Machine("M", root, team, calls, {"MEMOLAB_HMAC_KEY": "another-key"})
    assert a.cli("remote", "upgrade").returncode == 0  # the team's key: A's
    a.run(71)
    valid = team_rows(team)
    m.run(71)  # another key: the team's row looks forged to it; it recomputes, and must not replace it
    assert computed(calls) == ["A 71", "M 71"]
    assert team_rows(team) == valid, "a machine with another key replaced a validly signed row"
    b.run(71)
    assert computed(calls) == ["A 71", "M 71"], "the valid row was lost"

    assert set_team_signatures(team, "hmac-sha256:v2:" + "0" * 64) == 1  # forged
    Machine("B2", root, team, calls, KEY).run(71)
    assert computed(calls) == ["A 71", "M 71", "B2 71"], "a forged row is refused"
    assert team_rows(team)[0][3] != "hmac-sha256:v2:" + "0" * 64, "the forged row was not replaced"
    c.run(71)
    assert computed(calls) == ["A 71", "M 71", "B2 71"], "the replacement is a hit for a fresh machine"


# -- the rule in each index ----------------------------------------------------------------------

@pytest.fixture
def index(request, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "team-secret")
    if request.param == "sqlite":
        from memolab.store.sqlite import Index

        ix = Index(tmp_path / "index.sqlite")
    else:
        from memolab.team.pg import PgIndex

        ix = PgIndex(request.getfixturevalue("postgres_dsn"))
    yield ix
    if hasattr(ix, "close"):
        ix.close()


def _row(payload: str):
    from memolab.store import signing

    key = ("m:f", "c1", "a1", "s1")
    f = {"payload": payload, "payload_size": 3, "buffers": "[]", "code_refs": "{}", "snapshot": "{}",
         "inline": b"abc", "size": 3, "finished": 1.0}
    f["signature"] = signing.sign(key, f)
    return key, f


@pytest.mark.parametrize("index", ["sqlite", "postgres"], indirect=True)
def test_publish_replaces_a_refused_row_only(index, monkeypatch):
    from memolab.store import signing

    assert index.set_team_key(signing.key_check()) == (None, signing.key_check())  # (memolab remote upgrade)
    key, good = _row("p1")
    _, other = _row("p2")
    first, new = index.publish(key, good, {})
    assert new
    assert index.publish(key, other, {}) == (first, False), "a valid row was replaced"
    forged = dict(good, signature="hmac-sha256:v2:" + "1" * 64)
    monkeypatch.delenv("MEMOLAB_HMAC_KEY")
    index.clear()
    fid, new = index.publish(key, forged, {})  # published without the key: nothing judged
    assert new
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "team-secret")
    unsigned = dict(good, signature=None)
    assert index.publish(key, unsigned, {}) == (fid, False), "an unsigned row replaced a refused one"
    rid, new = index.publish(key, other, {})
    assert new and rid != fid
    assert index.lookup(key)["payload"] == "p2"
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "another-key")  # its own rows verify, the team's do not
    _, mine = _row("p3")
    assert index.publish(key, mine, {}) == (rid, False), "a machine with another key replaced a valid row"
    assert index.lookup(key)["payload"] == "p2"
