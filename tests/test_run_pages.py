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
