"""A machine never unpickles a team row it cannot verify (issue 49, item 1).

After ``memolab remote upgrade`` recorded the team's key check, a machine without
``MEMOLAB_HMAC_KEY`` refused to publish but still loaded team rows: a writer of the team
database rewrote one row's inline result into a pickle that creates a file (its payload
digest and size matching, its signature NULL), and the keyless machine ran it. Now a
keyless machine loads nothing from a team that signs, and an unsigned team store is
loaded only with ``MEMOLAB_TEAM_UNSIGNED=1`` (the test session opts in for the other
team tests: these take it away). Machines are fresh processes with local stores of their
own in front of PostgreSQL + moto S3.
"""
from __future__ import annotations

import json
import pickle

from test_team_layer import JOB, Machine, computed

KEY = {"MEMOLAB_HMAC_KEY": "team-secret"}
NO_OPT_IN = {"MEMOLAB_TEAM_UNSIGNED": ""}  # (empty: unset, as the shell's ``VAR= cmd``)
OPT_IN = {"MEMOLAB_TEAM_UNSIGNED": "1"}
SIGNS = "the team signs its results; set MEMOLAB_HMAC_KEY to use them"


class _Forged:
    """What the forger stores: unpickling it creates the file ``path`` (any code would do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def forge_inline_rows(dsn: str, marker) -> int:
    """Rewrite every inline team row into the forged pickle, its digest and size matching,
    unsigned: what someone with write access to the team database can do."""
    import psycopg

    from memolab.store.blobs import digest_bytes

    evil = pickle.dumps(_Forged(str(marker)))
    with psycopg.connect(dsn) as c:
        return c.execute("UPDATE memolab_evaluations SET inline=%s, payload=%s, payload_size=%s, buffers='[]', "
                         "signature=NULL WHERE inline IS NOT NULL", (evil, digest_bytes(evil), len(evil))).rowcount


def test_a_keyless_machine_never_loads_a_forged_row_of_a_team_that_signs(tmp_path, pg_team):
    (tmp_path / "job.py").write_text(JOB)
    calls, marker = tmp_path / "calls", tmp_path / "pwned"
    a = Machine("A", tmp_path, pg_team, calls, KEY)
    assert a.cli("remote", "upgrade").returncode == 0  # the team signs from now on
    a.run(2)  # a small result: inline in its team row
    assert forge_inline_rows(pg_team.env["MEMOLAB_REMOTE"], marker) == 1
    # without the key, even opted into unsigned team stores: the team's choice to sign wins
    o = Machine("O", tmp_path, pg_team, calls, OPT_IN)
    cp = o.run(2, check=False)
    assert not marker.exists(), "the forged row was unpickled"
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.count(SIGNS) == 1, cp.stderr
    pulled = Machine("P", tmp_path, pg_team, calls, NO_OPT_IN).cli("pull", "--json")
    assert not marker.exists(), "`pull` imported the forged row and a load ran it"
    assert pulled.returncode == 0 and json.loads(pulled.stdout)["imported"] == 0, pulled.stdout + pulled.stderr
    assert SIGNS in pulled.stderr, pulled.stderr
    assert computed(calls) == ["A 2", "O 2"]
    b = Machine("B", tmp_path, pg_team, calls, KEY)  # the team's key refuses the forgery as before
    b.run(2)
    assert computed(calls) == ["A 2", "O 2", "B 2"] and not marker.exists()


def test_an_unsigned_team_store_is_loaded_only_when_opted_into(tmp_path, pg_team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    u = Machine("U", tmp_path, pg_team, calls, NO_OPT_IN)
    u.run(3, 4)  # no key, no opt-in: computed, published unsigned (teammates who opted in may use them)
    v = Machine("V", tmp_path, pg_team, calls, NO_OPT_IN)
    cp = v.run(3, 4)
    assert computed(calls) == ["U 3", "U 4", "V 3", "V 4"], "an unsigned team store's rows were loaded"
    assert cp.stderr.count("MEMOLAB_TEAM_UNSIGNED=1 to trust an unsigned team store") == 1, cp.stderr
    st = json.loads(v.cli("remote", "status", "--json").stdout)
    assert st["loads"] is False and "MEMOLAB_TEAM_UNSIGNED=1" in st["not_loaded"], st
    w = Machine("W", tmp_path, pg_team, calls, OPT_IN)
    cp = w.run(3, 4)  # opted in: team hits, and the warning that says what was opted into
    assert computed(calls) == ["U 3", "U 4", "V 3", "V 4"], "opted in, yet recomputed"
    assert "MEMOLAB_TEAM_UNSIGNED=1: results are not signed" in cp.stderr, cp.stderr


ACCEPT_JOB = '''
import json, os, sys
import memolab

@memolab.memo
def train(n):
    with open(os.environ["CALLS"], "a") as f:
        f.write(f"{os.environ['MACHINE']} {n}\\n")
    print("training", n)  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return {"n": n}

print(json.dumps([train(int(a))["n"] for a in sys.argv[1:]]), flush=True)
'''


def test_a_keyless_machine_follows_no_team_accept_it_cannot_verify(tmp_path, pg_team):
    """An accept decides which results a call gets: where the team signs, a keyless machine
    follows none of the team's accepts (one stripped of its signature here), as it loads none
    of its rows: it recomputes instead of serving its own old-code result for new code."""
    import psycopg

    (tmp_path / "job.py").write_text(ACCEPT_JOB)
    calls = tmp_path / "calls"
    a = Machine("A", tmp_path, pg_team, calls, KEY)
    n = Machine("N", tmp_path, pg_team, calls, NO_OPT_IN)
    assert a.cli("remote", "upgrade").returncode == 0
    n.run(1)  # its own result, under the old code (the team's key refuses it: not published)
    a.run(1)
    (tmp_path / "job.py").write_text(ACCEPT_JOB.replace('print("training", n)  # LOG', 'print("training!", n)'))
    cp = a.run(1, check=False, STOP="1")  # a miss caused by code alone, its recomputation stopped
    assert cp.returncode != 0 and "stopped by hand" in cp.stderr, cp.stderr
    acc = a.cli("accept", "train", "--yes", "--json")
    assert acc.returncode == 0 and json.loads(acc.stdout)["accepted"]["team"] == "published", acc.stdout + acc.stderr
    with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as c:
        assert c.execute("UPDATE memolab_accepts SET signature = NULL").rowcount == 1  # the forger's copy
    n.run(1)
    assert computed(calls) == ["N 1", "A 1", "A 1", "N 1"], "a keyless machine followed an unverifiable accept"
