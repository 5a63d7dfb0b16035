"""Accepting a code change: ``memolab accept FUNC`` and ``f.accept(...)``.

After a miss caused by code alone (a log line added, a variable renamed), the user is shown the
diff that caused it, exactly as ``memolab why`` shows it, and asked. On their word, an accept
is recorded: calls keyed with this code use the evaluations stored under the code the miss was
compared with (``store/accepts.py`` holds the rules and why they are safe; a call follows an
accept in ``call.Call.accepted``). Nothing is ever accepted without that word: on a terminal the
user answers the question, elsewhere ``--yes`` (``yes=True``) must be given, else nothing is
recorded. ``memolab accept FUNC --undo`` takes one back.

What one accept covers: one memoized function's whole code digest, from the code of the
evaluation the miss was compared with to the code of the miss: every dependency whose change
the diff showed, together, and nothing else. Another memoized function whose digest moved with
the same edit needs its own accept; a later edit, a new digest, misses again.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import NotAccepted, swallowed
from ..inputs import expiry
from ..store.accepts import covering, decoded as decoded, summary as summary, who  # noqa: F401 (covering: here for the faces)
from .explain import Explanation, last_code_miss, shown_here

__all__ = ["explain_found", "proposal", "record", "accept_call", "undo", "undo_for", "covering"]


def explain_found(call: Any, row: dict[str, Any]) -> Explanation | None:
    """``explain`` of a call for which ``row`` was found: expired (a miss), or found through an
    accepted change (a hit, saying which accept); None for a plain hit (``explain_key`` says it)."""
    fn = call.memo.symbol
    why = call.expired(row)
    if why is not None:
        return Explanation(fn, False, [why], evaluation=row.get("id"))
    if call.via is None:
        return None
    key, chain = call.via
    bad = call.store.check_entry(key, row)
    if bad is not None:
        return Explanation(fn, False, [f"stored evaluation #{row['id']} of accepted code {key[1][:8]}… cannot be "
                                       f"used: {bad}"], evaluation=row["id"])
    return Explanation(fn, True, [f"stored evaluation #{row['id']}, computed by code {key[1][:8]}…, which this code "
                                  "was accepted as giving the same results as: "
                                  + "; then ".join(summary(a) for a in chain)], evaluation=row["id"])


def proposal(store: Any, fn: str, miss: dict[str, Any]) -> dict[str, Any]:
    """The accept that miss ``miss`` (an ``Explanation.to_dict()``) calls for: its record, less who
    and when. ``NotAccepted`` saying why there is none (a hit, a miss not caused by code alone,
    an evaluation gone since, a ``version=`` bump)."""
    if miss.get("hit"):
        raise NotAccepted(f"{fn}: the call hits ({'; '.join(miss.get('reasons') or [])}): nothing to accept")
    change = miss.get("change")
    if not isinstance(change, dict) or not all(isinstance(change.get(k), str) for k in ("code", "stored", "args",
                                                                                           "schema")):
        reasons = "; ".join(miss.get("reasons") or []) or "no reason recorded"
        raise NotAccepted(f"{fn}: the miss was not caused by code alone ({reasons}): nothing to accept; an accept "
                          "records that new code gives the same results as the code of an evaluation with the same "
                          "arguments")
    salt_now, salt_then = change["code"].partition("+v")[2], change["stored"].partition("+v")[2]
    if salt_now != salt_then:
        raise NotAccepted(f"{fn}: its version= salt changed ({salt_then or None!r} -> {salt_now or None!r}): a "
                          "version bump says results changed on purpose, it is not accepted as the same")
    rows = store.index.evaluations(where="id=?", params=(miss.get("evaluation"),))
    old = rows[0] if rows else None
    if old is None or old["status"] != "done" or (old["fn"], old["code"], old["args"], old["schema"]) != (
            fn, change["stored"], change["args"], change["schema"]):
        raise NotAccepted(f"{fn}: evaluation #{miss.get('evaluation')}, which the miss was compared with, is no "
                          "longer stored as it was: run the call again, then accept its miss")
    try:
        before = json.loads(old.get("snapshot") or "{}").get("deps") or {}
    except (ValueError, AttributeError):
        before = {}
    return {"fn": fn, "schema": change["schema"], "new_code": change["code"], "old_code": change["stored"],
            "deps_before": json.dumps(before, sort_keys=True), "deps_after": json.dumps(change.get("deps") or {},
                                                                                       sort_keys=True),
            "diffs": json.dumps(miss.get("diffs") or {}), "evaluation": old["id"],
            "sources": change.get("sources") or {}}


def existing(store: Any, prop: dict[str, Any]) -> dict[str, Any] | None:
    """The active accept that already records ``prop``, or None."""
    for a in store.index.accepts(prop["fn"], prop["schema"]):
        if a["new_code"] == prop["new_code"] and a["old_code"] == prop["old_code"]:
            return a
    return None


def record(store: Any, prop: dict[str, Any]) -> dict[str, Any]:
    """Record ``prop`` (``proposal``) as accepted by this user on this host, now: the accept's
    record, with ``team`` (what the team store did with it: see ``TeamStore.record_accept``)."""
    user, host = who()
    rec = {k: v for k, v in prop.items() if k != "sources"}
    rec.update(time=expiry.now(), user_name=user, host=host)
    after = decoded(rec, "deps_after")
    texts = {after[sym]: (sym, text) for sym, text in (prop.get("sources") or {}).items()
             if isinstance(after.get(sym), str) and isinstance(text, str)}
    if texts:
        store.index.add_sources(texts)  # the accepted code's text: later diffs can show it
    done = store.record_accept(rec)
    got = store.index.accepts(ids=[done["id"]], active=False)
    return dict(got[0] if got else rec, team=done.get("team"))


def describe(miss: dict[str, Any], shown: str | None = None) -> str:
    """The miss as ``memolab why`` prints it: its reasons and diffs, the function named ``shown``
    (as ``ls`` prints it: ``sweep.py:train``), else as this process's script names it."""
    ex = Explanation.from_dict(miss)
    if shown is None:
        return str(shown_here(ex))
    ex.shown = shown
    return str(ex)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotAccepted(f"refusing to {question} without a terminal to confirm it: pass yes=True")
    try:
        answer = input(f"{question}? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise NotAccepted("not accepted: nothing recorded")


def accept_call(memo: Any, args: Sequence[Any], kwargs: dict[str, Any], yes: bool) -> dict[str, Any]:
    """``MemoFunction.accept`` (see there)."""
    fn = memo.symbol
    if memo.code == "version":
        raise NotAccepted(f"{fn} is keyed by version= alone (@memo(code='version')): a code change never makes it "
                          "miss, so there is nothing to accept")
    try:
        memo.bind(args, kwargs)
        bound = True
    except TypeError:
        if args or kwargs:
            raise
        bound = False  # the function needs arguments: its last recorded miss
    store = memo.store()
    now = memo.code_digest()
    if bound:
        miss = memo.explain(*args, **kwargs).to_dict()
    else:
        miss = last_code_miss(store, fn, now)  # this code's, whatever missed since for other reasons
        if miss is None:
            raise NotAccepted(f"{fn}: no miss recorded: call it (or pass a call's arguments to accept)")
    prop = proposal(store, fn, miss)
    if prop["new_code"] != now:
        raise NotAccepted(f"{fn}: its last recorded miss was of code {prop['new_code'][:8]}…, not of this process's "
                          f"code {now[:8]}…: pass the arguments of a call that misses to accept this code")
    have = existing(store, prop)
    if have is not None:
        return dict(have, team=None)
    print(describe(miss))
    _confirm(f"accept this change: code {prop['new_code'][:8]}… of {fn} gives the same results as code "
             f"{prop['old_code'][:8]}…", yes)
    return record(store, prop)


def undo(store: Any, fn: str, accept_id: int | None = None, new_code: str | None = None) -> list[dict[str, Any]]:
    """Take back accept ``accept_id`` of ``fn``, else those from ``new_code``, else ``fn``'s newest;
    the accepts taken back (each with ``team``: what the team store did). ``NotAccepted`` if none
    is active."""
    refresh(store, fn)
    active = store.index.accepts(fn)
    if accept_id is not None:
        targets = [a for a in active if a["id"] == accept_id]
        if not targets:
            raise NotAccepted(f"{fn} has no active accept #{accept_id} (`memolab accept {fn} --list` lists them)")
    elif new_code is not None:
        targets = [a for a in active if a["new_code"] == new_code]
    else:
        targets = active[-1:]
    if not targets:
        raise NotAccepted(f"{fn}: no active accept to take back")
    user, host = who()
    out = []
    for a in targets:
        done = store.undo_accept(a["id"], f"{user}@{host}")
        got = store.index.accepts(ids=[a["id"]], active=False)
        out.append(dict(got[0] if got else a, team=done.get("team")))
    return out


def refresh(store: Any, fn: str) -> None:
    """Bring this store's copies of ``fn``'s accepts up to date (a team store: from the team
    index, for the current key schema), best effort."""
    from ..hashing import KEY_SCHEMA

    try:
        store.accepts_of(fn, KEY_SCHEMA)
    except Exception:  # a store of any backend (the team's PostgreSQL index included)
        swallowed("acceptance: refresh")


def undo_for(memo: Any, accept_id: int | None) -> list[dict[str, Any]]:
    """``MemoFunction.undo_accept``: this code's accepts (or ``accept_id``) taken back."""
    return undo(memo.store(), memo.symbol, accept_id, None if accept_id is not None else memo.code_digest())


def as_json(a: dict[str, Any]) -> dict[str, Any]:
    """The documented JSON form of an accept (docs/cli.md)."""
    return {"id": a.get("id"), "fn": a.get("fn"), "schema": a.get("schema"), "new_code": a.get("new_code"),
            "old_code": a.get("old_code"), "time": a.get("time"), "user": a.get("user_name"), "host": a.get("host"),
            "deps_before": decoded(a, "deps_before"), "deps_after": decoded(a, "deps_after"),
            "diffs": decoded(a, "diffs"), "evaluation": a.get("evaluation"), "undone": a.get("undone"),
            "undone_by": a.get("undone_by"), "team_id": a.get("team_id"), "origin": a.get("origin"),
            "team": a.get("team")}


