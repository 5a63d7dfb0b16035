"""``memolab keep EVAL…`` and ``memolab unkeep EVAL…``: evaluations that gc never drops.

``EVAL`` is an evaluation as ``ls``, ``show`` and the dashboard show it (``#12``, ``12``). The mark
is on the evaluation's key (``store.marks``): ``gc`` (``--older-than``, ``--max-size``) and
``gc --remote`` run on this machine leave a kept result and its blobs alone (the marks are in
this store's index; the team index holds none: team gc run on another machine does not see them).
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
    """What the mark means for the team store, when one is configured: the marks live in this
    store's index, not in the team index, so ``gc --remote`` honours them when run here."""
    if getattr(store, "link", None) is None:
        return None
    return ("`memolab gc --remote` run on this machine " + ("leaves them alone" if keep else "may drop them again")
            + "; team gc run elsewhere does not see this store's marks")


@command("keep", "mark evaluations kept: gc and gc --remote never drop them (@memo(keep=True) marks every one)")
@options(_options)
def cmd_keep(args: argparse.Namespace) -> int:
    return _run(args, True)


@command("unkeep", "take keep marks off evaluations (gc may drop them again)")
@options(_options)
def cmd_unkeep(args: argparse.Namespace) -> int:
    return _run(args, False)
