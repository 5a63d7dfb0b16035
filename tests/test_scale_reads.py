"""Commands and dashboard requests cost what they show, not what the store holds (issue 52 §1).

A store written by real calls is grown to 1k and to 10k evaluations of one function by copying
its rows in SQL (as ``benchmarks/store_scaling.py`` fills its million: 98% with a run and a
logged metric, the oldest 2% stored without one). Then, in one fresh process per store, each command
runs with every SQLite connection counting the statements it executes and the rows it hands to
Python: at 10k they must be what they are at 1k (no wall-clock: the counts are deterministic).
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import sys

import pytest

JOB = """
import memolab
from memolab import memo

@memo
def train(lr, seed=0):
    memolab.log.scalar("val/loss", lr * 2, step=0)
    memolab.log.scalar("val/loss", lr, step=1)
    if lr > 1:
        raise ValueError("diverged")
    return lr + seed

for lr in (0.1, 0.2, 0.3, 5.0):
    try:
        train(lr)
    except ValueError:
        pass
"""

# counts every statement and every row any sqlite3 connection of this process hands to Python
COUNTING = r"""
import contextlib, io, json, sqlite3, sys
counts = {"statements": 0, "rows": 0, "vm": 0}

def schema(sql):
    # the log tables' set-up runs once per connection, and the server's threads get connections
    # as they come: not the work of a request (nor is asking whether the counts are kept: the
    # triggers in the file, or the marker in ``meta``, a point query, tracking/temptriggers.py)
    return sql.lstrip().upper().startswith(("CREATE", "PRAGMA", "ALTER")) or "sqlite_master" in sql \
        or "FROM main.meta WHERE key" in sql

class Cursor(sqlite3.Cursor):
    skip = False
    def execute(self, sql, *a, **k):
        self.skip = schema(sql)
        counts["statements"] += not self.skip
        return super().execute(sql, *a, **k)
    def executemany(self, *a, **k):
        counts["statements"] += 1
        return super().executemany(*a, **k)
    def __next__(self):
        r = super().__next__()
        counts["rows"] += not self.skip
        return r
    def fetchone(self):
        r = super().fetchone()
        counts["rows"] += r is not None and not self.skip
        return r
    def fetchmany(self, *a, **k):
        r = super().fetchmany(*a, **k)
        counts["rows"] += 0 if self.skip else len(r)
        return r
    def fetchall(self):
        r = super().fetchall()
        counts["rows"] += 0 if self.skip else len(r)
        return r

def step():  # SQLite's own work: one call per 1,000 virtual-machine instructions
    counts["vm"] += 1
    return 0

class Connection(sqlite3.Connection):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.set_progress_handler(step, 1000)
    def cursor(self, factory=Cursor):
        return super().cursor(factory)
    def execute(self, *a, **k):
        return self.cursor().execute(*a, **k)
    def executemany(self, *a, **k):
        return self.cursor().executemany(*a, **k)

