"""Old clients and upgrades (issue 36, item 3).

`memolab ls`, `show`, `why`, `runs`, even `gc --dry-run` upgraded a schema-1 store, after which
the older memolab still used on the project failed every call. A command that reads never
changes the schema; a write migrates and says so once. And after an upgrade that changes keys,
`why` blamed the user's unchanged code: it names memolab's key schema instead.
Every step runs in a fresh process, as a user's commands do.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request

from conftest import SRC
from memolab.store.schema import SCHEMA_VERSION

JOB = """
import sys
import memolab

@memolab.memo
def plain(x):
    memolab.log.scalar("loss", 1.0 / x, step=0)
    return bytes(range(256)) * x

for x in map(int, sys.argv[1:]):
    print(len(plain(x)))
"""


def _env(project):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e.update(MEMOLAB_STORE=str(project.store), MEMOLAB_INLINE_MAX="0")
    return e


def _run(project, *args, ok=True):
    cp = subprocess.run([sys.executable, *args], cwd=project.root, env=_env(project), capture_output=True, text=True,
                        timeout=180)
    if ok:
        assert cp.returncode == 0, (args, cp.stdout, cp.stderr)
    return cp


def _memolab(project, *args, ok=True):
    return _run(project, "-m", "memolab", *args, ok=ok)


def downgrade_to_schema_1(path):
    """What memolab wrote before schema 2: no inline column, none of its indexes, the version in
    ``meta`` only; and the runs table of before its ``script`` column (and its index), without the
    counts its triggers keep (tracking/counts.py: they name ``runs.script``)."""
    con = sqlite3.connect(path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND name LIKE 'counts_%'").fetchall():
        con.execute(f"DROP TRIGGER {name}")
    con.executescript("""
        DROP TABLE IF EXISTS run_counts; DROP TABLE IF EXISTS run_digits; DROP TABLE IF EXISTS evaluation_counts;
        DROP INDEX IF EXISTS runs_running; DROP INDEX IF EXISTS runs_unfinished; DROP INDEX IF EXISTS runs_open;
        DROP INDEX IF EXISTS scalar_tags_value;
        DROP INDEX evaluations_args; DROP INDEX evaluations_code; DROP INDEX evaluations_summary;
        DROP INDEX evaluations_blobs; DROP INDEX evaluations_unused;
        CREATE INDEX evaluations_fn ON evaluations(fn, finished);
        ALTER TABLE evaluations DROP COLUMN inline;
        DROP INDEX runs_fn_script; ALTER TABLE runs DROP COLUMN script; ALTER TABLE runs DROP COLUMN argtext;
        UPDATE meta SET value='1' WHERE key='schema_version';
        DELETE FROM meta WHERE key LIKE 'kept:%';
        PRAGMA user_version=0;
    """)
    con.close()


def _state(path):
    """What an older memolab reads of the file: its bytes, its schema, its version."""
    con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        schema = sorted(con.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=str)
        version = (con.execute("PRAGMA user_version").fetchone()[0],
                   con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        con.close()
    return hashlib.sha256(path.read_bytes()).hexdigest(), schema, version


def _schema_1_store(project):
    project.write("job.py", JOB)
    _run(project, "job.py", "3")
    _run(project, "job.py", "4")
    index = project.store / "index.sqlite"
    downgrade_to_schema_1(index)
    return index


def test_commands_that_only_read_never_migrate_an_older_store(project, tmp_path):
    index = _schema_1_store(project)
    before = _state(index)
    assert before[2] == (0, "1")
    out = {}
    for args in (["ls"], ["ls", "plain"], ["ls", "--json"], ["show", "1"], ["why", "plain"], ["runs"],
                 ["runs", "plain", "--json"], ["gc", "--dry-run"], ["gc", "--older-than", "0s", "--dry-run"],
                 ["doctor"], ["export-tb", str(tmp_path / "tb")]):
        cp = _memolab(project, *args)
        out[args[0]] = cp.stdout
        assert "Traceback" not in cp.stderr, (args, cp.stderr)
        assert _state(index) == before, f"`memolab {' '.join(args)}` changed the store's index"
    assert "plain" in out["ls"] and "would drop" in out["gc"]
    assert "written by an older memolab" in out["doctor"] and "nothing will be changed" in out["doctor"]
    runs = json.loads(_memolab(project, "runs", "plain", "--json").stdout)["runs"]
    assert len(runs) == 2 and all(r["script"] is None for r in runs)  # a column the old file lacks: none
    # the dashboard, while it serves
    p = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--port", "0", "--no-browser"], cwd=project.root,
                         env=_env(project), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().split(": ", 1)[1].split()[0]
        base, token = url.split("?token=")
        with urllib.request.urlopen(f"{base}api/runs?fn=__main__:plain&token={token}", timeout=60) as r:
            assert len(json.loads(r.read())) == 2
    finally:
        p.terminate()
        p.communicate(timeout=30)
    assert _state(index) == before
    # a write migrates it, and says so once
    cp = _run(project, "job.py", "3", "5", "6")
    assert cp.stdout.split() == [str(256 * 3), str(256 * 5), str(256 * 6)]
    assert cp.stderr.count("upgraded the store index") == 1, cp.stderr
    assert "from schema 1 to" in cp.stderr
    assert _state(index)[2] == (SCHEMA_VERSION, str(SCHEMA_VERSION))
    assert "upgraded" not in _run(project, "job.py", "7").stderr  # done: nothing more to say


def test_memolab_upgrade_brings_an_older_store_up_to_date(project):
    index = _schema_1_store(project)
    cp = _memolab(project, "upgrade")
    assert f"from schema 1 to {SCHEMA_VERSION}" in cp.stdout and "an older memolab can no longer use it" in cp.stdout
    assert "MemolabWarning" not in cp.stderr
    assert _state(index)[2] == (SCHEMA_VERSION, str(SCHEMA_VERSION))
    assert json.loads(_memolab(project, "upgrade", "--json").stdout)["changed"] is False
    assert _run(project, "job.py", "3").stdout.strip() == str(256 * 3)  # a hit: nothing was lost
    assert json.loads(_memolab(project, "ls", "plain", "--json").stdout)["total"] == 2


WHY = """
import memolab

