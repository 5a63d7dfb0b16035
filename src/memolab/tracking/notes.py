"""Notes and tags on runs and evaluations (the index's ``annotations`` table, store schema 5).

A *tag* is a short word (``baseline``, ``paper-fig-3``) a run or an evaluation carries once; a
*note* is free text, kept with the time it was written, in order. Both come from
``memolab.log.note()``/``memolab.log.tag()`` inside a computation (queued and written by the
sink with the run's logs), from ``memolab tag ID TAG`` / ``memolab note ID TEXT``, or from the
dashboard. A run shows its own and its evaluation's (``for_runs``), so a tag put on evaluation
#12 marks every run that produced it.

They live as long as what they annotate: ``tracking.retention`` deletes a run's with the run,
and an evaluation's once the evaluation is gone. A store an older memolab wrote, read by a
command that only reads it, has none (the table is a temporary empty one there: ``store.schema
.read_shims``); writing one needs a store opened to be written (which migrates it).
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..store.inlist import chunks
from ..store.schema import has_table

__all__ = ["Note", "TAG_RE", "check_tag", "check_note", "add", "remove", "for_runs", "for_evaluations",
           "runs_tagged", "delete_runs", "purge_evaluations"]

#: a tag: letters, digits and ``. _ - : / +``, 1 to 64 characters, no spaces (``tag:baseline`` filters by it)
TAG_RE = re.compile(r"[\w.:/+-]{1,64}")
NOTE_MAX = 10_000
KINDS = ("note", "tag")


class Note(NamedTuple):
    """One note: its text, when it was written (Unix seconds), and who wrote it
    (``log``: ``memolab.log.note``; ``cli``; ``dashboard``)."""

    text: str
    time: float
    source: str | None
    id: int


def check_tag(tag: Any, where: str = "tag") -> str:
    if not isinstance(tag, str):
        raise TypeError(f"{where}: a tag must be a str, got {type(tag).__qualname__}")
    t = tag.strip()
    if not TAG_RE.fullmatch(t):
        raise ValueError(f"{where}: {tag!r} is not a tag (1 to 64 letters, digits or . _ - : / +, no spaces)")
    return t


def check_note(text: Any, where: str = "note") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{where}: a note must be a str, got {type(text).__qualname__}")
    t = text.strip()
    if not t:
        raise ValueError(f"{where}: the note is empty")
    return t if len(t) <= NOTE_MAX else t[: NOTE_MAX - 1] + "…"


def insert(c: Any, kind: str, text: str, run: int | None = None, evaluation: int | None = None,
           when: float | None = None, source: str | None = None) -> None:
    """Add inside the caller's write transaction (the sink's, ``add``'s); a tag already there stays once."""
    c.execute("INSERT OR IGNORE INTO annotations(run, evaluation, kind, text, time, source) VALUES (?,?,?,?,?,?)",
              (run, evaluation, kind, text, time.time() if when is None else when, source))


