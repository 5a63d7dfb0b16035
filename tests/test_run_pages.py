"""``tracking.pages.best`` and ``groups`` (the dashboard's best run and group statistics over every
run, not a page's) against Python's own computation, with the store's index and without it (a store
read as it is, before its first write by this version): ties, NaN, other functions' better values,
runs without the metric or the argument."""
from __future__ import annotations

import math
import random

from memolab.store import get_store
from memolab.tracking import pages, query


def fill(rng: random.Random) -> dict[int, tuple[str, dict, float | None, float]]:
    from memolab.tracking.sink import END, SCALAR, START, sink_for

    s = sink_for(get_store().index)
    truth = {}
    for r in range(1, 401):
        fn = "a:f" if r % 3 else "b:g"  # another function's values (some better) are never a's best
        hp = {"opt": {"lr": rng.choice([0.1, 0.2, 0.5])}} if r % 7 else {}
        v = None if r % 11 == 0 else math.nan if r % 13 == 0 else rng.choice([0.25, 0.5, 0.75, 1.0, 2.0])
        if fn == "b:g":
            v = -1.0 if v is not None else v
        s.q.append((START, r, {"fn": fn, "started": float(rng.randrange(50)), "hparams": hp}))  # ties in started too
        if v is not None:
            s.q.append((SCALAR, r, "val/loss", 0, 1.0, v))
        s.q.append((END, r, "done", 60.0, None))
        truth[r] = (fn, hp, None if v is None or v != v else v, 0.0)
    s.flush()
    return truth


def test_best_and_groups_are_those_of_every_run(tmp_store):
    truth = fill(random.Random(5))
    index = get_store().index
    c = query.ready(index)
    started = dict(c.execute("SELECT id, started FROM runs"))
    mine = {r: t for r, t in truth.items() if t[0] == "a:f"}
    logged = [(t[2], started[r], r) for r, t in mine.items() if t[2] is not None]
    for drop in (False, True):  # with the index scalar_tags_value, then a store without it
        if drop:
            c.execute("DROP INDEX scalar_tags_value")
        for lower in (True, False):
            want = min(logged, key=lambda x: ((x[0] if lower else -x[0]), -x[1], -x[2]))  # ties: the newest
            got = pages.best(index, "a:f", "val/loss", lower)
            assert (got["run"], got["value"]) == (want[2], want[0]), (drop, lower)
        assert pages.best(index, "a:f", "no/such", True)["run"] is None
        g = pages.groups(index, "a:f", "opt.lr", "val/loss")
        groups: dict = {}
        for t in mine.values():
            groups.setdefault(t[1].get("opt", {}).get("lr"), []).append(t[2])
        assert g["total"] == len(groups) and [x["value"] for x in g["groups"]] == sorted(groups, key=lambda k: (k is not None, k))
        for x in g["groups"]:
            vals = groups[x["value"]]
            v = [y for y in vals if y is not None]
            assert (x["runs"], x["n"]) == (len(vals), len(v))
            assert x["mean"] == (sum(v) / len(v) if v else None) or math.isclose(x["mean"], sum(v) / len(v))
            assert (x["min"], x["max"]) == ((min(v), max(v)) if v else (None, None))
        assert len(pages.groups(index, "a:f", "opt.lr", "val/loss", limit=2)["groups"]) == 2


def _js_number(s: str) -> float:
    from memolab.tracking.argpages import js_number

    n = js_number(s)
    return math.nan if n is None else n