_connect = sqlite3.connect
sqlite3.connect = lambda *a, **k: _connect(*a, **{"factory": Connection, **k})
"""
MEASURE = COUNTING + r"""
from memolab.cli import main
srv = None
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    if argv[0] == "GET" and srv is None:  # the dashboard's server, in this process (its counts too)
        import os, urllib.request
        from memolab.ui.server import serve_in_thread
        srv, _ = serve_in_thread(os.environ["MEMOLAB_STORE"])
    counts.update(statements=0, rows=0, vm=0)
    if argv[0] == "GET":
        req = urllib.request.Request(srv.link("api/" + argv[1]).split("?token=")[0].split("&token=")[0],
                                     headers={"Authorization": "Bearer " + srv.token})
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
        out[name] = {**counts, "rc": 0, "out": body.decode(), "bytes": len(body)}
        continue
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    out[name] = {**counts, "rc": rc, "out": buf.getvalue()}
print(json.dumps(out))
"""


def grow(index: str, n: int) -> None:
    """Copy the store's first evaluation until it holds ``n`` evaluations of its function: each copy
    with a run (and a final ``val/loss``) made from the first run, but the oldest 2% without (so
    that finding the newest evaluations without a run must not scan all those with one)."""
    from memolab.tracking import schema

    c = sqlite3.connect(index)
    schema.arm(c)  # (the kept counts' triggers, as a memolab connection makes them before it writes)
    with c:
        base = c.execute("SELECT MIN(id) FROM evaluations").fetchone()[0]
        have = c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
        c.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
            "INSERT INTO evaluations(fn, code, args, schema, status, payload, payload_size, buffers, size, started, "
            "finished, duration, host, python, versions, snapshot, code_refs, inline) "
            "SELECT fn, code, args || '.' || i, schema, status, payload, payload_size, buffers, size, started - 10 * i, "
            "finished - 10 * i, duration, host, python, versions, snapshot, code_refs, inline "
            "FROM evaluations, k WHERE id = ?", (n - have, base))
        run = c.execute("SELECT id FROM runs WHERE eval_id = ?", (base,)).fetchone()[0]
        c.execute(
            "INSERT INTO runs(id, fn, code, args, schema, started, finished, updated, status, hparams, eval_id, pid, "
            "host, script) SELECT e.id + 10000000, r.fn, e.code, e.args, e.schema, e.started, e.finished, e.finished, "
            "'done', json_set(r.hparams, '$.lr', e.id + 1000), e.id, r.pid, r.host, r.script "
            "FROM evaluations e, runs r WHERE r.id = ? AND e.id > ? AND e.id <= ?", (run, have, n - n // 50))
        c.execute("INSERT INTO scalar_tags(run, tag, n, last_step, last_value, last_wall, first_step, ordered) "
                  "SELECT id, 'val/loss', 2, 1, eval_id * 0.001, finished, 0, 1 FROM runs WHERE id BETWEEN 10000000 AND 20000000")
    with c:  # the runs' arguments indexed, as a dashboard that is open keeps them (tracking/argindex.py)
        from memolab.tracking import argindex

        argindex.drain(c)
    c.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    from conftest import Project

    project = Project(tmp_path_factory.mktemp("scale") / "proj")
    project.write("job.py", JOB)
    project.run("job.py")
    out = {}
    for n in (1000, 10000):
        root = project.root.parent / f"store{n}"
        shutil.copytree(project.store, root)
        grow(str(root / "index.sqlite"), n)
        out[n] = root
    return project, out


def measure(project, store, commands: dict[str, list[str]]) -> dict[str, dict]:
    cp = project.run("-c", MEASURE, json.dumps(commands), env={"MEMOLAB_STORE": str(store), "COLUMNS": "200"})
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_show_ls_and_runs_read_what_they_print(stores):
    project, by_size = stores
    got = {}
    for n, store in by_size.items():
        c = sqlite3.connect(store / "index.sqlite")
        # the first evaluation (a real call's, with its run) and the newest run
        ev = c.execute("SELECT MIN(id) FROM evaluations").fetchone()[0]
        run = c.execute("SELECT id FROM runs WHERE eval_id = ?", (ev,)).fetchone()[0]
        c.close()
        got[n] = measure(project, store, {
            "show": ["show", str(ev)], "show-run": ["show", f"r{run}"], "ls": ["ls", "train", "--limit", "20"],
            "runs": ["runs", "train", "--limit", "20"], "runs-json": ["runs", "train", "--limit", "5", "--json"]})
    for name in got[1000]:
        small, big = got[1000][name], got[10000][name]
        assert small["rc"] == big["rc"] == 0, (name, small, big)
        assert big["rows"] <= small["rows"] + 5, (name, small["rows"], big["rows"])
        assert big["statements"] <= small["statements"] + 5, (name, small["statements"], big["statements"])
    # nor does SQLite walk more at 10k: the totals are kept counts (tracking/counts.py), the running
    # and unfinished runs partial indexes, the newest rows index ranges
    for name in got[1000]:  # (one tick per 1,000 instructions: a few of slack)
        assert got[10000][name]["vm"] <= got[1000][name]["vm"] + 3, (name, got[1000][name]["vm"],
                                                                     got[10000][name]["vm"])
    # what they print is right, not merely cheap
    assert "val/loss = 0.1" in got[10000]["show"]["out"] and "lr=0.1" in got[10000]["show"]["out"]
    # (the newest 20 rows: the failed run, which stored nothing, is one: issue 53 §2)
    assert "19 of 10,000 evaluations" in got[10000]["ls"]["out"], got[10000]["ls"]["out"]
    assert "failed: ValueError: diverged" in got[10000]["ls"]["out"], got[10000]["ls"]["out"]
    doc = json.loads(got[10000]["runs-json"]["out"])
    # every stored evaluation is listed (with a run or without), the failed run too, newest first
    assert doc["total"] == 10001 and len(doc["runs"]) == 5
    started = [r["started"] for r in doc["runs"]]
    assert started == sorted(started, reverse=True)
    print({n: {k: (v["statements"], v["rows"], v["vm"]) for k, v in g.items()} for n, g in got.items()},
          file=sys.stderr)


def test_the_dashboards_window_is_sorted_and_filtered_on_the_server(stores):
    """/api/runs and /api/hparams with ``limit`` (what the page asks): the statements, rows read and
    bytes sent at 10k are those at 1k; sorted by a metric, filtered by status and by an argument."""
    project, by_size = stores
    fn = "__main__%3Atrain"
    asks = {"runs": ["GET", f"runs?fn={fn}&limit=50"], "hparams": ["GET", f"hparams?fn={fn}&limit=50"],
            "by-metric": ["GET", f"runs?fn={fn}&limit=20&sort=m%3Aval%2Floss&dir=asc"],
            "failed": ["GET", f"runs?fn={fn}&limit=20&status=failed"],
            "arg": ["GET", f"runs?fn={fn}&limit=20&arg=lr%3D0.2"],
            "page-2": ["GET", f"runs?fn={fn}&limit=20&offset=20"],
            # the rest of the page's first load: the sidebar, the run-id digits, the poll
            "functions": ["GET", "functions"], "ids": ["GET", "ids"], "heartbeat": ["GET", "heartbeat"]}
    got = {n: measure(project, store, asks) for n, store in by_size.items()}
    for name in asks:
        small, big = got[1000][name], got[10000][name]
        for what in ("statements", "rows"):
            assert big[what] <= small[what] + 5, (name, what, small[what], big[what])
        assert big["bytes"] <= small["bytes"] * 1.1 + 200, (name, small["bytes"], big["bytes"])
        if name not in ("by-metric", "failed", "arg"):  # (a sort by a metric or a filter is one pass of SQLite)
            assert big["vm"] <= small["vm"] + 3, (name, small["vm"], big["vm"])
    assert json.loads(got[10000]["ids"]["out"])["short"] >= 6
    fns = json.loads(got[10000]["functions"]["out"])
    assert sum(f["runs"] for f in fns) == 10000 - 10000 // 50 + 1 and sum(f["evaluations"] for f in fns) == 10000
    big = {k: json.loads(v["out"]) for k, v in got[10000].items()}
    assert big["runs"]["total"] == 10001 and len(big["runs"]["rows"]) == 50
    started = [r["started"] for r in big["runs"]["rows"] + big["page-2"]["rows"]]
    assert started[:20] == sorted(started[:20], reverse=True)
    assert [r["id"] for r in big["page-2"]["rows"]] == [r["id"] for r in big["runs"]["rows"][20:40]]
    loss = [r["metrics"]["val/loss"] for r in big["by-metric"]["rows"]]
    c = sqlite3.connect(by_size[10000] / "index.sqlite")
    n_runs = c.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    c.close()
    assert loss == sorted(loss) and big["by-metric"]["total"] == n_runs  # the best (lowest) first, every run
    assert [r["status"] for r in big["failed"]["rows"]] == ["failed"] and big["failed"]["total"] == 1
    assert [r["hparams"]["lr"] for r in big["arg"]["rows"]] == [0.2]
    # the window's runs (its evaluations stored without a run have no logged hyperparameters of a run)
    assert [r["id"] for r in big["hparams"]["rows"]] == [r["id"] for r in big["runs"]["rows"] if isinstance(r["id"], int)]
    assert big["hparams"]["total"] == 10001
    print({n: {k: (v["statements"], v["rows"], v["vm"], v["bytes"]) for k, v in g.items()} for n, g in got.items()},
          file=sys.stderr)


def test_the_newest_n_are_those_of_the_whole_list(stores):
    """``query.runs(fn, limit=N)`` (read by index, stopping early) is the first N of every row sorted
    newest first, labels aside; its total is the whole list's length."""
    from memolab.store.reading import open_for_reading
    from memolab.tracking import query

    _, by_size = stores
    index = open_for_reading(by_size[1000]).index
    every = sorted(query.runs(index, "__main__:train"), key=lambda r: r["started"] or 0.0, reverse=True)
    assert query.count_rows(index, "__main__:train") == len(every) == 1001
    for n in (1, 7, 250, 2000):
        got = query.runs(index, "__main__:train", limit=n)
        assert [r["id"] for r in got] == [r["id"] for r in every[:n]]
        assert [r["stored"] for r in got] == [r["stored"] for r in every[:n]]


