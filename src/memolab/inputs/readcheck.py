"""A stored evaluation's record of what its body consumed (``memolab.inputs.reads``), judged on a hit.

``stale(row)`` is the hit's question: is every file the body read by path as it was (one
``stat`` each; a content digest where the stamp moved), every folder it listed, every file it
looked for still absent, and every evaluation it used still current (the inner function's code
and ``version=`` now, its ``max_age``/``validate``)? The first thing that is not is the reason
the hit becomes a miss, as ``why`` says it. ``register`` keeps the current definition of each
memoized function, which that last check compares with.
"""
from __future__ import annotations

import hashlib
import json
import os
import weakref
from collections.abc import Callable
from typing import Any

from ..hashing import files
from . import expiry

__all__ = ["register", "live", "record_text", "parse", "stale", "check", "resolve", "names_digest", "RACY_NS"]

#: a file modified this recently before it was stamped is checked by content (as ``files.RACY_NS``)
RACY_NS = files.RACY_NS


def _debug(msg: str, *args: Any) -> None:
    """A swallowed exception, said at DEBUG (``logging`` imported only then: ``import memolab`` stays lean)."""
    import logging

    logging.getLogger("memolab").debug(msg, *args, exc_info=True)


def names_digest(names: list[str]) -> str:
    return hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()


def resolve(where: str, ws: list[str]) -> str:
    """The file a recorded place names now: ``ws:`` in this workspace; a relative path as given
    (the working directory's, as the body would read it); an absolute one as it is."""
    if where.startswith("ws:"):
        if not ws:
            from ..settings.config import find_workspace

            ws.append(os.path.join(str(find_workspace()), ""))
        return ws[0] + where[3:]
    return where


# -- nested calls --------------------------------------------------------------------------

_memos: dict[str, weakref.ReferenceType[Any]] = {}


def register(memo: Any) -> None:
    """``memo`` (a ``MemoFunction``) is the current definition of its symbol: what a caller's hit
    compares the code and ``version`` it used with."""
    try:
        _memos[memo.symbol] = weakref.ref(memo)
    except TypeError:
        _debug("memolab.inputs.reads: %r cannot be weakly referenced", memo)


def live(fn: str) -> Any:
    ref = _memos.get(fn)
    return ref() if ref is not None else None


def record_text(row: dict[str, Any]) -> str | None:
    """The JSON text of ``row``'s record (``reads``, extracted by the lookup, or in its snapshot)."""
    if "reads" in row:
        text = row["reads"]
        return text if isinstance(text, str) and text else None
    snap = row.get("snapshot")
    if not isinstance(snap, str) or '"reads"' not in snap:
        return None
    try:
        got = json.loads(snap).get("reads")
    except (ValueError, AttributeError):
        return '{"damaged": true}'
    return json.dumps(got) if got else None


#: records parsed, by their text (an in-process hit parses its row's once); bounded in count and size
_parsed: dict[str, Any] = {}
_parsed_chars = 0


def parse(text: str) -> Any:
    global _parsed_chars
    got = _parsed.get(text)
    if got is None:
        try:
            got = json.loads(text)
        except ValueError:
            got = {"damaged": True}
        if len(_parsed) >= 256 or _parsed_chars + len(text) > 16 << 20:
            _parsed.clear()
            _parsed_chars = 0
        _parsed[text] = got
        _parsed_chars += len(text)
    return got


# -- a hit -----------------------------------------------------------------------------------

def stale(row: dict[str, Any], at: float | None = None) -> str | None:
    """Why stored ``row`` may not be used because something it consumed changed (a file read by
    path, a folder's listing, an evaluation it used), or None. O(items): a ``stat`` per file."""
    if "reads" in row:
        text = row["reads"]
        if not text:
            return None  # the common case, on every hit: nothing recorded
    text = record_text(row)
    if text is None:
        return None
    got = parse(text)
    if not isinstance(got, dict) or got.get("damaged"):
        return f"stored evaluation #{row.get('id')} cannot be used: its record of the files it read is damaged"
    why = check(got, expiry.now() if at is None else at)
    return None if why is None else f"{why} (stored evaluation #{row.get('id')})"


