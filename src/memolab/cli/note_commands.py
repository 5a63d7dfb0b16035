"""``memolab tag ID TAG…`` and ``memolab note ID TEXT``: tags and notes on a run or an evaluation.

``ID`` is any id the dashboard or ``memolab ls``/``runs`` shows (``#12``, ``r1475626``:
``cli.ids``). Stored in the index's ``annotations`` table (``tracking.notes``); the store is
opened to be written, so an older one is upgraded first (and says so).
"""
from __future__ import annotations

import argparse
from typing import Any

from . import ids
from .common import OK, PROBLEM, CliError, command, emit_json, json_option, open_store, options


def _target(store: Any, text: str) -> dict[str, Any]:
    kind, n = ids.resolve(store, text)
    return {"evaluation": n} if kind == "evaluation" else {"run": n}


def _shown(target: dict[str, Any]) -> str:
    return f"evaluation #{target['evaluation']}" if "evaluation" in target else f"run {target['run']}"


def _writable(args: argparse.Namespace) -> Any:
    store = open_store(args, write=True)
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise CliError(PROBLEM, f"cannot write to this store: {problem}")
    return store


def _tag_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="an evaluation (#12) or a run (r1475626), as `ls`, `runs` and the dashboard show")
    p.add_argument("tags", nargs="*", metavar="TAG", help="tags to add (letters, digits, . _ - : / +)")
    p.add_argument("--remove", action="append", default=[], metavar="TAG", help="a tag to take off (repeatable)")
    json_option(p)


@command("tag", "tag a run or an evaluation (filter by it: runs --tag, tag:NAME in the dashboard)")
@options(_tag_options)
def cmd_tag(args: argparse.Namespace) -> int:
    from ..tracking import notes

    for t in [*args.tags, *args.remove]:
        try:
            notes.check_tag(t)
        except ValueError as e:
            raise CliError(PROBLEM, str(e)) from None
    store = _writable(args)
    target = _target(store, args.id)
    added = [t for t in args.tags if notes.add(store.index, "tag", t, source="cli", **target)]
    removed = [t for t in args.remove if notes.remove(store.index, "tag", t.strip(), **target)]
    now = _marks(store, target)
    if args.json:
        emit_json({**target, "added": added, "removed": removed, "tags": now["run_tags"]})
        return OK
    print(f"{_shown(target)}: tags {', '.join(now['run_tags']) or '(none)'}")
    return OK


def _note_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="an evaluation (#12) or a run (r1475626)")
    p.add_argument("text", nargs="+", help="the note (words are joined with spaces)")
    json_option(p)


@command("note", "add a note to a run or an evaluation (shown by show, runs() and the dashboard)")
@options(_note_options)
def cmd_note(args: argparse.Namespace) -> int:
    from ..tracking import notes

    text = " ".join(args.text)
    try:
        notes.check_note(text)
    except ValueError as e:
        raise CliError(PROBLEM, str(e)) from None
    store = _writable(args)
    target = _target(store, args.id)
    notes.add(store.index, "note", text, source="cli", **target)
    if args.json:
        emit_json({**target, "notes": _marks(store, target)["notes"]})
        return OK
    print(f"{_shown(target)}: note added")
    return OK


def _marks(store: Any, target: dict[str, Any]) -> dict[str, list[Any]]:
    from ..tracking import notes

    c = store.index.conn()
    if "evaluation" in target:
        d = notes.for_evaluations(c, [target["evaluation"]]).get(target["evaluation"])
    else:
        d = notes.for_runs(c, [{"id": target["run"], "eval_id": None}]).get(target["run"])
    m = notes.as_json(d)
    return {"run_tags": m["tags"], "notes": m["notes"]}


def eval_marks(store: Any, eval_id: int, runs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """An evaluation's own tags and notes, and those of the runs that produced it (``show``)."""
    from ..tracking import notes

    c = store.index.conn()
    m = notes.as_json(notes.for_evaluations(c, [eval_id]).get(eval_id))
    tags, got = list(m["tags"]), list(m["notes"])
    seen = {n["id"] for n in got}
    for r in runs:
        tags += [t for t in r.get("run_tags") or [] if t not in tags]
        got += [n for n in r.get("notes") or [] if n["id"] not in seen and not seen.add(n["id"])]  # type: ignore[func-returns-value]
    return {"run_tags": tags, "notes": sorted(got, key=lambda n: (n["time"], n["id"]))}