def test_the_pages_first_load_is_a_screen_and_its_best_run_and_groups_are_the_servers(stores):
    """What the page asks on arrival at a function (its runs window sized to a 1000-px screen:
    ``limit=56``, app.js ``screenRows``) costs the same statements, rows, bytes and SQLite work at
    10k as at 1k; the best run of a metric and the group statistics over every run (``/api/best``,
    ``/api/groups``: what the page no longer computes from the rows it holds) read a fixed number of
    rows into Python (the best run: and a fixed SQLite work, walked from the best value; the groups:
    one pass of SQLite, exempt from the VM check) and equal Python's own computation over every run."""
    project, by_size = stores
    fn = "__main__%3Atrain"
    first = {"info": ["GET", "info"], "functions": ["GET", "functions"], "ids": ["GET", "ids"],
             "heartbeat": ["GET", "heartbeat"], "runs": ["GET", f"runs?fn={fn}&limit=56"]}
    server = {"best": ["GET", f"best?fn={fn}&tag=val%2Floss&dir=min"],
              "best-max": ["GET", f"best?fn={fn}&tag=val%2Floss&dir=max"],
              "groups": ["GET", f"groups?fn={fn}&by=seed&tag=val%2Floss"],
              "by-lr": ["GET", f"groups?fn={fn}&by=lr&tag=val%2Floss"]}
    got = {n: measure(project, store, {**first, **server}) for n, store in by_size.items()}
    small, big = got[1000], got[10000]
    for name in first:
        for what in ("statements", "rows", "bytes"):
            assert big[name][what] <= small[name][what] + (200 if what == "bytes" else 5), (name, what, small[name], big[name])
        assert big[name]["vm"] <= small[name]["vm"] + 3, (name, small[name]["vm"], big[name]["vm"])
    assert sum(big[n]["bytes"] for n in first) <= sum(small[n]["bytes"] for n in first) * 1.05 + 200
    for name in ("best", "best-max", "groups", "by-lr"):
        assert big[name]["statements"] == small[name]["statements"] and big[name]["rows"] == small[name]["rows"], name
    for name in ("best", "best-max"):  # walked from the best value (scalar_tags_value), not over every run
        assert big[name]["vm"] <= small[name]["vm"] + 3, (name, small[name]["vm"], big[name]["vm"])
    assert len(json.loads(big["runs"]["out"])["rows"]) == 56
    for n, store in by_size.items():  # Python's own computation over every run of the function
        c = sqlite3.connect(store / "index.sqlite")
        runs = c.execute("SELECT id, started, hparams FROM runs WHERE fn='__main__:train'").fetchall()
        last = dict(c.execute("SELECT run, last_value FROM scalar_tags WHERE tag='val/loss' AND last_value IS NOT NULL"))
        c.close()
        logged = [(last[i], s, i) for i, s, _ in runs if i in last]
        lo = min(logged, key=lambda x: (x[0], -x[1], -x[2]))
        hi = min(logged, key=lambda x: (-x[0], -x[1], -x[2]))
        for name, want in (("best", lo), ("best-max", hi)):
            b = json.loads(got[n][name]["out"])
            assert (b["run"], b["value"]) == (want[2], want[0]), (n, name, b, want)
        for name, by in (("groups", "seed"), ("by-lr", "lr")):
            groups: dict = {}
            for i, _, hp in runs:
                groups.setdefault(json.loads(hp or "{}").get(by), []).append(last.get(i))
            doc = json.loads(got[n][name]["out"])
            served = {g["value"]: g for g in doc["groups"]}
            # every group counted; the first MAX_GROUPS (200) in value order listed
            assert doc["total"] == len(groups) and list(served) == sorted(groups)[:200], (n, name)
            for k in served:
                vals = groups[k]
                v = [x for x in vals if x is not None]
                g = served[k]
                assert (g["runs"], g["n"]) == (len(vals), len(v)), (n, name, k)
                if v:
                    assert g["min"] == min(v) and g["max"] == max(v)
                    assert g["mean"] == pytest.approx(sum(v) / len(v), rel=1e-12)
                    assert g["std"] == pytest.approx((sum((x - g["mean"]) ** 2 for x in v) / len(v)) ** 0.5,
                                                     rel=1e-6, abs=1e-9)
    print({n: {k: (v["statements"], v["rows"], v["vm"], v["bytes"]) for k, v in g.items()} for n, g in got.items()},
          file=sys.stderr)


