"""Runs: the unit logs attach to.

A run is one computation of a memoized function (``begin``/``end`` are called
by ``memo.py`` around ``fn(...)``), or the per-process run that catches logs
made outside any memoized call. The current run lives in a ``ContextVar`` so a
nested memoized call logs to its own run and its caller's run resumes after it,
and asyncio tasks keep theirs. New threads start with an empty context, so
their logs go to the per-process run unless they copy the context.

Run ids are random 52-bit integers made here rather than by SQLite: starting a
run then costs a queue append, not a database write, and 52 bits stay exact in
the dashboard's JavaScript numbers.
"""
from __future__ import annotations

import contextvars
import json
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, Optional, Tuple

from .. import config as _config
from . import sink as _sink

_current: contextvars.ContextVar[Optional["Run"]] = contextvars.ContextVar("memolab_run", default=None)
_process_run: Optional["Run"] = None
_process_gen = -1
_process_lock = threading.Lock()


class Run:
    __slots__ = ("id", "sink", "steps", "fn")

    def __init__(self, run_id: int, sink: "_sink.Sink", fn: str) -> None:
        self.id = run_id
        self.sink = sink
        self.fn = fn
        self.steps: Dict[str, int] = {}  # tag -> last step, for calls that give no step

    def __repr__(self) -> str:
        return f"<memolab run {self.id} of {self.fn}>"


def new_id() -> int:
    return (int.from_bytes(os.urandom(7), "little") >> 4) or 1  # 52 random bits


