"""Why did a call miss? Compare a key with the closest stored evaluation.

The closest evaluation is, in order of preference: one with the same arguments
(so only code changed), one with the same code (so only arguments changed),
else the most recent one of the function. Each evaluation's snapshot holds
per-argument digests and short reprs, and the digest of every code symbol it
depended on; the sources table keeps old source so we can show a diff.
"""
from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..errors import swallowed
from ..key import Key, key_of
from ..settings.text import mask_args
from ..store import edges as store_edges
from .hints import rng_reason

if TYPE_CHECKING:
    from ..codegraph import CodeVersion
    from ..store import Store


@dataclass
class Explanation:
    fn: str
    hit: bool
    #: one line per reason, most important first
    reasons: list[str] = field(default_factory=list)
    #: unified diffs of changed code, symbol -> diff text
    diffs: dict[str, str] = field(default_factory=dict)
    evaluation: int | None = None
    #: a miss caused by code alone (evaluation #``evaluation`` has the same arguments and key
    #: schema): what ``memolab accept`` records: ``code`` (this code's digest), ``stored`` (the
    #: evaluation's), ``args``, ``schema``, ``deps`` (this code's dependency digests) and
    #: ``sources`` (this code's text of each changed dependency)
    change: dict[str, Any] | None = None
    #: the function as ``memolab ls`` prints it (``sweep.py:train``), when it is not ``fn``
    shown: str | None = None

    def __bool__(self) -> bool:
        return self.hit

    def __str__(self) -> str:
        head = f"{self.shown or self.fn}: {'hit' if self.hit else 'miss'}"
        lines = [head] + [f"  - {r}" for r in self.reasons]
        for sym, diff in self.diffs.items():
            lines.append(f"  diff of {sym}:")
            lines.extend("    " + ln for ln in diff.rstrip("\n").splitlines())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """In a notebook: hit or miss, the reasons, and each code diff rendered."""
        from ..settings import hooks

        return cast(str, hooks.resolve(hooks.UPWARD["explanation_html"])(self))

    def to_dict(self) -> dict[str, Any]:
        out = {"fn": self.fn, "hit": self.hit, "reasons": self.reasons, "diffs": self.diffs, "evaluation": self.evaluation}
        if self.change is not None:
            out["change"] = self.change
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Explanation:
        change = d.get("change")
        return cls(d["fn"], d["hit"], list(d.get("reasons", [])), dict(d.get("diffs", {})), d.get("evaluation"),
                   change if isinstance(change, dict) else None)


def _when(t: float | None) -> str:
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "?"


def _own_script(fn: str) -> str | None:
    """The script whose evaluations a miss of ``fn`` is compared with: this process's script for
    a ``__main__`` function (another script defining a function of the same name is not an
    earlier version of it), else None (any evaluation)."""
    if not fn.startswith("__main__:"):
        return None
    from ..store.process import script_path

    return script_path()


def _closest(store: Store, key: Key, script: str | None = None) -> dict[str, Any] | None:
    fn, code, args, schema = key
    idx = store.index
    nearest = getattr(idx, "nearest", None)
    if nearest is not None:  # the SQLite index: one statement for the three tries below
        return nearest(key, script=script)
    for where, params in (("args=? AND schema=?", (args, schema)), ("code=? AND schema=?", (code, schema)), ("1", ())):
        rows = idx.evaluations(fn, where=where + " AND status='done'", params=params, limit=1)
        if rows:
            return rows[0]
    return None


def _diff(old: str, new: str, sym: str) -> str:
    import difflib  # only a miss with changed code needs it

    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{sym} (stored)", f"{sym} (now)", n=2))


def explain_key(store: Store, key: Key, args: dict[str, list[str]], cv: CodeVersion, forced: bool = False,
                missing: bool = False, inputs: list[dict[str, str]] | None = None) -> Explanation:
    """``explained`` (below), the function named as ``memolab ls`` names it: ``sweep.py:train`` for a
    function of this process's script (``__main__:train`` in a notebook, which has none)."""
    return shown_here(explained(store, key, args, cv, forced, missing, inputs))


