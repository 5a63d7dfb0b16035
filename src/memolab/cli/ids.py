"""One id per thing, the same in the dashboard and on the command line.

An evaluation is ``#12`` (``12``, ``e12``); a run is its 52-bit id, or the start of it that tells
it apart from every other run of the store, shown with an ``r`` (``r147562``), as git shortens
commits. The dashboard shows exactly these (``short_length`` is served to it), and every command
that takes an id (``show``, ``tag``, ``note``) takes them back (``resolve``): bare digits are an
evaluation first, then the run of that id, then the one run whose id starts with them.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from .common import PROBLEM, USAGE, CliError

#: the fewest digits of a run id shown (``memolab runs``, the dashboard)
SHORT_MIN = 6


def _has_runs(c: Any) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone() is not None


def short_length(c: Any) -> int:
    """Digits of a run id that tell every run of the store apart (at least ``SHORT_MIN``)."""
    if not _has_runs(c):
        return SHORT_MIN
    ids = sorted(str(i) for (i,) in c.execute("SELECT id FROM runs"))
    n = SHORT_MIN
    for a, b in zip(ids, ids[1:]):
        common = 0
        for x, y in zip(a, b):
            if x != y:
                break
            common += 1
        n = max(n, common + 1)
    return n


def _runs_starting(c: Any, digits: str) -> List[int]:
    if not _has_runs(c):
        return []
    return [i for (i,) in c.execute("SELECT id FROM runs WHERE CAST(id AS TEXT) LIKE ? ORDER BY id LIMIT 6",
                                    (digits + "%",))]


def resolve(store: Any, text: str) -> Tuple[str, int]:
    """``("evaluation", id)`` or ``("run", id)`` for an id as the dashboard and the CLI show it:
    ``12``, ``#12``, ``e12`` (an evaluation), ``r1475626`` or ``run …`` digits (a run, any unique
    start of its id), or bare digits (an evaluation, else that run, else the run starting so)."""
    t = text.strip()
    for prefix in ("run ", "run", "r"):
        if t.lower().startswith(prefix) and t[len(prefix):].strip().rstrip("…").isdigit():
            kind, digits = "run", t[len(prefix):].strip().rstrip("…")
            break
    else:
        kind, digits = "any", t.lstrip("#")
        if t[:1] in ("#", "e") and t.lstrip("#e").isdigit():
            kind, digits = "evaluation", t.lstrip("#e")
    if not digits.isdigit() or len(digits) > 19 or not 0 < int(digits) < 2 ** 63:
        raise CliError(PROBLEM, f"not an evaluation or run id: {text!r} (`memolab ls FUNC` and `memolab runs` list them)")
    n = int(digits)
    c = store.index.conn()
    if kind in ("evaluation", "any"):
        if c.execute("SELECT 1 FROM evaluations WHERE id=?", (n,)).fetchone():
            return "evaluation", n
        if kind == "evaluation":
            raise CliError(PROBLEM, f"no evaluation #{n} in {store.root}")
    if _has_runs(c) and c.execute("SELECT 1 FROM runs WHERE id=?", (n,)).fetchone():
        return "run", n
    found = _runs_starting(c, digits)
    if len(found) > 1:
        listed = ", ".join(str(i) for i in found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(USAGE, f"{digits} is the start of several run ids ({listed}): give more digits")
    if found:
        return "run", found[0]
    raise CliError(PROBLEM, f"no evaluation #{n} (nor run {digits}) in {store.root}")