def add(index: Any, kind: str, text: str, run: int | None = None, evaluation: int | None = None,
        source: str | None = None) -> bool:
    """Add a note or a tag to one run or one evaluation (exactly one of them); False when the tag was
    there already."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if (run is None) == (evaluation is None):
        raise ValueError("annotate one run or one evaluation")
    text = check_tag(text) if kind == "tag" else check_note(text)
    with index.write() as c:
        before = c.total_changes
        insert(c, kind, text, run, evaluation, source=source)
        return c.total_changes > before


def remove(index: Any, kind: str, text: str | None = None, run: int | None = None,
           evaluation: int | None = None, note_id: int | None = None) -> int:
    """Remove a tag (by its text) or a note (by its id) of a run or an evaluation; how many went."""
    with index.write() as c:
        before = c.total_changes
        if note_id is not None:
            c.execute("DELETE FROM annotations WHERE id=? AND kind=?", (note_id, kind))
        else:
            c.execute("DELETE FROM annotations WHERE kind=? AND text=? AND run IS ? AND evaluation IS ?",
                      (kind, text, run, evaluation))
        return c.total_changes - before


def _rows(c: Any, column: str, ids: Sequence[int]) -> Iterable[tuple]:
    ids = list(ids)
    for q, part in chunks(ids):
        yield from c.execute(f"SELECT {column}, kind, text, time, source, id FROM annotations WHERE {column} IN "
                             f"({q}) ORDER BY time, id", part)


def _collect(rows: Iterable[tuple]) -> dict[int, dict[str, list]]:
    out: dict[int, dict[str, list]] = {}
    for owner, kind, text, when, source, aid in rows:
        d = out.setdefault(owner, {"tags": [], "notes": []})
        if kind == "tag":
            if text not in d["tags"]:
                d["tags"].append(text)
        else:
            d["notes"].append(Note(text, when, source, aid))
    return out


def for_evaluations(c: Any, eval_ids: Sequence[int]) -> dict[int, dict[str, list]]:
    """eval id -> {"tags": [...], "notes": [Note, ...]} (only those that have any)."""
    if not eval_ids or not has_table(c, "annotations"):
        return {}
    return _collect(_rows(c, "evaluation", eval_ids))


def for_runs(c: Any, runs: Sequence[dict[str, Any]]) -> dict[Any, dict[str, list]]:
    """run id -> {"tags", "notes"}: a run's own and its stored evaluation's, for rows of ``query.runs``
    (a row without a run, ``"e12"``, gets its evaluation's)."""
    if not runs or not has_table(c, "annotations"):
        return {}
    own = _collect(_rows(c, "run", [r["id"] for r in runs if isinstance(r["id"], int)]))
    evs = _collect(_rows(c, "evaluation", sorted({r["eval_id"] for r in runs if r.get("eval_id") and r.get("stored")})))
    out: dict[Any, dict[str, list]] = {}
    for r in runs:
        mine = own.get(r["id"]) if isinstance(r["id"], int) else None
        ev = evs.get(r["eval_id"]) if r.get("eval_id") and r.get("stored") else None
        if not mine and not ev:
            continue
        tags = list((ev or {}).get("tags", []))
        tags += [t for t in (mine or {}).get("tags", []) if t not in tags]
        notes = sorted([*(ev or {}).get("notes", []), *(mine or {}).get("notes", [])], key=lambda n: (n.time, n.id))
        out[r["id"]] = {"tags": tags, "notes": notes}
    return out


def runs_tagged(c: Any, tag: str) -> dict[str, set]:
    """{"runs": run ids, "evaluations": eval ids} carrying ``tag``."""
    out: dict[str, set] = {"runs": set(), "evaluations": set()}
    if not has_table(c, "annotations"):
        return out
    for run, ev in c.execute("SELECT run, evaluation FROM annotations WHERE kind='tag' AND text=?", (tag,)):
        if run is not None:
            out["runs"].add(run)
        if ev is not None:
            out["evaluations"].add(ev)
    return out


def delete_runs(c: Any, run_ids: list[int]) -> None:
    """Inside the caller's write transaction: the annotations of runs being deleted."""
    if not has_table(c, "annotations"):
        return
    for q, part in chunks(run_ids):
        c.execute(f"DELETE FROM annotations WHERE run IN ({q})", part)


def purge_evaluations(c: Any) -> int:
    """Inside the caller's write transaction: the annotations of evaluations no longer stored."""
    if not has_table(c, "annotations"):
        return 0
    before = c.total_changes
    c.execute("DELETE FROM annotations WHERE evaluation IS NOT NULL AND evaluation NOT IN (SELECT id FROM evaluations)")
    return c.total_changes - before


def as_json(d: dict[str, list] | None) -> dict[str, Any]:
    """``{"tags": [...], "notes": [{"text", "time", "source", "id"}]}`` for the API and ``--json``."""
    d = d or {}
    return {"tags": list(d.get("tags", [])), "notes": [n._asdict() for n in d.get("notes", [])]}