def shown_here(ex: Explanation) -> Explanation:
    """``ex`` with ``shown`` set for a function of this process's script (``sweep.py:train``)."""
    script = _own_script(ex.fn)
    if script is not None:
        import os

        ex.shown = f"{os.path.basename(script)}:{ex.fn.split(':', 1)[1]}"
    return ex


def explained(store: Store, key: Key, args: dict[str, list[str]], cv: CodeVersion, forced: bool = False,
              missing: bool = False, inputs: list[dict[str, str]] | None = None) -> Explanation:
    """``missing``: the caller has just looked the key up and found no usable row. ``inputs``: the
    call's input edges (``upstream.input_edges``): an argument now made by another upstream
    evaluation is named, with why that one differs."""
    fn, code, _args, schema = key
    row = None if missing else store.index.lookup(key)
    if row is not None and not forced:
        bad = store.check_entry(key, row)
        if bad is not None:
            return Explanation(fn, False, [f"stored evaluation #{row['id']} cannot be used: {bad}"], evaluation=row["id"])
        return Explanation(fn, True, [f"stored evaluation #{row['id']} from {_when(row['finished'])} "
                                      f"(computed in {row['duration']:.3g}s, {row['hits']} earlier hits)"], evaluation=row["id"])
    ex = Explanation(fn, False)
    if forced:
        ex.reasons.append("recomputation forced with .fresh()")
    # The lookup that found no usable row may have seen that the key has no row at
    # all (the common miss): then there is no row out of use to read.
    absent = missing and getattr(store.index, "known_absent", None) is not None and store.index.known_absent(key)
    if row is None and not absent:
        # Same key, taken out of use on load (code it refers to changed, a refused signature, damage).
        dead = store.index.evaluations(fn, where="code=? AND args=? AND schema=? AND status!='done'",
                                       params=(code, _args, schema), limit=1)
        if dead and dead[0].get("reason"):
            ex.evaluation = dead[0]["id"]
            ex.reasons.append(f"stored evaluation #{dead[0]['id']} was not used: {dead[0]['reason']}")
            return ex
    script = _own_script(fn)
    old = _closest(store, key, script)
    if old is None and script is not None and _other_script(store, ex, key, script):
        return ex
    _against(store, ex, old, key, args, cv.deps, cv.sources.get, cv.sensitivity, row is None, inputs)
    return ex


def _other_script(store: Store, ex: Explanation, key: Key, script: str, before: int | None = None) -> bool:
    """A ``__main__`` function whose stored evaluations all came from other scripts: say so, and
    compare with none of them (another file's ``train`` is not an earlier version of this one's).
    False if there are none either."""
    import os

    nearest = getattr(store.index, "nearest", None)
    other = nearest(key, before=before) if nearest is not None else None
    if other is None:
        return False
    try:
        r = store.index.conn().execute("SELECT script FROM runs WHERE eval_id=? AND script IS NOT NULL LIMIT 1",
                                       (other["id"],)).fetchone()
    except sqlite3.Error:
        r = None
    name = key[0].split(":", 1)[1]
    ex.reasons.append(f"no evaluation of `{name}` from {os.path.basename(script)} is stored yet ({script}); "
                      f"evaluation #{other['id']} came from {r[0] if r else 'another script'}, another script that "
                      f"defines `{name}`: not compared")
    return True