def test_group_statistics_and_a_sort_or_filter_by_an_argument_read_what_they_show(stores):
    """Every run its own group (``lr``: a distinct value per run, as a seed is): the group statistics
    (the first 200 groups of 10,000), a page of the runs sorted by the argument (either way, from
    its first value or from a value filtered to) and the runs filtered by it cost the same
    statements, rows, bytes and SQLite VM steps at 10k as at 1k: they walk the index of every run's
    arguments (tracking/argindex.py) from where the page starts, never the function's runs. And they
    are Python's own computation over every run."""
    project, by_size = stores
    fn = "__main__%3Atrain"
    asks = {"groups": ["GET", f"groups?fn={fn}&by=lr&tag=val%2Floss"],
            "asc": ["GET", f"runs?fn={fn}&limit=56&sort=a%3Alr&dir=asc"],
            "desc": ["GET", f"runs?fn={fn}&limit=56&sort=a%3Alr&dir=desc"],
            "range": ["GET", f"runs?fn={fn}&limit=56&arg=lr%3E%3D1100&arg=lr%3C1110"],
            "range-sorted": ["GET", f"runs?fn={fn}&limit=56&sort=a%3Alr&dir=desc&arg=lr%3E%3D1100&arg=lr%3C1110"],
            "small": ["GET", f"runs?fn={fn}&limit=56&arg=lr%3C%3D0.3"]}
    got = {n: measure(project, store, asks) for n, store in by_size.items()}
    for name in asks:
        small, big = got[1000][name], got[10000][name]
        assert small["rc"] == big["rc"] == 0
        for what in ("statements", "rows"):
            assert big[what] == small[what], (name, what, small[what], big[what])
        assert big["bytes"] <= small["bytes"] * 1.1 + 200, (name, small["bytes"], big["bytes"])
        assert big["vm"] <= small["vm"] + 3, (name, small["vm"], big["vm"])
    for n, store in by_size.items():  # Python's own computation over every run of the function
        c = sqlite3.connect(store / "index.sqlite")
        runs = [(i, s, json.loads(hp or "{}").get("lr")) for i, s, hp in
                c.execute("SELECT id, started, hparams FROM runs WHERE fn='__main__:train'")]
        last = dict(c.execute("SELECT run, last_value FROM scalar_tags WHERE tag='val/loss'"))
        c.close()
        doc = {k: json.loads(v["out"]) for k, v in got[n].items()}
        lrs = sorted({lr for _, _, lr in runs})
        assert doc["groups"]["total"] == len(runs) == len(lrs)  # (a group per run)
        assert [g["value"] for g in doc["groups"]["groups"]] == lrs[:200]
        for g in doc["groups"]["groups"]:
            (run,) = [i for i, _, lr in runs if lr == g["value"]]
            assert (g["runs"], g["n"], g["min"], g["max"]) == (1, 1, last[run], last[run])
        asc = [i for i, _, _ in sorted(runs, key=lambda x: (x[2], -x[1]))]
        assert [r["id"] for r in doc["asc"]["rows"]] == asc[:56] and doc["asc"]["total"] == len(runs)
        assert [r["id"] for r in doc["desc"]["rows"]] == asc[::-1][:56] and doc["desc"]["total"] == len(runs)
        newest = [i for i, _, lr in sorted(runs, key=lambda x: -x[1]) if 1100 <= lr < 1110]
        assert [r["id"] for r in doc["range"]["rows"]] == newest and doc["range"]["total"] == 10
        assert [r["hparams"]["lr"] for r in doc["range-sorted"]["rows"]] == list(range(1109, 1099, -1))
        assert sorted(r["hparams"]["lr"] for r in doc["small"]["rows"]) == [0.1, 0.2, 0.3]
    print({n: {k: (v["statements"], v["rows"], v["vm"], v["bytes"]) for k, v in g.items()} for n, g in got.items()},
          file=sys.stderr)


