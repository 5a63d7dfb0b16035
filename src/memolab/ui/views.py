"""What the dashboard's run page shows, and the notes and tags it writes.

``run_page`` gathers one run: its status (a failed run's error, traceback and output tail), its
arguments (typed summaries: ``TensorDataset: 8,000 × 16``), its result's summary, the tags it
logged, its notes and tags, its parent and child runs, and its lineage: the evaluations its
evaluation was made from and those made from it (``store/edges.py``, as ``memolab show`` and the
Pipeline tab). ``annotate`` is the page's one write: a note or a tag added or removed.
"""
from __future__ import annotations

from typing import Any

from ..key import key_of
from ..settings.text import mask_args
from ..store import edges, marks
from ..tracking import notes, query


class NotFound(KeyError):
    pass


def run_page(index: Any, run_id: int) -> dict[str, Any]:
    rows = query.runs(index, ids=[run_id])
    if not rows:
        raise NotFound(f"no run {run_id}")
    # labelled as among its function's runs (the label says how it differs from them)
    r = query.labelled(index, rows)[0]
    c = query.ready(index)
    out: dict[str, Any] = {k: r.get(k) for k in (
        "id", "fn", "name", "label", "status", "started", "finished", "duration", "code", "parent", "eval_id",
        "stored", "hits", "size", "result", "error", "script", "host", "pid", "hparams", "metrics", "run_tags", "notes")}
    out.update(query.failure(index, run_id))
    out["logged"] = query.tags(index, [run_id])
    out["children"] = [{"id": i, "name": n, "status": s} for i, n, s in c.execute(
        "SELECT id, name, status FROM runs WHERE parent=? ORDER BY started", (run_id,))]
    out["evaluation"] = None
    out["lineage"] = None
    if r.get("stored") and r.get("eval_id"):
        ev = index.evaluations(where="id=?", params=(r["eval_id"],), limit=1)
        if ev:
            e = ev[0]
            snap = edges.recorded_snapshot(e)
            args = snap.get("args") if isinstance(snap.get("args"), dict) else {}
            out["evaluation"] = {
                "id": e["id"], "hits": e["hits"], "size": e["size"], "finished": e["finished"],
                "duration": e["duration"], "code": e["code"],
                "arguments": {k: v[1] for k, v in mask_args(args).items()  # type: ignore[arg-type]  # a dict (checked)
                              if isinstance(v, list) and len(v) > 1},
                "result": snap.get("result_summary") or snap.get("result"),
                "deps": sorted(snap["deps"]) if isinstance(snap.get("deps"), dict) else [],
            }
            marks = notes.as_json(notes.for_evaluations(c, [e["id"]]).get(e["id"]))
            out["evaluation"]["run_tags"], out["evaluation"]["notes"] = marks["tags"], marks["notes"]
            out["lineage"] = {"inputs": edges.inputs_of(index, e),
                              "used_by": edges.used_by(index, key_of(e))}
    return out


class Refused(Exception):
    """A write the store cannot take (read-only, an older schema only read): said to the page as 409."""


def annotate(index: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``{"run" | "evaluation": id, "kind": "tag" | "note", "text", "op": "add" | "remove", "note_id"}``."""
    if getattr(index, "read_only", False):
        raise Refused("this store is open read-only (written by an older memolab, or read-only here): "
                      "`memolab upgrade` makes notes and tags writable")
    kind, op = body.get("kind"), body.get("op", "add")
    if kind not in notes.KINDS or op not in ("add", "remove"):
        raise ValueError("kind must be tag or note, op add or remove")
    target: dict[str, int] = {}
    for key in ("run", "evaluation"):
        v = body.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2 ** 63:
                raise ValueError(f"{key} must be an id")
            target[key] = v
    if len(target) != 1:
        raise ValueError("name one run or one evaluation")
    c = query.ready(index)
    if "run" in target and not c.execute("SELECT 1 FROM runs WHERE id=?", (target["run"],)).fetchone():
        raise NotFound(f"no run {target['run']}")
    if "evaluation" in target and not c.execute("SELECT 1 FROM evaluations WHERE id=?",
                                                 (target["evaluation"],)).fetchone():
        raise NotFound(f"no evaluation #{target['evaluation']}")
    text = body.get("text")
    if op == "add":
        notes.add(index, kind, text, source="dashboard", **target)  # type: ignore[arg-type]  # checked by notes.add
    elif kind == "note":
        note_id = body.get("note_id")
        if not isinstance(note_id, int) or isinstance(note_id, bool):
            raise ValueError("note_id must be the id of the note to remove")
        notes.remove(index, "note", note_id=note_id)
    else:
        notes.remove(index, "tag", notes.check_tag(text), **target)
    if "evaluation" in target:
        got = notes.for_evaluations(c, [target["evaluation"]]).get(target["evaluation"])
    else:
        got = notes.for_runs(c, [{"id": target["run"], "eval_id": None}]).get(target["run"])
    return notes.as_json(got)


def runs_of(index: Any, fn: str | None, script: str | None) -> list[dict[str, Any]]:
    """``/api/runs``: a function's runs, of one script when ``script`` is given (``""``: of none);
    ``kept``: its evaluation is kept (gc never drops it: ``store.marks``)."""
    rows = query.runs(index, fn, script=script)
    kept = marks.kept_ids(index.conn(), [r["eval_id"] for r in rows if r.get("eval_id") and r.get("stored")])
    for r in rows:
        r["kept"] = r.get("eval_id") in kept
    return rows