def _against(store: Store, ex: Explanation, old: dict[str, Any] | None, key: Key, args: dict[str, list[str]],
             deps: dict[str, str] | None, source: Callable[[str], str | None], sensitivity: str,
             unusable: bool, inputs: list[dict[str, str]] | None = None) -> None:
    """The reasons ``key`` (its argument snapshot ``args``, code ``deps``, input edges ``inputs``)
    differs from the stored evaluation ``old``; ``source(symbol)``: the code's text now, for diffs."""
    fn, code, _args, schema = key
    if old is None:
        from .samecode import note

        same = note(store, key, deps)  # the same code stored under another module's name
        ex.reasons.append("no stored evaluation of this function yet" + (f"; {same}" if same else ""))
        return
    ex.evaluation = old["id"]
    snap = json.loads(old["snapshot"] or "{}")
    if isinstance(snap.get("args"), dict):
        snap["args"] = mask_args(snap["args"])  # (an older memolab's rows hold secrets unmasked)
    versions = _memolab_versions(old)
    if old["schema"] != schema:
        # Keys of another key schema differ whatever the code and arguments: the digests of both
        # were made by other rules, so they are compared by what the user wrote (source texts,
        # argument reprs), never by digest, and only a difference there is the user's.
        ex.reasons.append(f"memolab's key schema changed: evaluation #{old['id']} was stored under key schema "
                          f"{old['schema']} ({versions[0]}), this memolab ({versions[1]}) keys calls with {schema}; "
                          "every result stored before the upgrade is computed once more (not a change of your code "
                          "or arguments)")
        if old["code"] != code and deps is not None:
            _code_reasons(store, ex, snap, deps, source, sensitivity, old["code"], code, by_source=True)
        if old["args"] != _args:
            ex.reasons.extend(r for r in _arg_reasons(snap.get("args", {}), args) if "same repr" not in r
                              and r != "new arguments")
        return
    if old["code"] != code:
        if deps is None:
            ex.reasons.append("code changed (which code is no longer known: no evaluation of the new code is stored)")
        else:
            _code_reasons(store, ex, snap, deps, source, sensitivity, old["code"], code,
                          memolab=versions if versions[0] != versions[1] else None)
    if old["args"] != _args:
        try:
            told = _upstream_reasons(store, ex, old, snap.get("args", {}), args, inputs, sensitivity)
        except (sqlite3.Error, ValueError, TypeError, KeyError, AttributeError):
            told = frozenset()  # lineage explains, it never stops an explanation
        why = snap.get("state_why") or {}
        ex.reasons.extend(_told_why(r, why) for r in _arg_reasons(snap.get("args", {}), args, told))
    if unusable and old["args"] == _args and old["code"] == code and old["schema"] == schema:
        ex.reasons.append(f"stored evaluation #{old['id']} is damaged or was removed")
    if old["args"] == _args and old["schema"] == schema and old["code"] != code and deps is not None:
        # a miss caused by code alone: what `memolab accept` needs to record it as giving the same results
        ex.change = {"code": code, "stored": old["code"], "args": _args, "schema": schema, "deps": dict(deps),
                     "sources": {sym: text for sym in ex.diffs if (text := source(sym)) is not None}}
        _taken_back(store, ex, fn, code)


def _taken_back(store: Store, ex: Explanation, fn: str, code: str) -> None:
    """Say so when this code's change was accepted once and the accept was taken back."""
    accepts = getattr(store.index, "accepts", None)
    if accepts is None:
        return
    try:
        gone = [a for a in accepts(fn, active=False) if a["new_code"] == code and a.get("undone")]
    except (sqlite3.Error, OSError):  # the local index (a NoStore's raises StoreUnavailable): advisory
        swallowed("explain: _taken_back")
        return  # advisory
    if gone:
        from ..store.accepts import summary

        ex.reasons.append(f"this code's change was accepted, then taken back: {summary(gone[-1])}")


def _memolab_versions(old: dict[str, Any]) -> tuple[str, str]:
    """("memolab X", "memolab Y"): the memolab that stored ``old`` (its ``versions``) and this one."""
    from .._version import __version__

    try:
        stored = json.loads(old.get("versions") or "{}").get("memolab")
    except (ValueError, AttributeError):
        stored = None
    return (f"memolab {stored}" if stored else "an older memolab"), f"memolab {__version__}"


