"""A miss whose code ran before under another module name: a script's ``train`` is ``__main__:train``;
the same file imported (``import sweep; sweep.train(...)`` in a notebook) is ``sweep:train``, another
function whose evaluations are keyed apart (docs/cache-rules.md#a-script-and-its-import). A miss with
nothing stored for its own symbol looks for the same code stored under another module's name and
says so, instead of "no stored evaluation of this function yet" alone."""
from __future__ import annotations

import json
import os
import sqlite3
from typing import Any


def _debug(msg: str, e: BaseException) -> None:
    import logging  # only here: a miss at verbosity 0 imports no logging (tests/test_report.py)

    logging.getLogger(__name__).debug(msg, e)


def _renamed(deps: dict[str, str], old_mod: str, new_mod: str) -> dict[str, str]:
    """``deps`` with ``old_mod``'s symbols written as ``new_mod``'s."""
    out = {}
    for sym, digest in deps.items():
        mod, sep, rest = sym.partition(":")
        out[f"{new_mod}:{rest}" if sep and mod == old_mod else sym] = digest
    return out


def _shown(c: Any, fn: str, eval_id: int) -> str:
    """The start of how the other function is named: ``sweep.py`` and ``__main__:train`` for a script's
    function (the script that stored ``eval_id``), else ``fn`` alone."""
    if not fn.startswith("__main__:"):
        return f"`{fn}` ("
    try:
        r = c.execute("SELECT script FROM runs WHERE eval_id=? AND script IS NOT NULL LIMIT 1", (eval_id,)).fetchone()
    except sqlite3.Error as e:  # an index without log tables: the symbol alone
        _debug("samecode: no runs table: %s", e)
        r = None
    return f"`{os.path.basename(r[0])}` (`{fn}`, " if r else f"a script (`{fn}`, "


def note(store: Any, key: Any, deps: dict[str, str] | None) -> str | None:
    """What to add to a miss of ``key`` (its code's ``deps``, else read from a stored evaluation of the
    same code) that has no stored evaluation of its own, when the same code is stored under another
    module's name; None when it is not."""
    fn = key[0]
    mod, sep, qual = fn.partition(":")
    if not sep:
        return None
    try:
        c = store.index.conn()
        if not deps:  # a deferred miss: its code's dependencies are those of the evaluation it stored
            snap = store.index.snapshot_of_code(fn, key[1], key[3])
            deps = json.loads(snap).get("deps") if snap else None
            if not deps:
                return None
        others = c.execute("SELECT fn, COUNT(*), MAX(id) FROM evaluations WHERE status='done' AND fn != ? "
                           "AND substr(fn, -?) = ? GROUP BY fn, code", (fn, len(qual) + 1, ":" + qual)).fetchall()
        for other, n, last in others:
            omod = other.partition(":")[0]
            (snap,) = c.execute("SELECT snapshot FROM evaluations WHERE id=?", (last,)).fetchone()
            odeps = json.loads(snap or "{}").get("deps")
            if not isinstance(odeps, dict) or _renamed(odeps, omod, mod) != deps:
                continue
            where = _shown(c, other, last) + f"{n} result{'s' if n != 1 else ''})"
            return (f"the same code ran as {where}; as `{fn}` it is another function, keyed apart "
                    "(docs/cache-rules.md#a-script-and-its-import: import it from a module in both places to share "
                    "results)")
    except (sqlite3.Error, ValueError, TypeError) as e:  # a note, never in the way of the miss
        _debug("samecode: %s", e)
    return None
