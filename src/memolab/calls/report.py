"""What memolab says as calls run: one line per call that is not a hit from this process's
memory, on the ``memolab`` logger (docs/logging.md, "What memolab says").

    memolab: train(lr=0.1, epochs=30) miss — code of Net.forward changed (memolab why train.py:train)
    memolab: train stored 1.3 GB in 1.7 s (computed in 31 s)
    memolab: embed(corpus='wiki') loaded 2.1 GB from the store in 1.3 s (evaluation #12)

Levels (``MEMOLAB_VERBOSE``, ``configure(verbose=...)``, ``@memo(verbose=...)``):

* 0: nothing.
* 1, the default: what takes time. A miss is announced unless every computation of its
  function's code in this process took less than ``SLOW`` (so the first miss of each
  function is, and a loop of quick misses says one line, not thousands); a store or a
  load is announced when it took ``SLOW`` or more, a load of a big result (64 MiB or
  more: ``progress.BIG``) always, and the store of an announced miss always (it ends the
  story the miss line began). On a rank other than 0 of a
  distributed job (``RANK``/``LOCAL_RANK`` set and not 0) the default is 0: every rank
  would say the same.
* 2: every call that is not a hit from this process's memory: each miss, store and load.

Why the default says something (as joblib's ``verbose=1`` does), and not only what is slow:
a computation of 30 s that prints nothing cannot be told from a hang, nor a miss the user
expected to be a hit (a cell re-run after an edit) from one that should not happen. A miss
line costs one explanation (``explain.settle``: indexed reads of the nearest evaluation),
paid only by misses that are announced: a first miss, or one of a function that took a
second or more. At level 0 nothing here runs: the explanation is not made, nothing is
formatted and ``logging`` is not even imported.

Lines go through ``logging`` so that a program routes them like any library's: a handler on
the ``memolab`` logger (or the root logger, ``logging.basicConfig``) gets them, at INFO; with
no handler anywhere memolab writes them on stderr itself (``memolab: ...``), as Python's
last-resort handler does for warnings. ``logging.getLogger("memolab").setLevel("WARNING")``
silences them as well.
"""
from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from .. import errors
from ..errors import swallowed
from ..settings import config
from ..settings.text import human_bytes, human_seconds

__all__ = ["SLOW", "ALL", "level", "every_call", "note", "miss", "stored", "loaded", "interrupted", "LOGGER_NAME"]

#: seconds from which a computation, a store or a load counts as taking time (level 1)
SLOW = 1.0
LOGGER_NAME = "memolab"

#: (id of the store, fn, code) -> every computation of it in this process took less than ``SLOW``
_quick: dict[tuple[int, str, str], bool] = {}


def _rank_other_than_0() -> bool:
    env = config.environ_bytes  # 30 ns a read: every miss asks
    for var in (b"RANK", b"LOCAL_RANK"):
        v = env(var)
        if v is not None and v.strip() not in (b"", b"0"):
            return True
    return False


def level(memo: Any) -> int:
    """The verbosity in effect for calls of ``memo`` (a ``MemoFunction``)."""
    v = getattr(memo, "verbose", None)
    if v is not None:
        return v
    v = config.settings().verbose
    if v is not None:
        return v
    return 0 if _rank_other_than_0() else 1


def every_call(memo: Any) -> bool:
    """Is every store hit of ``memo`` to be announced (level 2)?"""
    v = getattr(memo, "verbose", None)
    return v == 2 if v is not None else ALL


#: ``configure(verbose=2)`` or ``MEMOLAB_VERBOSE=2``: every call is said. Kept up to date by
#: ``configure()`` so the hit path reads a module attribute, not the settings
ALL = config.settings().verbose == 2


def _configured(old: Any, new: Any) -> None:
    global ALL
    ALL = new.verbose == 2
    errors.loud = _swallowed if ALL else None


config.on_configure.append(_configured)


def _swallowed(what: str) -> None:
    """At level 2, a swallowed exception (``errors.swallowed``) is said with its traceback,
    as a DEBUG record handed to the ``memolab`` logger's handlers, whatever its level."""
    import logging
    import sys

    log = logging.getLogger(LOGGER_NAME)
    _install(log)
    record = log.makeRecord(LOGGER_NAME, logging.DEBUG, __file__, 0,
                            "%s failed; memolab went on without it", (what,), sys.exc_info())
    log.handle(record)