def _code_reasons(store: Store, ex: Explanation, snap: dict[str, Any], new_deps: dict[str, str],
                  source: Callable[[str], str | None], sens: str, old_code: str, new_code: str,
                  by_source: bool = False, memolab: tuple[str, str] | None = None) -> None:
    """``by_source``: the digests were made by other rules (another key schema): a dependency counts
    as changed only where its source text is known to differ. ``memolab``: (stored, now) when
    another memolab stored ``old``: a digest that changed under an unchanged source text is said
    to be that, not an edit."""
    old_deps: dict[str, str] = snap.get("deps", {})
    changed = False
    for sym in sorted(set(old_deps) | set(new_deps)):
        a, b = old_deps.get(sym), new_deps.get(sym)
        if a == b:
            continue
        if by_source and (a is None or b is None or sym.startswith(("pkg:", "python:"))):
            continue  # what a new memolab counts as a dependency may differ too: only edits are told
        changed = True
        if a is None:
            ex.reasons.append(f"new dependency `{sym}`")
        elif b is None:
            ex.reasons.append(f"dependency `{sym}` removed")
        elif sym.startswith("pkg:") or sym.startswith("python:"):
            # full versions are recorded; only the part the sensitivity keeps can cause a miss
            from ..codegraph.origins import truncate

            if truncate(a, sens) != truncate(b, sens):
                ex.reasons.append(f"{sym[sym.index(':') + 1:]} {a} -> {b}")
        else:
            old_src = store.index.source(a)
            new_src = source(sym)
            if old_src is not None and new_src is not None and old_src != new_src:
                ex.reasons.append(f"`{sym}` changed")
                ex.diffs[sym] = _diff(old_src, new_src, sym)
            elif by_source:
                continue  # not known to differ: the digest's rules did
            elif old_src is not None and old_src == new_src and memolab is not None:
                ex.reasons.append(f"`{sym}`: its source is unchanged, its digest is not: {memolab[0]} stored it, "
                                  f"{memolab[1]} digests code by other rules (not an edit of yours)")
            else:
                ex.reasons.append(f"`{sym}` changed")
    old_v = snap.get("version")
    new_v = new_code.partition("+v")[2] or None
    if old_v != new_v:
        changed = True
        ex.reasons.append(f"version salt changed: {old_v!r} -> {new_v!r}")
    if not changed and not by_source:
        ex.reasons.append("code digest changed")


def _arg_reasons(old: dict[str, list[str]], new: dict[str, list[str]], told: frozenset = frozenset()) -> list[str]:
    """``told``: arguments already explained (by the upstream evaluation they now come from)."""
    out = []
    for name in list(new) + [n for n in old if n not in new]:
        a, b = old.get(name), new.get(name)
        if name in told:
            continue
        if a is None:
            out.append(f"new argument {name} = {b[1]}")  # type: ignore[index]  # not in old: in new
        elif b is None:
            out.append(f"argument {name} no longer passed (was {a[1]})")
        elif a[0] != b[0]:
            if a[1] != b[1]:
                out.append(rng_reason(name, a[1], b[1]) or f"new arguments: {name} {a[1]} -> {b[1]}")
            else:
                out.append(f"new arguments: {name} changed (same repr {b[1]}, different content)")
    return out or ([] if told else ["new arguments"])


def _told_why(reason: str, why: dict[str, str]) -> str:
    """A changed generator state's line, with why the stored evaluation depended on it."""
    for name, text in why.items():
        if reason.startswith(f"new arguments: {name} "):
            return f"{reason} — {text}"
        if f" {name} " in reason and reason.startswith("the global random generator "):
            # (``hints.rng_reason``'s general remedies) the stored evaluation's own reason is the more
            # precise one, and goes first: a cut miss line still shows it
            return f"{text}; {reason}"
    return reason


def _short(fn: str) -> str:
    """``prepare`` for ``pkg.data:prepare``, ``Trainer.fit`` for a method (a function defined in
    another function: its own name)."""
    return fn.rsplit(":", 1)[-1].rsplit("<locals>.", 1)[-1]


def _argument_of(path: str, names: Any) -> str | None:
    """The argument ``path`` (``ds``, ``loader.dataset``, ``data['X']``) is inside, if one of ``names``."""
    for n in sorted(names, key=len, reverse=True):
        if path == n or path.startswith((n + ".", n + "[")):
            return n
    return None