def test_ls_and_gc_older_than_read_what_they_show_and_drop(stores, tmp_path):
    """``memolab ls`` (every function's summary) and ``gc --older-than 30d --dry-run`` cost the same
    statements and rows at 10k as at 1k, and gc the same SQLite VM steps: it finds what it would
    drop through index ranges up to its cutoff (the results by last use, the runs by last write,
    the keep marks by their key), never a pass over every row. ls reads the kept counts
    (tracking/counts.py), and each expiry from the rows stored with one (their own index): where
    the function's runs name no script its VM steps are those at 1k too; a script's ``__main__``
    function (``a.py:train``, apart from ``b.py:train``) is summed by SQLite over the evaluations
    that script's runs produced (one statement, one row into Python), no counts kept per script.
    With a few rows older than the cutoff at both sizes, the dry run finds exactly those, kept
    ones excepted."""
    project, by_size = stores
    old = 60 * 86400.0
    asks = {"ls": ["ls"], "ls-json": ["ls", "--json"], "gc": ["gc", "--older-than", "30d", "--dry-run", "--json"]}
    got, aged, noscript, real = {}, {}, {}, {}
    for n, store in by_size.items():
        got[n] = measure(project, store, asks)
        copy = tmp_path / f"old{n}"  # (the module's stores stay as they are for the other tests)
        shutil.copytree(store, copy)
        c = sqlite3.connect(copy / "index.sqlite")
        from memolab.tracking import schema

        schema.arm(c)  # (counted as memolab's writers, or an older memolab's triggers in the file, count)
        with c:  # the 6 oldest copies (without a run) last used 60 days ago, one of them kept
            ids = [i for (i,) in c.execute("SELECT id FROM evaluations ORDER BY id DESC LIMIT 6")]
            c.execute(f"UPDATE evaluations SET started = started - {old}, finished = finished - {old}, last_hit = NULL "
                      f"WHERE id IN ({','.join('?' * 6)})", ids)
            c.execute("INSERT INTO keeps(fn, code, args, schema, time, source) SELECT fn, code, args, schema, 0, 'test' "
                      "FROM evaluations WHERE id = ?", (ids[0],))
            for k in range(3):  # failed runs that stored nothing, written 60 days ago
                c.execute("INSERT INTO runs(id, fn, started, finished, updated, status) "
                          "VALUES (?, '__main__:train', ?, ?, ?, 'failed')", (900000000 + k, *[1e9 + k] * 3))
            c.execute("UPDATE runs SET script = NULL")  # (no run names its script: see above)
            # an evaluation deleted by another writer (an older memolab): its run is an orphan, its logs go
            orphan = c.execute("SELECT MIN(id) FROM runs WHERE id >= 10000000").fetchone()[0]  # (a copy's run)
            c.execute("DELETE FROM evaluations WHERE id = (SELECT eval_id FROM runs WHERE id = ?)", (orphan,))
        c.close()
        yes = ["gc", "--older-than", "30d", "--yes", "--json"]
        m = measure(project, copy, {"gc": asks["gc"], "ls": asks["ls-json"], "real": yes, "again": yes})
        noscript[n], aged[n], real[n] = m["ls"], m["gc"], (m["real"], m["again"])
        doc = json.loads(aged[n]["out"])
        assert sorted(doc["evaluation_ids"]) == sorted(ids[1:]), (n, doc)
        assert doc["runs"] == 3 and doc["kept_evaluations"] == 1, (n, doc)
        doc = json.loads(real[n][0]["out"])  # the orphan too, found from the kept counts (no pass over the runs)
        assert sorted(doc["evaluation_ids"]) == sorted(ids[1:]) and doc["runs"] == 4, (n, doc)
        c = sqlite3.connect(copy / "index.sqlite")
        assert c.execute("SELECT COUNT(*) FROM runs WHERE id = ? OR id BETWEEN 900000000 AND 900000002",
                         (orphan,)).fetchone()[0] == 0
        assert c.execute("SELECT COUNT(*) FROM evaluations WHERE id IN (?,?,?,?,?,?)", ids).fetchone()[0] == 1
        c.close()
    for name in asks:
        small, big = got[1000][name], got[10000][name]
        assert small["rc"] == big["rc"] == 0, (name, small, big)
        for what in ("statements", "rows"):
            assert big[what] == small[what], (name, what, small[what], big[what])
        if name == "gc":  # (ls: the script's share is one pass of SQLite over its evaluations, see above)
            assert big["vm"] <= small["vm"] + 3, (name, small["vm"], big["vm"])
    for what in ("statements", "rows", "vm"):  # the function's summary from its kept counts alone
        assert noscript[10000][what] <= noscript[1000][what] + (3 if what == "vm" else 0), (
            what, noscript[1000][what], noscript[10000][what])
    for what in ("statements", "rows"):  # (the index estimate walks its pages: the VM steps grow there)
        assert aged[10000][what] == aged[1000][what], (what, aged[1000][what], aged[10000][what])
    # the real gc: what it drops, not what the store holds (the orphan is swept for in one pass of
    # SQLite over the runs; a gc that finds none, the next one here, reads the kept counts instead)
    for what in ("statements", "rows"):
        assert real[10000][0][what] == real[1000][0][what], (what, real[1000][0][what], real[10000][0][what])
    for what in ("statements", "rows", "vm"):
        assert real[10000][1][what] <= real[1000][1][what] + (3 if what == "vm" else 0), (
            what, real[1000][1][what], real[10000][1][what])
    assert json.loads(real[10000][1]["out"])["runs"] == 0
    fns = json.loads(got[10000]["ls-json"]["out"])["functions"]  # the script's, and the 2% without a run
    assert sorted((f.get("label") or f["fn"], f["evaluations"]) for f in fns) == [
        ("__main__:train", 200), ("job.py:train", 9800)], fns
    fns = json.loads(noscript[10000]["out"])["functions"]
    assert [(f["fn"], f["evaluations"]) for f in fns] == [("__main__:train", 9999)], fns  # (one deleted above)
    assert "job.py:train     9800" in got[10000]["ls"]["out"], got[10000]["ls"]["out"]
    assert json.loads(got[10000]["gc"]["out"])["evaluations"] == 0
    print({n: {k: (v["statements"], v["rows"], v["vm"]) for k, v in g.items()} for n, g in got.items()},
          {n: (v["statements"], v["rows"], v["vm"]) for n, v in aged.items()},
          {n: (v["statements"], v["rows"], v["vm"]) for n, v in noscript.items()},
          {n: [(v["statements"], v["rows"], v["vm"]) for v in r] for n, r in real.items()}, file=sys.stderr)


