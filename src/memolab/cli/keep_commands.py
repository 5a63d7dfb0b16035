"""``memolab keep EVAL…`` and ``memolab unkeep EVAL…``: evaluations that gc never drops.

``EVAL`` is an evaluation as ``ls``, ``show`` and the dashboard show it (``#12``, ``12``). The mark
is on the evaluation's key (``store.marks``): ``gc`` (``--older-than``, ``--max-size``) and
``gc --remote`` leave a kept result and its blobs alone. With a team store the mark goes to the team
index too (team schema 3, ``team.keeps``), so team gc run on any machine honours it.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..key import Key
from ..store import marks
from . import ids
from .common import OK, PROBLEM, CliError, command, emit_json, json_option, open_store, options


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("evals", nargs="+", metavar="EVAL", help="evaluations (#12), as `ls` and the dashboard show them")
    json_option(p)


def _keys(store: Any, texts: list[str]) -> list[tuple[int, Key]]:
    out = []
    c = store.index.conn()
    for t in texts:
        kind, n = ids.resolve(store, t)
        if kind != "evaluation":
            raise CliError(PROBLEM, f"{t}: a run, not an evaluation; keep marks are on evaluations (#12)")
        row = c.execute("SELECT fn, code, args, schema FROM evaluations WHERE id=?", (n,)).fetchone()
        if row is None:
            raise CliError(PROBLEM, f"no evaluation #{n} in {store.root}")
        out.append((n, Key._make(row)))
    return out


def _run(args: argparse.Namespace, keep: bool) -> int:
    store = open_store(args, write=True)
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise CliError(PROBLEM, f"cannot write to this store: {problem}")
    got = _keys(store, args.evals)
    with store.index.write() as c:
        if keep:
            marks.keep_keys(c, [k for _, k in got], source="cli")
        else:
            marks.unkeep_keys(c, [k for _, k in got])
    team = _team(store, [k for _, k in got], keep)
    if args.json:
        emit_json({"evaluations": [i for i, _ in got], "kept": keep, "team": team})
        return OK
    shown = ", ".join(f"#{i}" for i, _ in got)
    print(f"{shown}: {'kept (gc never drops it)' if keep else 'no longer kept (gc may drop it)'}")
    if team is not None:
        print(f"team store: {team}")
    return OK


def _team(store: Any, keys: list[Key], keep: bool) -> str | None:
    """The mark on the team index too, when a team store is configured (``team.keeps``): team gc
    run on any machine honours it. Unreachable: ``memolab sync`` sends the marks made here."""
    if getattr(store, "link", None) is None:
        return None
    from ..team import keeps
    from ..team.link import Offline

    try:
        if not keeps.supported(store, store.link.attempt):
            return keeps.TEAM_KEEP_NOTE + "; team gc run on this machine honours them"
        if keep:
            keeps.send_marks(store, keys, store.link.attempt)
            return "kept on the team index too: team gc on any machine leaves them alone"
        keeps.unsend_marks(store, keys, store.link.attempt)
        return "no longer kept on the team index (unless another machine's `memolab sync` marks them again)"
    except Offline as e:
        if keep:
            return f"unreachable ({e}): kept here; `memolab sync` marks them on the team index"
        return f"unreachable ({e}): still kept on the team index; run `memolab unkeep` again once it is back"


@command("keep", "mark evaluations kept: gc and gc --remote never drop them (@memo(keep=True) marks every one)")
@options(_options)
def cmd_keep(args: argparse.Namespace) -> int:
    return _run(args, True)


@command("unkeep", "take keep marks off evaluations (gc may drop them again)")
@options(_options)
def cmd_unkeep(args: argparse.Namespace) -> int:
    return _run(args, False)
