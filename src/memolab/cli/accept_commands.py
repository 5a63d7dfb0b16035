"""``memolab accept FUNC``: record that a code change gives the same results (``--undo``: take it back)."""
from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from ..errors import NotAccepted
from .common import (
    OK,
    PROBLEM,
    CliError,
    command,
    confirm,
    emit_json,
    human_age,
    json_option,
    open_store,
    options,
    resolve_function,
    resolve_name,
    writable_store,
)


def _accept_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", help="a function (full symbol or its name)")
    p.add_argument("-y", "--yes", action="store_true",
                   help="accept without asking (required when stdin is not a terminal)")
    p.add_argument("--undo", action="store_true",
                   help="take back the function's newest active accept (or the one given with --id): a miss again")
    p.add_argument("--id", type=int, metavar="N", help="with --undo: the accept to take back")
    p.add_argument("--list", action="store_true", help="list the function's accepts (--all: taken back ones too)")
    p.add_argument("--all", action="store_true", help="with --list: accepts taken back too")
    json_option(p)


def _team_note(a: dict[str, Any]) -> str:
    team = a.get("team")
    if team is None:
        return ""
    return {"published": "; recorded on the team store too: other machines follow it",
            "undone": "; taken back on the team store too",
            "offline": "; the team store is unreachable: recorded here only for now (`memolab sync` sends it)",
            "old-schema": "; the team index predates accepts: recorded here only (`memolab remote upgrade` lets the "
                          "team share them)",
            "refused": "; not sent to the team store (this machine may not publish there: see `memolab remote "
                       "status`)"}.get(team, f"; team store: {team}")


@command("accept", "record that a function's code change gives the same results: its last miss (caused by code "
                   "alone) hits the stored evaluations again (--undo: take it back)")
@options(_accept_options)
def cmd_accept(args: argparse.Namespace) -> int:
    from ..calls import acceptance
    from ..calls.explain import last_code_miss

    if args.list:
        store = open_store(args)
        fn = resolve_function(store, args.func)
        acceptance.refresh(store, fn)
        return _list(store, fn, args)
    if args.id is not None and not args.undo:
        raise CliError(2, "--id goes with --undo (the accept to take back)")
    store = writable_store(args)
    r = resolve_name(store, args.func)
    fn = str(r.fn)
    shown = str(r.label)  # as `ls` prints it (sweep.py:train), not __main__:train
    try:
        if args.undo:
            undone = acceptance.undo(store, fn, args.id)
            if args.json:
                emit_json({"fn": fn, "undone": [acceptance.as_json(a) for a in undone]})
            else:
                for a in undone:
                    print(f"taken back: {acceptance.summary(a)}{_team_note(a)}; calls of this code miss again")
            return OK
        # the newest miss caused by code alone, not the newest miss: on a cluster any worker's
        # call with new arguments is recorded after it
        miss = last_code_miss(store, fn)
        if miss is None:
            raise NotAccepted(f"{shown}: no miss recorded: nothing to accept")
        t = miss.get("time")
        prop = acceptance.proposal(store, fn, miss)
    except NotAccepted as e:
        raise CliError(PROBLEM, str(e)) from None
    have = acceptance.existing(store, prop)
    if have is not None:
        if args.json:
            emit_json({"fn": fn, "accepted": acceptance.as_json(have), "new": False})
        else:
            print(f"already accepted: {acceptance.summary(have)}")
        return OK
    if not args.json:
        when = f" {human_age(t)} ({_dt.datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S})" if t else ""
        print(f"last miss{when}:")
        print(acceptance.describe(miss, shown))
    if not confirm(args, f"accept this change: code {prop['new_code'][:8]}… of {shown} gives the same results as code "
                         f"{prop['old_code'][:8]}… (evaluation #{prop['evaluation']})"):
        print("not accepted: nothing recorded")
        return PROBLEM
    rec = acceptance.record(store, prop)
    if args.json:
        emit_json({"fn": fn, "accepted": acceptance.as_json(rec), "new": True})
    else:
        print(f"accepted: {acceptance.summary(rec)}{_team_note(rec)}")
        print(f"  calls of {shown} with this code now use the results stored under code {prop['old_code'][:8]}…; "
              f"`memolab accept {args.func} --undo` takes it back")
    return OK


def _list(store: Any, fn: str, args: argparse.Namespace) -> int:
    from ..calls import acceptance

    accepts: list[dict[str, Any]] = store.index.accepts(fn, active=not args.all)
    if args.json:
        emit_json({"fn": fn, "accepts": [acceptance.as_json(a) for a in accepts]})
        return OK
    if not accepts:
        print(f"{fn}: no {'' if args.all else 'active '}accepts")
        return OK
    print(fn)
    for a in accepts:
        print(f"  {acceptance.summary(a)}")
        for sym in sorted(acceptance.decoded(a, "diffs")):
            print(f"    changed: {sym}")
    return OK