def _upstream_reasons(store: Store, ex: Explanation, old: dict[str, Any], old_args: dict[str, list[str]],
                      new_args: dict[str, list[str]], inputs: list[dict[str, str]] | None,
                      sensitivity: str) -> frozenset:
    """Arguments that changed because another upstream evaluation made them: "argument `ds` now
    comes from `prepare` #5 (was #3: `prepare`'s code changed — diff below)", with that code's
    diff in ``ex.diffs``. Returns the arguments so explained."""
    if not inputs:
        return frozenset()
    changed = {n for n in new_args if n in old_args and old_args[n][0] != new_args[n][0]}
    before = {e["path"]: e["key"] for e in store_edges.recorded_inputs(old)}
    # (an edge to another store's evaluation cannot be compared with this store's rows)
    now = {e["path"]: key_of(e) for e in inputs if "store" not in e}
    told = set()
    for path in sorted(now):
        arg = _argument_of(path, changed)
        if arg is None or before.get(path) == now[path]:
            continue
        was = before.get(path)
        if was is None:
            was = next((k for p, k in before.items() if _argument_of(p, {arg}) and k[0] == now[path][0]), None)
        found = store_edges.resolve(store.index, [now[path]] + ([was] if was else []))
        new_id = found.get(now[path], (None,))[0]
        here = f"`{_short(now[path][0])}` #{new_id}" if new_id else f"`{_short(now[path][0])}`"
        if was is None:
            # (the stored evaluation recorded no input there: none, or a memolab before lineage
            # stored it; which, nobody can say: its arguments' change is told as usual)
            ex.reasons.append(f"argument `{path}` now comes from {here}")
            continue
        else:
            old_id = found.get(was, (None,))[0]
            then = f"#{old_id}" if old_id else "an evaluation no longer stored"
            if was[0] != now[path][0]:
                then = f"`{_short(was[0])}` {then}"
            why = _upstream_change(store, ex, was, now[path], found, sensitivity)
            ex.reasons.append(f"argument `{path}` now comes from {here} (was {then}{': ' + why if why else ''})")
        told.add(arg)
    return frozenset(told)


def _upstream_change(store: Store, ex: Explanation, was: Key, now: Key,
                     found: dict[Any, tuple[int, str]], sensitivity: str) -> str:
    """Why the upstream evaluation ``now`` differs from ``was`` (same function): its code (the
    diff joins ``ex.diffs``), its arguments, or memolab's key schema."""
    if was[0] != now[0]:
        return ""
    name = _short(now[0])
    rows = {}
    for k in (was, now):
        if k in found:
            got = store.index.evaluations(where="id=?", params=(found[k][0],), limit=1)
            if got:
                rows[k] = got[0]
    snaps = {k: store_edges.recorded_snapshot(r) for k, r in rows.items()}
    parts = []
    if was[3] != now[3]:
        parts.append("memolab's key schema changed")
    if was[1] != now[1]:
        what = f"`{name}`'s code changed"
        if was in snaps and now in snaps:
            sub = Explanation(now[0], False)
            new_deps = snaps[now].get("deps") or {}
            _code_reasons(store, sub, snaps[was], new_deps, lambda sym: store.index.source(new_deps[sym])
                          if sym in new_deps else None, sensitivity, was[1], now[1])
            ex.diffs.update(sub.diffs)
            detail = [r for r in sub.reasons if r not in ("code digest changed", f"`{now[0]}` changed")]
            if detail:
                what += " (" + "; ".join(detail) + ")"
            if sub.diffs:
                what += " — diff below"
        parts.append(what)
    if was[2] != now[2]:
        what = f"`{name}`'s arguments changed"
        if was in snaps and now in snaps:
            a, b = snaps[was].get("args") or {}, snaps[now].get("args") or {}
            # an argument of its own that another upstream evaluation made: named (its own line
            # of this explanation, or the upstream's, says why), not its repr
            ups = _upstream_moves(store, rows[was], rows[now], a, b)
            detail = [f"its argument `{p}` comes from {there}" for p, there in ups.items()]
            detail += [r for r in _arg_reasons(a, b, frozenset(_argument_of(p, b) for p in ups))
                       if r != "new arguments"]
            if detail:
                what += ": " + "; ".join(detail)
        parts.append(what)
    return "; ".join(parts)