def check(rec: dict[str, Any], at: float) -> str | None:
    """The first thing in ``rec`` (stored form) that is not as recorded, said for ``why``."""
    ws: list[str] = []
    try:
        for given, where, size, mtime, ino, ctime, stamped, digest in rec.get("files", ()):
            p = resolve(where, ws)
            try:
                st = os.stat(p)
            except FileNotFoundError:
                return f"{given} was read by path and no longer exists"
            except OSError as e:
                return f"{given} was read by path and cannot be read now ({e.strerror})"
            if ((st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) == (size, mtime, ino, ctime)
                    and max(mtime, ctime) + RACY_NS <= stamped):
                continue  # (a stamp taken while the file was quiet: a change would have moved it)
            if digest is not None and st.st_size == size:
                try:
                    if files.file_digest(p).hex() == digest:
                        continue
                except OSError:
                    pass
            return f"{given} changed (read by path)"
        for given, where in rec.get("absent", ()):
            if os.path.lexists(resolve(where, ws)):
                return f"{given} exists now (it did not when it was looked for)"
        for given, where, names, mtime, ino, stamped in rec.get("dirs", ()):
            p = resolve(where, ws)
            try:
                st = os.stat(p)
            except OSError:
                return f"the folder {given} (listed) no longer exists"
            if (st.st_mtime_ns, st.st_ino) == (mtime, ino) and mtime + RACY_NS <= stamped:
                continue
            try:
                now = names_digest(sorted(os.listdir(p)))
            except OSError:
                return f"the folder {given} (listed) cannot be listed now"
            if now != names:
                return f"the listing of {given} changed"
        for fn, code, started, finished, max_age, rid in rec.get("calls", ()):
            why = _call_stale(fn, code, started, finished, max_age, rid, at)
            if why is not None:
                return why
    except (TypeError, ValueError):
        return "its record of the files it read is damaged"
    return None


def _call_stale(fn: str, code: str, started: Any, finished: Any, max_age: Any, rid: Any, at: float) -> str | None:
    name = fn.split(":", 1)[-1]
    m = live(fn)
    if m is None and "<locals>" not in fn:
        m = _imported(fn)
        if m is None:
            return f"`{name}`, whose evaluation it used, is not defined in this process"
    if m is not None:
        try:
            now = m.code_digest()
        except Exception:  # the code cannot even be read now: not the code that was used
            _debug("memolab.inputs.reads: code of %s", fn)
            now = None
        if now != code:
            old_v, new_v = code.partition("+v")[2] or None, (now or "").partition("+v")[2] or None
            if old_v != new_v:
                return f"the version of `{name}`, whose evaluation it used, changed: {old_v!r} -> {new_v!r}"
            return f"the code of `{name}`, whose evaluation it used, changed"
        max_age = m.max_age
    validate: Callable[[dict[str, Any]], Any] | None = getattr(m, "validate", None)
    if max_age is None and validate is None:
        return None
    row = {"id": rid, "started": started, "finished": finished}
    why = expiry.verdict(row, at, max_age, validate, fn)
    if why is not None:
        return f"the evaluation of `{name}` it used expired: {why.split(': ', 1)[-1]}"
    return None


def _imported(fn: str) -> Any:
    """The memoized function ``fn`` names, importing its module (as the body would) if needed."""
    module = fn.split(":", 1)[0]
    if module in ("__main__", "__mp_main__"):
        return None
    try:
        import importlib

        importlib.import_module(module)
    except Exception:  # importing runs the module's own code
        _debug("memolab.inputs.reads: cannot import %s", module)
        return None
    return live(fn)