def _shown(v):  # the page's text of a value that is no number (app.js fmtArg)
    import json

    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _passes(hp: dict, word: str) -> bool:
    """views.js compileFilter's meaning of an argument word, on a run's flattened arguments."""
    import operator
    import re

    name, op, want = re.match(r"^([\w./-]+)(<=|>=|!=|=|<|>)(.+)$", word).groups()
    v = hp.get(name)
    if v is None:  # (absent or null)
        return op == "!="
    a, b = (v, _js_number(want)) if _is_num(v) else (_shown(v), want)
    if op == "=":
        return a == b or _shown(v) == want
    if op == "!=":
        return a != b and _shown(v) != want
    return {"<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}[op](a, b)


def test_a_sort_and_filters_by_arguments_are_those_the_page_made_of_every_run(tmp_store):
    """``pages.window`` sorted by an argument and filtered by argument words (numbers as numbers,
    texts, true/false and lists as the page's texts, nested names, runs without the argument or with
    it null, a value of another kind), page by page, equals the page's own sort and filter over every
    run; with the index of the runs' arguments, and on a store without it (read through JSON)."""
    import json

    from memolab.tracking import argindex, names
    from memolab.tracking.argpages import parse
    from memolab.tracking.sink import END, SCALAR, START, sink_for

    rng = random.Random(11)
    s = sink_for(get_store().index)
    for r in range(1, 301):
        hp: dict = {"opt": rng.choice(["adam", "sgd", "Adam", "rms"]), "flag": rng.choice([True, False]),
                    "cfg": {"optim": {"lr": rng.choice([0.001, 0.01, 0.1])}}, "ids": rng.choice([[1, 2], [3]])}
        k = r % 10
        if k:  # (a run in ten without lr)
            hp["lr"] = rng.choice([0.1, 0.2, 0.5, 1, 1.0, 2, None, 0.05] if k != 7 else ["0.05", "fast"])
        s.q.append((START, r, {"fn": "a:f", "started": float(rng.randrange(100)), "hparams": hp}))
        s.q.append((SCALAR, r, "val/loss", 0, 1.0, rng.random()))
        s.q.append((END, r, "done", 200.0, None))
    s.q.append((START, 999, {"fn": "b:g", "started": 1.0, "hparams": {"lr": 0.1}}))  # another function's
    s.flush()
    index = get_store().index
    c = query.ready(index)
    rows = {i: (st, names.flatten(json.loads(h))) for i, st, h in c.execute("SELECT id, started, hparams FROM runs "
                                                                            "WHERE fn='a:f'")}

    def key(name: str, i: int):
        v = rows[i][1].get(name)
        return (0, v, "") if _is_num(v) else (1, 0, _shown(v))

    def truth(sort: str, desc: bool, words: list[str]) -> list[int]:
        keep = [i for i in rows if all(_passes(rows[i][1], w) for w in words)]
        newest = sorted(keep, key=lambda i: (-rows[i][0], -i))
        if not sort.startswith("a:"):
            return newest if desc else newest[::-1]
        name = sort[2:]
        have = [i for i in newest if rows[i][1].get(name) is not None]
        ordered = sorted(have, key=lambda i: key(name, i))  # (stable: newest first among equal values)
        return (ordered[::-1] if desc else ordered) + [i for i in newest if rows[i][1].get(name) is None]

    cases = [("a:lr", False, []), ("a:lr", True, []), ("a:opt", False, []), ("a:flag", True, []),
             ("a:ids", False, []), ("a:cfg.optim.lr", True, []), ("a:lr", False, ["lr<0.2"]),
             ("a:lr", True, ["lr>=0.2", "lr<2"]), ("started", True, ["lr=1"]), ("started", True, ["lr!=0.1"]),
             ("started", False, ["lr>0.05"]), ("a:opt", True, ["lr<=0.5"]), ("started", True, ["opt>b"]),
             ("started", True, ["opt<=adam"]), ("a:lr", False, ["flag=true"]), ("started", True, ["ids=[1,2]"]),
             ("started", True, ["cfg.optim.lr<0.05", "opt!=sgd"]), ("a:lr", True, ["lr=fast"]),
             ("started", True, ["lr=1e-1"]), ("started", True, ["lr<f"]), ("a:seed", False, [])]
    for indexed in (True, False):
        if not indexed:  # a store read as it is, before its first write by this version
            c.execute("DELETE FROM meta WHERE key = ?", (argindex.MARKER,))
            assert not argindex.available(c)
        for sort, desc, words in cases:
            want = truth(sort, desc, words)
            got, total = [], None
            # (a few of them page by page, across the runs without the argument too)
            size = 29 if (sort, words) in (("a:lr", []), ("a:lr", ["lr<0.2"])) else 400
            for offset in range(0, len(want) + size, size):
                page = pages.window(index, "a:f", limit=size, offset=offset, sort=sort, descending=desc,
                                    args=[parse(w) for w in words])
                total = page["total"]
                got += [r["id"] for r in page["rows"]]
            if not sort.startswith("a:"):  # (equal starts: any order among them)
                assert sorted(got, key=lambda i: (-rows[i][0], -i) if desc else (rows[i][0], i)) == want, (indexed, sort, words)
            else:
                assert got == want, (indexed, sort, desc, words)
            assert total == len(want), (indexed, sort, desc, words)
