"""``tracking.argindex``: every run's arguments in value order, equal to what the runs' JSON says
after any sequence of writes by any writer (memolab's sink, ``log.hparams``, gc, a team pull's plain
INSERT, an older memolab: raw SQL here): the triggers (``TEMP`` ones of the writing connection, or
an older memolab's in the file) mark each run written, and the reader (``sync``) indexes the marked
runs; a store made before it gains it once; ``doctor`` tells
and rebuilds what drifted."""
from __future__ import annotations

import contextlib
import io
import json
import random

from memolab.store import get_store
from memolab.tracking import argindex, query


def recount(c) -> set:
    return set(c.execute("SELECT fn, name, COUNT(*), COUNT(DISTINCT value) FROM run_args GROUP BY fn, name"))


def kept(c) -> set:
    return {r for r in c.execute("SELECT fn, name, runs, groups FROM arg_names") if r[2] or r[3]}


def hparams(rng: random.Random) -> dict:
    hp: dict = {"lr": rng.choice([0.1, 0.2, 1, 1.0, "fast", None]), "cfg": {"opt": rng.choice(["adam", "sgd"]),
                                                                             "betas": [0.9, 0.99], "x": {}}}
    if rng.random() < 0.3:
        hp["seed"] = rng.randrange(5)
    if rng.random() < 0.1:
        hp["flag"] = rng.choice([True, False])
    return hp


def test_the_kept_arguments_follow_every_writer(tmp_store):
    from memolab.tracking.sink import END, START, sink_for

    rng = random.Random(3)
    s = sink_for(get_store().index)
    s.q.append((START, 1, {"fn": "a:f", "started": 1.0, "hparams": hparams(rng)}))
    s.flush()
    c = query.ready(get_store().index)
    assert argindex.available(c)
    ids = [1]
    for step in range(400):
        k = rng.random()
        if k < 0.3:  # memolab's own writer
            i = rng.randrange(2, 10**9)
            s.q.append((START, i, {"fn": rng.choice(["a:f", "b:g"]), "started": rng.random() * 100,
                                   "hparams": hparams(rng)}))
            s.q.append((END, i, "done", 200.0, None))
            s.flush()
            ids.append(i)
        elif k < 0.45:  # a team pull's (or an older memolab's) plain INSERT, text that is not JSON too
            i = rng.randrange(2, 10**9)
            hp = json.dumps(hparams(rng)) if rng.random() < 0.9 else '{"lr": NaN}'
            with c:
                c.execute("INSERT INTO runs(id, fn, started, status, hparams) VALUES (?, ?, ?, 'done', ?)",
                          (i, "a:f", rng.random() * 100, hp))
            ids.append(i)
        elif k < 0.6 and ids:  # log.hparams merges into a run's arguments
            with c:
                c.execute("UPDATE runs SET hparams = ? WHERE id = ?", (json.dumps(hparams(rng)), rng.choice(ids)))
        elif k < 0.7 and ids:  # a run moved (renamed function, restarted)
            with c:
                c.execute("UPDATE runs SET fn = ?, started = ? WHERE id = ?",
                          (rng.choice(["a:f", "b:g"]), rng.random() * 100, rng.choice(ids)))
        elif k < 0.8 and ids:  # gc
            i = ids.pop(rng.randrange(len(ids)))
            with c:
                c.execute("DELETE FROM runs WHERE id = ?", (i,))
        else:  # a write that touches no argument
            if ids:
                with c:
                    c.execute("UPDATE runs SET status = 'failed', name = 'x' WHERE id = ?", (rng.choice(ids),))
        if step % 50 == 49:
            if step % 100 == 99:  # (the reader's catch-up of the runs written since: now and then)
                assert argindex.sync(get_store().index)
                assert c.execute("SELECT COUNT(*) FROM args_pending").fetchone()[0] == 0
            assert argindex.check(c) == [], (step, k)
            assert kept(c) == recount(c), step
    # what a filter reads is what the JSON says: each run of lr 0.1 once
    assert argindex.sync(get_store().index)
    want = {i for i, h in c.execute("SELECT id, hparams FROM runs WHERE fn = 'a:f' AND json_valid(hparams)")
            if json.loads(h).get("lr") == 0.1}
    assert {i for (i,) in c.execute("SELECT run FROM run_args WHERE fn = 'a:f' AND name = 'lr' AND value = 0.1")} == want

    # drift (a writer bypassing the triggers' arithmetic) is told and rebuilt by doctor
    with c:
        c.execute("DELETE FROM run_args WHERE run IN (SELECT run FROM run_args LIMIT 1)")
        c.execute("UPDATE arg_names SET runs = runs + 5 WHERE name = 'lr'")
    lines = argindex.check(c)
    assert any("missing" in x for x in lines) and any("argument counts" in x for x in lines), lines
    from memolab.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["doctor"])
    assert "kept argument index:" in buf.getvalue() and "rebuilt" in buf.getvalue(), buf.getvalue()
    c = query.ready(get_store().index)
    assert argindex.check(c) == [] and kept(c) == recount(c)


def test_a_store_made_before_it_gains_it_once_from_its_runs(tmp_store):
    from memolab.tracking import schema
    from memolab.tracking.sink import END, START, sink_for

    s = sink_for(get_store().index)
    for i in range(1, 60):
        s.q.append((START, i, {"fn": "a:f", "started": float(i), "hparams": {"lr": [0.1, 0.2, 0.3][i % 3], "seed": i}}))
        s.q.append((END, i, "done", 100.0, None))
    s.flush()
    c = query.ready(get_store().index)
    with c:  # as an older memolab left it: no triggers, no tables, no marker
        for t in argindex.TRIGGERS:
            c.execute("DROP TRIGGER IF EXISTS temp." + t.split()[5])
        c.execute("DELETE FROM meta WHERE key = ?", (argindex.MARKER,))
        c.execute("DROP TABLE run_args")
        c.execute("DROP TABLE arg_names")
    assert not argindex.available(c) and argindex.counted(c, "a:f", "lr") is None
    with c:
        c.execute("INSERT INTO runs(id, fn, started, status, hparams) VALUES (99, 'a:f', 99.0, 'done', '{\"lr\": 0.1}')")
    schema.ensure(c)  # its first write by this version: the tables, and every run to index
    assert argindex.available(c)
    assert argindex.sync(get_store().index)  # (the first reader fills them)
    assert argindex.counted(c, "a:f", "lr") == (60, 3) and argindex.counted(c, "a:f", "seed") == (59, 59)
    assert argindex.check(c) == [] and not argindex.install(c)  # once