errors.loud = _swallowed if ALL else None


def note(store: Any, key: Any, seconds: float) -> None:
    """A computation of ``key`` took ``seconds`` (its later misses are announced at level 1 only if one was slow)."""
    k = (id(store), key[0], key[1])
    _quick[k] = _quick.get(k, True) and seconds < SLOW


def _known_quick(store: Any, key: Any) -> bool:
    return _quick.get((id(store), key[0], key[1]), False)


# -- the lines -----------------------------------------------------------------------------

def _name(symbol: str) -> str:
    """``pkg.mod:Model.fit`` -> ``Model.fit``; ``__main__:train`` -> ``train``."""
    return symbol.split(":", 1)[-1]


def _short(symbol: str) -> str:
    """What ``memolab why`` takes for ``symbol``: its last name; for a script's function the name
    ``memolab ls`` prints (``sweep.py:train``), which stays unambiguous when a second script or an
    import of this one defines ``train`` too."""
    if symbol.startswith("__main__:"):
        from ..store.process import script_path

        script = script_path()
        if script:
            import os

            return f"{os.path.basename(script)}:{_name(symbol)}"
    return _name(symbol).split(".")[-1]


def _call_text(call: Any, width: int = 80) -> str:
    """``train(lr=0.1, epochs=30)``, arguments as the key shows them (secrets masked), cut to ``width``."""
    try:
        from .summary import fit

        snap = call.call_snapshot()
        args = fit([(n, r) for n, (_, r) in snap.items() if not n.startswith("<")], width)
    except Exception:  # the snapshot holds the user's reprs: what memolab says never fails the call
        swallowed("report: _call_text")
        args = "…"
    return f"{_name(call.memo.symbol)}({args})"


def _reason(ex: dict[str, Any]) -> str:
    """The first reason of an explanation in a few words: ``code of Net.forward changed``."""
    reasons: list[str] = [r for r in ex.get("reasons") or [] if isinstance(r, str)]
    if not reasons:
        return "miss"
    first = reasons[0]
    if first.startswith("`") and first.endswith("` changed"):
        sym = first[1:-len("` changed")]
        diff = (ex.get("diffs") or {}).get(sym)
        member = _changed_def(diff) if isinstance(diff, str) else None
        name = _name(sym)
        if member and member != name.split(".")[-1]:
            name = f"{name}.{member}"  # a class's method: what the user edited
        first = f"code of {name} changed"
    elif first.startswith("new arguments: "):
        first = "new arguments: " + first[len("new arguments: "):]
    if len(first) > 100:
        first = first[:99] + "…"
    more = len(reasons) - 1
    return first + (f" (and {more} more)" if more else "")


def _changed_def(diff: str) -> str | None:
    """The function a unified diff's first change is in (the last ``def`` above it, in the
    diff's context), or None."""
    import re

    last = None
    for line in diff.splitlines():
        if line.startswith(("---", "+++", "@@")):
            continue
        m = re.match(r"^[ +-]\s*(?:async\s+)?def\s+(\w+)", line)
        if line[:1] in "+-" and not (m and line[:1] == "+" and last is None):
            return last if last is not None else (m.group(1) if m else None)
        if m:
            last = m.group(1)
    return last


def _explanation(call: Any) -> dict[str, Any]:
    """Why ``call`` missed, from the record its miss wrote (``Call.miss_writer``): a record
    explained at once is read back; a deferred one is explained now, by ``explain.settle``
    (what ``memolab why`` runs)."""
    text = getattr(call, "miss_text", None)
    if call.force and getattr(call, "expiry", None) is None:  # (an expired row is recomputed too: it says why)
        return {"reasons": ["recomputation forced with .fresh()"]}
    if not text:
        return {"reasons": []}
    record = json.loads(text)
    if record.get("pending"):
        from .explain import settle

        record["time"] = time.time()
        record = settle(call.store, record, call.memo.symbol)
    return record