# a process hitting the store: what each hit and the hit-count write cost, counted (COUNTING), with
# the read and write system calls of the process (/proc/self/io) and the index file's changes
HITS = r"""
import memolab.store.usage as usage
usage.HIT_FLUSH_SECONDS = 1e9  # (no usage thread: the one write of the hit counts is this test's, below)
""" + COUNTING + JOB.split("for lr in")[0] + r"""
import os
from memolab.store import get_store

store = get_store()
index = os.path.join(os.environ["MEMOLAB_STORE"], "index.sqlite")
for lr in (0.1, 0.2, 0.3):  # the process's first calls (imports, code digests): not what is measured
    assert train(lr) == lr

def io():
    with open("/proc/self/io") as f:
        d = dict(line.split(": ") for line in f.read().splitlines())
    return int(d["syscr"]), int(d["syscw"])

def files():
    return [(os.stat(p).st_size, os.stat(p).st_mtime_ns) if os.path.exists(p) else None
            for p in (index, index + "-wal")]

def counted(work):
    conn = store.index.conn()
    changes, before = conn.total_changes, files()
    counts.update(statements=0, rows=0, vm=0)
    r0, w0 = io()
    work()
    r1, w1 = io()
    return {**counts, "reads": r1 - r0, "writes": w1 - w0, "changes": conn.total_changes - changes,
            "files_changed": files() != before}

def hits():
    for _ in range(10):
        for lr in (0.1, 0.2, 0.3):
            store.forget()  # (this process's copy dropped: every hit reads the index)
            assert train(lr) == lr

hits_before = dict(store.index.conn().execute("SELECT id, hits FROM evaluations WHERE id <= 4"))
out = {"hits": counted(hits), "flush": counted(store.flush_hits)}
sqlite3.connect(index).execute("SELECT 1")  # (another connection; nothing else runs)
hits_after = dict(store.index.conn().execute("SELECT id, hits FROM evaluations WHERE id <= 4"))
out["added"] = sorted(hits_after[i] - hits_before[i] for i in hits_before)
print(json.dumps(out))
"""