@memolab.memo
def plain(x):
    return x + 1

print(plain(2))
"""


def test_why_names_memolab_key_schema_not_the_users_unchanged_code(project):
    """After an upgrade that changes keys (another key schema: its code and argument digests are
    made by other rules) `why` said "`__main__:plain` changed", with no diff."""
    project.write("why.py", WHY)
    _run(project, "why.py")
    db = sqlite3.connect(project.store / "index.sqlite")
    with db:  # the row as a memolab with an older key schema stored it: every digest differs
        code, args, snap, versions = db.execute("SELECT code, args, snapshot, versions FROM evaluations").fetchone()
        snap = json.loads(snap)
        old = lambda d: hashlib.sha256(("old" + d).encode()).hexdigest()[:len(d)]  # noqa: E731
        for sym, d in list(snap["deps"].items()):
            if not sym.startswith(("pkg:", "python:")):
                text = db.execute("SELECT source FROM sources WHERE digest=?", (d,)).fetchone()[0]
                db.execute("INSERT INTO sources(digest, symbol, source) VALUES (?,?,?)", (old(d), sym, text))
                snap["deps"][sym] = old(d)
        snap["args"] = {k: [old(v[0]), v[1]] for k, v in snap["args"].items()}
        db.execute("UPDATE evaluations SET schema='h1-xxh3_128-c4m', code=?, args=?, snapshot=?, versions=?",
                   (old(code), old(args), json.dumps(snap), json.dumps({**json.loads(versions), "memolab": "0.0.9"})))
    db.close()
    assert _run(project, "why.py").stdout.strip() == "3"  # a miss: recomputed
    why = _memolab(project, "why", "plain").stdout
    from memolab.hashing import KEY_SCHEMA

    assert "memolab's key schema changed" in why and "h1-xxh3_128-c4m" in why and KEY_SCHEMA in why, why
    assert "memolab 0.0.9" in why
    assert "`__main__:plain` changed" not in why and "new arguments" not in why and "code digest changed" not in why
    # and an edit of the code under an older key schema is still told, with its diff
    project.write("why.py", WHY.replace("x + 1", "x + 2"))
    db = sqlite3.connect(project.store / "index.sqlite")
    with db:
        db.execute("DELETE FROM evaluations WHERE schema != 'h1-xxh3_128-c4m'")
    db.close()
    time.sleep(0.01)
    assert _run(project, "why.py").stdout.strip() == "4"
    why = json.loads(_memolab(project, "why", "plain", "--json").stdout)["miss"]
    assert any("memolab's key schema changed" in r for r in why["reasons"])
    assert "`__main__:plain` changed" in why["reasons"] and "+    return x + 2" in why["diffs"]["__main__:plain"]
