"""Keep marks and snapshots on the team index (issue 55 §1/§2, team schema 3): a result kept on one
machine (``@memo(keep=True)``, ``memolab keep``) and a snapshot taken on one are never collected by
a team gc run on ANOTHER machine, which has neither in its own store. Real team store: PostgreSQL
+ moto S3; machines are fresh processes on their own local stores.

Also: an older team index (schema 2, made by the previous memolab) is used as it is, without shared
marks, and gains them with ``memolab remote upgrade``; a mark made after a gc's plan still wins."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from conftest import SRC
from servers.team import LocalTeam  # noqa: F401  (the `pg_team` fixture comes from there)
from test_snapshots import make_folder, tree
from test_team_layer import HANG, HEALTHY  # a healthy (or stopped) team store is waited on, not timed

KEY = ("m:f", "c1", "a1", "s1")
ROW = {"payload": "ab" * 32, "payload_size": 10, "buffers": "[]", "size": 10, "started": 1.0, "finished": 2.0,
       "duration": 1.0, "host": "h", "python": "3", "versions": "{}", "snapshot": "{}", "inline": None}


def test_an_older_team_index_gains_shared_marks_by_upgrade_and_a_late_mark_wins(postgres_dsn, monkeypatch):
    import memolab.team.pg as pg
    import memolab.team.pgschema as pgschema
    from memolab.team.pgmarks import MarksUnsupported

    with monkeypatch.context() as m:  # what the previous memolab created
        m.setattr(pgschema, "TEAM_SCHEMA_VERSION", 2)
        m.setattr(pgschema, "STEPS", pgschema.STEPS[:2])
        with pg.PgIndex(postgres_dsn) as old:
            old.publish(KEY, ROW, {})
    with pg.PgIndex(postgres_dsn) as ix:  # this memolab works with it as it is ...
        assert ix.version == 2 and not ix.marks_supported and ix.kept_keys() == set() and ix.snapshot_blobs() == set()
        with pytest.raises(MarksUnsupported, match="schema 2, .* run `memolab remote upgrade`"):
            ix.keep([KEY])
        with pytest.raises(MarksUnsupported):
            ix.record_snapshot("cd" * 32, 5, "file", ["ab" * 32], 1, 10)
        ix.delete_evaluations([])  # (no marks table: no guard)
    assert pg.upgrade(postgres_dsn) == {"from": 2, "to": 3, "changed": True}  # ... and gains them
    with pg.PgIndex(postgres_dsn) as ix:
        assert ix.version == 3 and ix.marks_supported and ix.lookup(KEY)["payload"] == "ab" * 32
        plan = ix.gc_plan(cutoff=1e12, max_size=None)  # planned before the mark ...
        assert [r["fn"] for r in plan] == ["m:f"]
        assert ix.keep([KEY], by="tester") == 1 and ix.keep([KEY]) == 0
        ix.delete_evaluations([r["id"] for r in plan])  # ... deleted after it: the mark wins
        assert ix.lookup(KEY) is not None and ix.kept_keys() == {KEY}
        assert ix.gc_plan(cutoff=1e12, max_size=None) == []
        ix.record_snapshot("cd" * 32, 5, "file", ["ab" * 32], 1, 10, name=None)
        ix.record_snapshot("cd" * 32, 5, "file", ["ab" * 32], 1, 10, name="data")  # again: named now
        assert ix.snapshot_blobs() == {"ab" * 32, "cd" * 32}
        assert [(s["name"], s["files"]) for s in ix.snapshots()] == [("data", 1)]
        with psycopg.connect(postgres_dsn, autocommit=True) as c:  # unused for 31 days: still named
            c.execute("UPDATE memolab_snapshots SET used = used - 31 * 86400")
        now = ix.clock()
        assert ix.stale_snapshots(now - 30 * 86400) == [] and ix.snapshot_blobs(now - 30 * 86400) == {"ab" * 32, "cd" * 32}
        assert ix.unkeep([KEY]) == 1 and ix.forget_snapshot("cd" * 32) and ix.snapshot_blobs() == set()
        ix.delete_evaluations([r["id"] for r in plan])
        assert ix.lookup(KEY) is None
        # a snapshot recorded while team gc deletes blobs waits for it to finish (then uploads)
        with pg.PgIndex(postgres_dsn) as other, psycopg.connect(postgres_dsn, autocommit=True) as c:
            with ix.gc_lock():
                t = threading.Thread(target=other.record_snapshot, args=("ef" * 32, 5, "file", ["ab" * 32], 1, 10))
                t.start()
                deadline = time.monotonic() + 30
                while not c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                                    ).fetchone()[0]:
                    assert time.monotonic() < deadline, "the record never waited for the gc lock"
                    time.sleep(0.01)
                assert ix.snapshot_blobs() == set()  # not recorded while gc holds the lock
            t.join(30)
            assert not t.is_alive() and ix.snapshot_blobs() == {"ab" * 32, "ef" * 32}


JOB = '''
import os, sys
import memolab


@memolab.memo(keep=True)
def kept(n):
    return bytes([n]) * 60000


@memolab.memo
def plain(n):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} plain {n}\\n")
    return bytes([n]) * 60000


@memolab.memo(keep=True)
def files_in(folder: memolab.Dir) -> int:  # keyed by the folder's content, wherever it is
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} files_in\\n")
    return sum(len(names) for _, _, names in os.walk(folder))


print(sum(len(kept(int(a))) + len(plain(int(a))) for a in sys.argv[1:]))
print(files_in(memolab.Dir("data", snapshot=os.environ["SNAP"])))
'''


def test_team_gc_on_another_machine_keeps_what_one_machine_kept_and_snapshotted(tmp_path, pg_team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    want = make_folder(tmp_path / "data", 60)

    def env(machine):
        e = dict(os.environ)
        e.pop("MEMOLAB_HMAC_KEY", None)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(tmp_path / f"store-{machine}"), CALLS=str(calls), MACHINE=machine,
                 MEMOLAB_REMOTE_TIMEOUT=HEALTHY, MEMOLAB_REMOTE_DRAIN=HEALTHY, PYTHONDONTWRITEBYTECODE="1",
                 MEMOLAB_TEAM_UNSIGNED="1",
                 MEMOLAB_INLINE_MAX="0", **pg_team.env)
        return e

    def run(machine, *args, cwd=tmp_path, snap=""):
        cp = subprocess.run([sys.executable, *args], cwd=cwd, env={**env(machine), "SNAP": snap}, capture_output=True,
                            text=True, timeout=HANG)
        assert cp.returncode == 0, cp.stderr
        return cp.stdout

    def gc_on_b(*args):
        return json.loads(run("B", "-m", "memolab", "gc", "--remote", "--grace", "0s", "--yes", "--json", *args))

    def team():
        with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as c:
            rows = {(fn.rsplit(":", 1)[-1], payload) for fn, payload in
                    c.execute("SELECT fn, payload FROM memolab_evaluations WHERE status = 'done'")}
            blobs = {r[0] for r in c.execute("SELECT digest FROM memolab_snapshot_blobs")}
        return rows, blobs

    digest = run("A", "-m", "memolab", "snapshot", str(tmp_path / "data")).strip()
    assert run("A", "job.py", "1", "2", "3", snap=digest).split()[1] == "64"  # kept(1..3) marked as stored
    with sqlite3.connect(tmp_path / "store-A" / "index.sqlite") as c:
        plain_ids = [i for (i,) in c.execute("SELECT id FROM evaluations WHERE fn LIKE '%plain' ORDER BY id")]
    out = run("A", "-m", "memolab", "keep", f"#{plain_ids[0]}")  # plain(1) by hand
    assert "kept on the team index too" in out, out
    run("A", "-m", "memolab", "sync")
    rows, held = team()
    assert sorted(fn for fn, _ in rows) == ["files_in"] + ["kept"] * 3 + ["plain"] * 3 and len(held) > 50
    # B has never seen any of it: its store holds no mark and no snapshot
    (tmp_path / "store-B").mkdir()
    r = gc_on_b("--older-than", "0s", "--max-size", "1KB")
    assert (r["evaluations"], r["kept_evaluations"]) == (2, 5), r
    rows, _ = team()
    assert sorted(fn for fn, _ in rows) == ["files_in"] + ["kept"] * 3 + ["plain"], rows
    from memolab.team.link import open_remote_blobs

    listed = {d for d, _, _ in open_remote_blobs(pg_team.env["MEMOLAB_REMOTE_BLOBS"], 30).list()}
    assert {p for _, p in rows} | held <= listed  # every kept row's and snapshot's blob is still there
    # B, in a folder where the data never was: memolab.Dir(snapshot=) restores it from the team store,
    # bitwise, and every kept result hits (files_in is keyed by the folder's content), none computed
    (tmp_path / "b-home").mkdir()
    assert run("B", str(tmp_path / "job.py"), "1", "2", "3", cwd=tmp_path / "b-home", snap=digest).split()[1] == "64"
    assert tree(tmp_path / "b-home" / "data") == want
    assert sorted(x for x in calls.read_text().splitlines() if x.startswith("B")) == ["B plain 2", "B plain 3"]
    run("B", "-m", "memolab", "restore", digest, str(tmp_path / "b1"))  # (from B's own store now)
    assert tree(tmp_path / "b1") == want
    # A takes its mark and its snapshot back: the next team gc on B may collect them
    out = run("A", "-m", "memolab", "unkeep", f"#{plain_ids[0]}")
    assert "no longer kept on the team index" in out, out
    out = run("A", "-m", "memolab", "snapshot", "--forget", digest)
    assert "let go on the team index too" in out, out
    run("B", "-m", "memolab", "snapshot", "--forget", digest)  # (B recorded it by restoring it)
    r = gc_on_b("--older-than", "0s")
    rows, held = team()
    assert sorted(fn for fn, _ in rows) == ["files_in"] + ["kept"] * 3 and held == set(), rows
    assert r["blobs"] >= 50, r