def test_a_hit_and_the_hit_count_write_cost_what_they_touch(stores):
    """A hit read from the store and the batched write of the hit counts (``store/usage.py``'s
    flush, which also moves each row in the last-use index) cost the same statements and SQLite VM
    steps at 10k as at 1k; the hits make no write at all: no statement changes a row, no write
    system call (a WAL checkpoint writes the index file: none lands on a hit), neither the index
    file nor its WAL changes, and a warm hit reads nothing from the file (the same system calls at
    both sizes). The hit counts are written once, by the flush: 11 per row.

    (Issue 52 §1: the hit's p99 at 1M measured 21.9x that at 1k in one recording. The slow hits
    were ones that lost the CPU to another job for a scheduler time slice, ~4 ms, at every size:
    ``store_scaling.py --reads`` now counts them and gives the p99 of the hits that kept the CPU.)"""
    project, by_size = stores
    got = {}
    for n, store in by_size.items():
        copy = store.parent / f"hits{n}"  # (the module's stores stay as they are for the other tests)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(store, copy)
        cp = project.run("-c", HITS, env={"MEMOLAB_STORE": str(copy)})
        got[n] = json.loads(cp.stdout.strip().splitlines()[-1])
        assert got[n]["added"] == [0, 11, 11, 11], (n, got[n])  # (the first calls hit too; the failed call: no row hit)
        hit = got[n]["hits"]
        assert hit["writes"] == hit["changes"] == 0 and not hit["files_changed"], (n, hit)
        assert got[n]["flush"]["changes"] > 0 and got[n]["flush"]["writes"] > 0, (n, got[n]["flush"])
    small, big = got[1000], got[10000]
    for what in ("hits", "flush"):
        for k in ("statements", "rows"):
            assert big[what][k] == small[what][k], (what, k, small[what][k], big[what][k])
        assert big[what]["vm"] <= small[what]["vm"] + 1, (what, small[what]["vm"], big[what]["vm"])
    assert big["hits"]["reads"] == small["hits"]["reads"], (small["hits"], big["hits"])
    print({n: {k: v for k, v in g.items() if k != "added"} for n, g in got.items()}, file=sys.stderr)