def hparam_value(v: Any) -> Any:
    """JSON scalars stay themselves (so the hparams table sorts numbers as numbers); the rest is a short repr."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return v if len(v) <= 200 else v[:197] + "..."
    from ..text import short_repr

    return short_repr(v)


def begin(fn: str, key: Tuple[str, str, str, str], arguments: Dict[str, Any], store: Any) -> Optional[Tuple[Run, Any]]:
    """Start a run for a computation of ``fn``; returns the handle ``end`` needs.

    Logging must never stop a computation: if the run cannot be set up (say the
    index is locked past its timeout while creating the log tables), the call
    goes ahead without one and its logs go to the process run.
    """
    try:
        return _begin(fn, key, arguments, store)
    except Exception:
        return None


def _begin(fn: str, key: Tuple[str, str, str, str], arguments: Dict[str, Any], store: Any) -> Tuple[Run, Any]:
    s = _sink.sink_for(store.index)
    parent = _current.get()
    run = Run(new_id(), s, fn)
    s.q.append((_sink.START, run.id, {
        "fn": fn, "code": key[1], "args": key[2], "schema": key[3],
        "parent": parent.id if parent is not None else None,
        "started": time.time(), "pid": os.getpid(), "host": socket.gethostname(),
        "hparams": {n: hparam_value(v) for n, v in arguments.items()},
    }))
    return run, _current.set(run)


def error_text(e: BaseException, limit: int = 500) -> str:
    """``ValueError: boom``, bounded: what the dashboard shows for a failed run."""
    try:
        msg = str(e)
    except Exception:
        msg = ""
    text = type(e).__qualname__ + (f": {msg}" if msg else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Rider:
    """Writes a finished run that logged nothing inside its result's record
    transaction (``Store.ride_along``): one commit per miss instead of two.

    Only when the run's start is the one record its sink holds (anything logged,
    by this run or another, goes the ordinary way, in order) and the sink writes
    through the very connection of that transaction (else its own ``BEGIN``
    would wait for ours). ``done`` says it wrote; ``end(..., written=rider)``
    then drops the start record instead of writing it again."""

    __slots__ = ("run", "key", "start", "done")

    def __init__(self, run: Run, key: Tuple[str, str, str, str]) -> None:
        self.run = run
        self.key = key
        self.start: Optional[tuple] = None
        self.done = False

    def __call__(self, c: Any) -> None:
        s = self.run.sink
        index = getattr(s, "index", None)
        if index is None or index.conn() is not c or not s._lock.acquire(blocking=False):
            return
        try:
            q = s.q
            if len(q) != 1 or q[0][0] != _sink.START or q[0][1] != self.run.id:
                return
            start = q[0]
            fields = start[2]
            now = time.time()
            c.execute(
                "INSERT OR IGNORE INTO runs(id, fn, code, args, schema, parent, name, started, updated, status, hparams,"
                " pid, host, finished, eval_id) VALUES (?,?,?,?,?,?,?,?,?,'done',?,?,?,?,"
                "(SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?))",
                (self.run.id, fields["fn"], fields.get("code"), fields.get("args"), fields.get("schema"),
                 fields.get("parent"), fields.get("name"), fields["started"], now,
                 json.dumps(fields.get("hparams") or {}, default=str, allow_nan=True), fields.get("pid"),
                 fields.get("host"), now, *self.key))
            self.start = start
            self.done = True
        finally:
            s._lock.release()


def rider(handle: Optional[Tuple[Run, Any]], key: Tuple[str, str, str, str]) -> Optional[Rider]:
    return None if handle is None else Rider(handle[0], key)


def end(handle: Optional[Tuple[Run, Any]], status: str, eval_id: Optional[int] = None,
        error: Optional[BaseException] = None, written: Optional[Rider] = None) -> None:
    """Finish a run and flush: when a memoized call returns (or raises), its logs are on disk.
    ``written``: a ``Rider`` that wrote the finished run with the result (committed)."""
    if handle is None:
        return
    run, token = handle
    try:
        _current.reset(token)
    except ValueError:  # ended in another context (should not happen); fall back to clearing
        _current.set(None)
    if written is not None and written.done:
        s = run.sink
        with s._lock:  # the flusher may have written it meanwhile: INSERT OR IGNORE kept ours
            try:
                s.q.remove(written.start)
            except ValueError:
                pass
        return
    run.sink.q.append((_sink.END, run.id, status, time.time(), eval_id, error_text(error) if error is not None else None))
    try:
        run.sink.flush()
    except Exception:
        _sink.wake()  # the background thread retries; never fail the user's call over logs


def in_call() -> Optional[Run]:
    """The run of the memoized call running in this context, if any (not the process run)."""
    return _current.get()


def current() -> Run:
    """The run logs go to right now."""
    r = _current.get()
    if r is not None:
        return r
    r = _process_run
    # a configure(store=...) since the process run began means logs belong in the new store
    if r is not None and _process_gen == _config.generation():
        return r
    return process_run()


def process_run() -> Run:
    global _process_run, _process_gen
    with _process_lock:
        if _process_run is None or _process_gen != _config.generation():
            if _process_run is not None:
                finish_process_run()
            from .. import store as _store

            st = _store.get_store()
            s = _sink.sink_for(st.index)
            script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
            fn = f"<process:{script or 'python'}>"
            run = Run(new_id(), s, fn)
            s.q.append((_sink.START, run.id, {
                "fn": fn, "name": " ".join(sys.argv)[:300], "started": time.time(), "parent": _forked_from,
                "pid": os.getpid(), "host": socket.gethostname(), "hparams": {"argv": " ".join(sys.argv[1:])[:200]},
            }))
            _process_run = run
            _process_gen = _config.generation()
        return _process_run


def finish_process_run() -> None:
    global _process_run
    r = _process_run
    if r is not None:
        r.sink.q.append((_sink.END, r.id, "done", time.time(), None))
    _process_run = None


_sink.before_exit.append(finish_process_run)

_forked_from: Optional[int] = None


def _after_fork() -> None:
    global _process_run, _forked_from
    # A child forked inside a memoized call inherits the forking thread's context, whose
    # run is the parent's: its logs would be filed under an evaluation it does not own,
    # numbered as if they were the parent's. It logs to its own process run instead,
    # whose parent is the run the fork came from.
    r = _current.get()
    if r is not None:
        _current.set(None)
    else:
        r = _process_run
    _forked_from = r.id if r is not None else None
    _process_run = None  # the child is another process: it gets its own run


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