def miss(call: Any) -> bool:
    """Announce the miss ``call`` is about to compute, if its verbosity says so; True if it did."""
    lv = level(call.memo)
    if lv == 0 or (lv == 1 and _known_quick(call.store, call.key)):
        return False
    try:
        why = _reason(_explanation(call))
    except Exception:  # explaining must never stop the computation
        swallowed("report: miss")
        why = "miss"
    verb = "recomputed" if call.force else "miss"
    if why.startswith("recomputation forced"):
        why = "fresh() asked for it"
    _say(f"{_call_text(call)} {verb} — {why} (memolab why {_short(call.memo.symbol)})")
    return True


def stored(call: Any, eval_id: int | None, seconds: float, computed: float | None, announced: bool) -> None:
    """Announce a store (after an announced miss, a slow store, or at level 2)."""
    lv = level(call.memo)
    if lv == 0 or (lv == 1 and not announced and seconds < SLOW):
        return
    size = _stored_size(call.store, eval_id)
    took = f" (computed in {human_seconds(computed)})" if computed is not None else ""
    what = human_bytes(size) if size is not None else "its result"
    _say(f"{_name(call.memo.symbol)} stored {what} in {human_seconds(seconds)}{took}")


def interrupted(call: Any, seconds: float | None, run_id: int | None) -> None:
    """Ctrl-C during a miss: one line saying how long it had run and where its logs are."""
    if level(call.memo) == 0:
        return
    took = f" after {human_seconds(seconds)}" if seconds is not None else ""
    logs = f"; its logs are kept (memolab show {run_id})" if run_id is not None else ""
    _say(f"{_name(call.memo.symbol)} interrupted{took}{logs}")


def loaded(call: Any, row: dict[str, Any], seconds: float) -> None:
    """Announce a hit read from the store (a slow one, or every one at level 2)."""
    lv = level(call.memo)
    if lv == 0 or (lv == 1 and seconds < SLOW and "loaded_bytes" not in row):
        return
    _say(f"{_call_text(call)} loaded {human_bytes(_row_size(row))} from the store in {human_seconds(seconds)} "
         f"(evaluation #{row.get('id')})")


def _row_size(row: dict[str, Any]) -> int:
    if row.get("loaded_bytes") is not None:
        return int(row["loaded_bytes"])
    if row.get("size") is not None:
        return int(row["size"])
    n = int(row.get("payload_size") or 0)
    try:
        n += sum(int(s) for _, s in json.loads(row.get("buffers") or "[]"))
    except (ValueError, TypeError):
        pass
    return n


def _stored_size(store: Any, eval_id: int | None) -> int | None:
    if eval_id is None:
        return None
    try:
        rows = store.index.evaluations(where="id=?", params=(eval_id,), limit=1)
        return int(rows[0]["size"]) if rows and rows[0].get("size") is not None else None
    except (sqlite3.Error, OSError):  # the local index (the caller, _quietly, takes anything else)
        swallowed("report: _stored_size")
        return None


# -- the logger ----------------------------------------------------------------------------

_installed = False


def _say(line: str) -> None:
    import logging

    log = logging.getLogger(LOGGER_NAME)
    _install(log)
    try:
        log.info(line)
    except Exception:  # a broken handler of the program's must not fail a call
        swallowed("report: _say")


def _install(log: Any) -> None:
    """Make INFO lines of the ``memolab`` logger reach someone: the program's handlers if it
    has any (on this logger or an ancestor), else stderr (``_Fallback``). A level the program
    set on the logger is kept."""
    global _installed
    if _installed:
        return
    import logging

    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    log.addHandler(_fallback_handler())
    _installed = True


def _fallback_handler() -> Any:
    import logging
    import sys

    class _Fallback(logging.Handler):
        """Writes ``memolab: <line>`` on the current ``sys.stderr`` only while no other handler
        would receive the record: a program that configures logging later gets each line once."""

        def __init__(self) -> None:
            super().__init__(logging.NOTSET)  # the logger's level decides (DEBUG: ``_swallowed``)
            self.setFormatter(logging.Formatter("memolab: %(message)s"))

        def emit(self, record: Any) -> None:
            lg: Any = logging.getLogger(record.name)
            while lg is not None:
                if any(h is not self for h in lg.handlers):
                    return
                if not lg.propagate:
                    break
                lg = lg.parent
            err = sys.stderr
            if err is None:
                return
            try:
                err.write(self.format(record) + "\n")
                err.flush()
            except (OSError, ValueError):
                swallowed("report: _fallback_handler._Fallback.emit")

    return _Fallback()