def _upstream_moves(store: Store, old: dict[str, Any], new: dict[str, Any], old_args: dict[str, list[str]],
                    new_args: dict[str, list[str]]) -> dict[str, str]:
    """path -> "`prepare` #6 (was #1)" for each input of ``new`` at a changed argument that another
    evaluation made than the one ``old`` had there."""
    changed = {n for n in new_args if n in old_args and old_args[n][0] != new_args[n][0]}
    before = {e["path"]: e["key"] for e in store_edges.recorded_inputs(old)}
    out: dict[str, str] = {}
    for e in store_edges.recorded_inputs(new):
        p, k = e["path"], e["key"]
        if _argument_of(p, changed) is None or before.get(p) == k:
            continue
        found = store_edges.resolve(store.index, [k] + ([before[p]] if p in before else []))
        now_id = found.get(k, (None,))[0]
        was_id = found.get(before[p], (None,))[0] if p in before else None
        text = f"`{_short(k[0])}` " + (f"#{now_id}" if now_id else "(not stored any more)")
        if p in before:
            text += f" (was #{was_id})" if was_id else " (was an evaluation no longer stored)"
        out[p] = text
    return out


def miss_record(store: Store, key: Key, args: dict[str, list[str]], cv: CodeVersion, forced: bool = False,
                inputs: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Why a call missed (the caller found no usable row for ``key``), or was forced."""
    return explained(store, key, args, cv, forced=forced, missing=not forced, inputs=inputs).to_dict()


# -- misses explained when asked ----------------------------------------------------------
# Explaining a miss (the nearest stored evaluation read and parsed, code and arguments
# compared) was 10-12% of a small miss. Most misses are never asked about, so the
# common one -- no row at all for the key, of code already stored -- records only
# what explaining it needs later: its key, argument snapshot, and the id of the newest
# evaluation then (``before``): ``settle`` compares with the evaluations that existed
# at the miss, not with the one the miss went on to store. The new code's dependencies
# are read then from a stored evaluation of the same code digest (the digest is made
# of them), which is why only a miss of code this process has seen stored is deferred:
# a miss of new code (an edit: the miss users ask about) is explained at once, with
# its diffs, even if its computation never finishes.

def pending_miss(key: Key, args: dict[str, list[str]], sensitivity: str,
                 inputs: list[dict[str, str]] | None = None) -> str:
    """The JSON text of a deferred miss record, less ``before`` (see ``with_before``)."""
    fn, code, a, schema = key
    record = {"fn": fn, "hit": False, "pending": True, "code": code, "args": a, "schema": schema,
              "snapshot": args, "sensitivity": sensitivity, "script": _own_script(fn)}
    if inputs:
        record["inputs"] = inputs
    return json.dumps(record, default=str)


def with_before(text: str, before: int | None) -> str:
    """``pending_miss``'s text with ``before``, the newest evaluation id at the miss (read
    before its lease or result is written)."""
    return f'{{"before": {int(before or 0)}, ' + text[1:]


def _is(v: Any, t: Any) -> bool:
    return isinstance(v, t) and not (t is int and isinstance(v, bool))


def record_problem(miss: dict[str, Any]) -> str | None:
    """What is damaged in a recorded miss (as ``Index.last_miss`` returns it), or None. A
    record is written whole by this module, so a field missing or of the wrong type is
    damage (a flipped byte, a hand edit), never an older format."""
    if miss.get("damaged"):
        return str(miss["damaged"])
    if not _is(miss.get("time"), (int, float)):
        return "its time is not a number"
    if miss.get("pending"):
        for f in ("fn", "code", "args", "schema"):
            if not _is(miss.get(f), str):
                return f"its {f} field is missing or not text"
        if not _is(miss.get("snapshot", {}), dict) or not _is(miss.get("before", 0), int):
            return "its argument snapshot or evaluation bound is damaged"
        return None
    if not _is(miss.get("fn"), str):
        return "its fn field is missing or not text"
    if not _is(miss.get("hit"), bool):
        return "its hit field is missing or not true/false"
    reasons, diffs = miss.get("reasons", []), miss.get("diffs", {})
    if not _is(reasons, list) or not all(_is(r, str) for r in reasons):
        return "its reasons are not a list of text"
    if not _is(diffs, dict) or not all(_is(k, str) and _is(v, str) for k, v in diffs.items()):
        return "its diffs are not text by symbol"
    if miss.get("evaluation") is not None and not _is(miss.get("evaluation"), int):
        return "its evaluation id is not a number"
    if miss.get("change") is not None and not _is(miss.get("change"), dict):
        return "its code change is not a mapping"
    return None


def settle(store: Store, miss: dict[str, Any], fn: str | None = None) -> dict[str, Any]:
    """A recorded miss as ``Explanation.to_dict`` (plus its ``time``): deferred ones are explained now.
    A damaged record (``record_problem``) says what is damaged and how to remove it, and never
    raises: ``fn``, the function asked about, names it when the record cannot."""
    bad = record_problem(miss)
    if bad is not None:
        name = fn or (miss["fn"] if _is(miss.get("fn"), str) else "?")
        ex = Explanation(name, False, [f"the record of this miss is damaged ({bad}), so it cannot be explained. "
                                       f"`memolab --store {getattr(store, 'root', 'DIR')} doctor` removes damaged miss "
                                       "records; the function's next miss is recorded afresh"])
        out = ex.to_dict()
        out["time"] = miss["time"] if _is(miss.get("time"), (int, float)) else 0.0
        out["damaged"] = bad
        return out
    if not miss.get("pending"):
        return miss
    fn = miss["fn"]
    ex = Explanation(fn, False)
    try:
        key = Key(fn, miss["code"], miss["args"], miss["schema"])
        idx = store.index
        before = int(miss.get("before") or 0)
        script = miss.get("script") if _is(miss.get("script"), str) else None
        old = idx.nearest(key, before=before, script=script)
        if old is None and script is not None and _other_script(store, ex, key, script, before):
            out = ex.to_dict()
            out["time"] = miss.get("time")
            return out
        deps = None
        if old is not None and old["code"] != key[1]:
            snap = idx.snapshot_of_code(fn, key[1], key[3])
            deps = json.loads(snap).get("deps") if snap else None
        src = (lambda sym: idx.source(deps[sym])) if deps else (lambda sym: None)
        inputs = miss.get("inputs") if isinstance(miss.get("inputs"), list) else None
        _against(store, ex, old, key, miss.get("snapshot") or {}, deps, src, miss.get("sensitivity") or "minor", True,
                 [e for e in inputs if isinstance(e, dict) and all(isinstance(e.get(k), str) for k in
                  ("path", "fn", "code", "args", "schema"))] if inputs else None)
    except (ValueError, KeyError, TypeError, AttributeError, sqlite3.Error) as e:
        # a damaged record or row: say so, and never fail `memolab why` over it
        ex = Explanation(fn, False, [f"this miss cannot be explained now ({type(e).__name__}: {e})"])
    out = ex.to_dict()
    out["time"] = miss.get("time")
    return out


def last_miss(store: Store, fn: str) -> dict[str, Any] | None:
    """Why ``fn`` last missed (``Explanation.to_dict`` plus ``time``), or None if no miss is recorded."""
    miss = store.index.last_miss(fn)
    return None if miss is None else settle(store, miss, fn)


def last_code_miss(store: Store, fn: str, code: str | None = None) -> dict[str, Any] | None:
    """``fn``'s newest recorded miss caused by code alone (of code digest ``code``, when given):
    what ``accept`` is about, however many misses of other causes (a cluster's workers calling
    with new arguments) were recorded since. Else its newest miss (which says why there is
    nothing to accept), or None if none is recorded."""
    from ..store.misses import MISSES_KEPT, recent_misses

    recent = recent_misses(store.index, fn, 2 * MISSES_KEPT)  # (at most 20 + 15 per writer: see insert_miss)
    for raw in recent:
        miss = settle(store, raw, fn)
        change = miss.get("change")
        if isinstance(change, dict) and (code is None or change.get("code") == code):
            return miss
    return settle(store, recent[0], fn) if recent else None
