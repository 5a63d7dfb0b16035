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
from collections.abc import Callable
from typing import Any

from ..errors import swallowed
from ..key import Key
from ..settings import config as _config
from ..settings.text import mask_secrets
from ..store.process import in_kernel, script_path
from . import output as _output, sink as _sink, system as _system
from .hparams import NOT_HPARAMS, hparam_value

TRACEBACK_LIMIT = 20_000  # characters of a failed run's traceback kept (its end: the raise site)



def interruptions() -> tuple[type, ...]:
    """Exceptions that stop a computation without it having failed: Ctrl-C, a cancelled task.
    (asyncio is not imported for this: 30 ms of ``import memolab``; unimported, nothing was cancelled.)"""
    aio = sys.modules.get("asyncio")
    # SystemExit too: sys.exit() or a framework's graceful stop on SIGTERM (Lightning's
    # SIGTERMException is one) ends a computation that did not fail
    return (KeyboardInterrupt, SystemExit, aio.CancelledError) if aio is not None else (KeyboardInterrupt, SystemExit)

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("memolab_run", default=None)
_process_run: Run | None = None
_process_gen = -1
_process_lock = threading.Lock()


class Run:
    __slots__ = ("id", "sink", "steps", "fn", "fields", "named", "writer", "children", "tail")

    def __init__(self, run_id: int, sink: _sink.Sink, fn: str, fields: dict[str, Any] | None = None) -> None:
        self.id = run_id
        self.sink = sink
        self.fn = fn
        self.steps: dict[str, int] = {}  # tag -> last step, for calls that give no step
        self.fields = fields or {}  # its START record's fields (key, hparams): a writer's child run copies them
        self.named = False  # memolab.log.name() was called: a writer's log_dir does not rename it
        self.writer: str | None = None  # the log_dir of the SummaryWriter whose run this is
        self.children: dict[str, Run] = {}  # log_dir -> run of another writer used inside this computation
        self.tail: _output.Tail | None = None  # what it printed (memoized computations only)

    def __repr__(self) -> str:
        return f"<memolab run {self.id} of {self.fn}>"


def new_id() -> int:
    return (int.from_bytes(os.urandom(7), "little") >> 4) or 1  # 52 random bits




def begin(fn: str, key: Key, arguments: dict[str, Any], store: Any,
          texts: Callable[[], dict[str, list[str]]] | None = None) -> tuple[Run, Any] | None:
    """Start a run for a computation of ``fn``; returns the handle ``end`` needs.

    Logging must never stop a computation: if the run cannot be set up (say the
    index is locked past its timeout while creating the log tables), the call
    goes ahead without one and its logs go to the process run.

    ``texts``: gives the call's argument snapshot (``call.arg_snapshot``: {name: [digest, text]}), kept
    with the run until it ends done, so its row in ``ls FUNC`` reads as its evaluations' do.
    """
    try:
        return _begin(fn, key, arguments, store, texts)
    except Exception:  # logging must never stop a computation: a store of any backend, the user's arguments
        swallowed("tracking.runs: begin")
        return None


def _begin(fn: str, key: Key, arguments: dict[str, Any], store: Any,
           texts: Callable[[], dict[str, list[str]]] | None) -> tuple[Run, Any]:
    s = _sink.sink_for(store.index)
    parent = _current.get()
    fields = {
        "fn": fn, "code": key[1], "args": key[2], "schema": key[3],
        "parent": parent.id if parent is not None else None,
        "started": time.time(), "pid": os.getpid(), "host": socket.gethostname(), "script": script_path(),
        # secrets (``hub_token``, ``api_key``: text.is_secret_name) are masked at any depth
        "hparams": mask_secrets({n: hparam_value(v) for n, v in arguments.items() if type(v) not in NOT_HPARAMS}),
        "argtext": {n: v[1] for n, v in (texts() if texts is not None else {}).items()},  # (masked: arg_snapshot)
    }
    run = Run(new_id(), s, fn, fields)
    s.q.append((_sink.START, run.id, fields))
    if s is not _sink.DISCARD:
        run.tail = _output.Tail()
        _open[run.id] = run
        _watch_sigterm()
        _output.start(_tail_of_current)
        _system.watch(run)  # CPU, memory, GPU sampled off this thread while it computes (sys/ tags)
    return run, _current.set(run)


def _tail_of_current() -> _output.Tail | None:
    r = _current.get()
    return r.tail if r is not None else None


#: runs begun in this process and not ended yet (memoized computations and writers' runs):
#: what a SIGTERM marks interrupted
_open: dict[int, Run] = {}


def traceback_text(e: BaseException) -> str | None:
    """The formatted traceback, bounded to its last ``TRACEBACK_LIMIT`` characters (where it was raised)."""
    import traceback

    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        # memolab's own frames (the decorator, the lifecycle) say nothing about the user's failure
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if not f.filename.startswith(own)])
        text = "".join(te.format())
    except Exception:  # formatting the user's exception runs its code (__str__, its frames' objects)
        swallowed("tracking.runs: traceback_text")
        return None
    return text if len(text) <= TRACEBACK_LIMIT else "…" + text[-(TRACEBACK_LIMIT - 1):]


def status_of(error: BaseException | None, default: str) -> str:
    """``interrupted`` for Ctrl-C and a cancelled task: the computation did not fail, it was stopped."""
    return "interrupted" if error is not None and isinstance(error, interruptions()) else default


def error_text(e: BaseException, limit: int = 500) -> str:
    """``ValueError: boom``, bounded: what the dashboard shows for a failed run."""
    try:
        msg = str(e)
    except Exception:  # the user's exception's own __str__
        swallowed("tracking.runs: error_text")
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

    def __init__(self, run: Run, key: Key) -> None:
        self.run = run
        self.key = key
        self.start: tuple | None = None
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
                " pid, host, script, finished, eval_id) VALUES (?,?,?,?,?,?,?,?,?,'done',?,?,?,?,?,"
                "(SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?))",
                (self.run.id, fields["fn"], fields.get("code"), fields.get("args"), fields.get("schema"),
                 fields.get("parent"), fields.get("name"), fields["started"], now,
                 json.dumps(fields.get("hparams") or {}, default=str, allow_nan=True), fields.get("pid"),
                 fields.get("host"), fields.get("script"), now, *self.key))
            self.start = start
            self.done = True
        finally:
            s._lock.release()


def rider(handle: tuple[Run, Any] | None, key: Key) -> Rider | None:
    return None if handle is None else Rider(handle[0], key)


def end(handle: tuple[Run, Any] | None, status: str, eval_id: int | None = None,
        error: BaseException | None = None, written: Rider | None = None) -> None:
    """Finish a run and flush: when a memoized call returns (or raises), its logs are on disk.
    ``written``: a ``Rider`` that wrote the finished run with the result (committed)."""
    if handle is None:
        return
    run, token = handle
    _system.unwatch(run)
    try:
        _current.reset(token)
    except ValueError:  # ended in another context (should not happen); fall back to clearing
        _current.set(None)
    if run.tail is not None:
        _open.pop(run.id, None)
        _output.stop()
    status = status_of(error, status)
    now = time.time()
    for child in run.children.values():  # other writers' runs inside this computation end with it
        _open.pop(child.id, None)
        child.sink.q.append((_sink.END, child.id, status, now, eval_id))
    if written is not None and written.done:
        s = run.sink
        with s._lock:  # the flusher may have written it meanwhile: INSERT OR IGNORE kept ours
            try:
                s.q.remove(written.start)
            except ValueError:
                pass
        return
    if error is not None:
        tail = run.tail.text() if run.tail is not None else None
        run.sink.q.append((_sink.END, run.id, status, now, eval_id, error_text(error), traceback_text(error), tail))
    else:
        run.sink.q.append((_sink.END, run.id, status, now, eval_id))
    run.tail = None
    try:
        run.sink.flush()
    except Exception:  # a write of any kind failing must never fail the user's call over logs
        swallowed("tracking.runs: end")
        _sink.wake()  # the background thread retries; never fail the user's call over logs


def in_call() -> Run | None:
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
            fn = _script_fn()
            run = Run(new_id(), s, fn)
            name, hparams = _process_name()
            s.q.append((_sink.START, run.id, {
                "fn": fn, "name": name, "started": time.time(), "parent": _forked_from,
                "pid": os.getpid(), "host": socket.gethostname(), "script": script_path(), "hparams": hparams,
            }))
            _process_run = run
            _process_gen = _config.generation()
        return _process_run


def _exit_status() -> str:
    """How the script ended, at exit: the interpreter sets ``sys.last_type`` when it prints an
    uncaught exception (Ctrl-C included) before running the exit hooks."""
    if hasattr(sys, "ps1") or "IPython" in sys.modules:
        return "done"  # interactive: last_type is any earlier error of the session, not how it ended
    t = getattr(sys, "last_type", None)
    if t is None or not isinstance(t, type) or issubclass(t, SystemExit):
        return "done"  # (an uncaught SystemExit is not printed: last_type is never one)
    return "interrupted" if issubclass(t, interruptions()) else "failed"


def finish_process_run(at_exit: bool = False) -> None:
    global _process_run
    r = _process_run
    status = _exit_status() if at_exit else "done"
    if r is not None:
        e = getattr(sys, "last_value", None) if status != "done" else None
        if isinstance(e, BaseException):  # the script's uncaught exception, with its traceback
            r.sink.q.append((_sink.END, r.id, status, time.time(), None, error_text(e), traceback_text(e), None))
        else:
            r.sink.q.append((_sink.END, r.id, status, time.time(), None))
    _process_run = None
    for label in list(_writer_runs):
        end_writer_run(label, status)


# -- names, and SummaryWriter(log_dir) runs ------------------------------------------------
def set_name(run: Run, name: str, explicit: bool = True) -> None:
    """Name ``run``; an explicit name (``memolab.log.name``) is never replaced by a writer's log_dir."""
    if explicit:
        run.named = True
    run.sink.q.append((_sink.NAME, run.id, name))


#: log_dir -> the run of a writer used outside any memoized computation
_writer_runs: dict[str, Run] = {}
_writer_gen = -1


def writer_target(label: str) -> Run:
    """The run a ``SummaryWriter(log_dir=label)`` logs to now.

    Inside a memoized computation, its run: the first writer used there names it after its
    log_dir (unless ``memolab.log.name`` did), so ``train(lr, writer)`` is one run per
    evaluation, named after the writer. A writer with another log_dir used in the same
    computation (a sweep inside one memoized function) gets its own run, a child of it,
    ended with it and attached to the same evaluation. Outside any computation, each log_dir
    is its own run of the script (``<process:train.py>``) until the writer is closed: the
    classic loop of one writer per log_dir gives one run per log_dir, never one run whose
    steps repeat.
    """
    call = _current.get()
    if call is None:
        global _writer_gen
        if _writer_gen != _config.generation():  # configure(store=...): new runs in the new store
            for old in list(_writer_runs):
                end_writer_run(old)
            _writer_gen = _config.generation()
        r = _writer_runs.get(label)
        if r is None:
            r = _writer_runs[label] = _new_writer_run(label, None)
        return r
    if call.writer is None:
        call.writer = label
        if not call.named:
            set_name(call, label, explicit=False)
        return call
    if call.writer == label:
        return call
    r = call.children.get(label)
    if r is None:
        r = call.children[label] = _new_writer_run(label, call)
    return r


def _process_sink() -> _sink.Sink:
    from .. import store as _store

    return _sink.sink_for(_store.get_store().index)


def _new_writer_run(label: str, call: Run | None) -> Run:
    if call is not None:
        s = call.sink
        f = call.fields
        fields: dict[str, Any] = {"fn": call.fn, "code": f.get("code"), "args": f.get("args"), "schema": f.get("schema"),
                  "hparams": dict(f.get("hparams") or {}), "parent": call.id}
    else:
        s = _process_sink()
        fields = {"fn": _script_fn(), "hparams": {}, "parent": _process_run.id if _process_run is not None else None}
    fields.update({"name": label, "started": time.time(), "pid": os.getpid(), "host": socket.gethostname(),
                   "script": script_path()})
    run = Run(new_id(), s, fields["fn"], fields)
    run.writer = label
    s.q.append((_sink.START, run.id, fields))
    _open[run.id] = run
    if call is None:
        _watch_sigterm()
    return run


def end_writer_run(label: str, status: str = "done") -> None:
    """``writer.close()`` outside a computation: its run is done (a later writer on the same log_dir
    starts another); at exit, a writer never closed ends as the script did (done, failed, interrupted)."""
    r = _writer_runs.pop(label, None)
    if r is not None:
        _open.pop(r.id, None)
        r.sink.q.append((_sink.END, r.id, status, time.time(), None))


def bind(run: Run) -> Any:
    return _current.set(run)


def unbind(token: Any) -> None:
    _current.reset(token)


def _script_fn() -> str:
    if in_kernel():  # a notebook's runs are named after it, not after ipykernel_launcher.py
        nb = script_path()
        return f"<process:{os.path.basename(nb) if nb else 'notebook'}>"
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"<process:{script or 'python'}>"


def _process_name() -> tuple[str, dict[str, Any]]:
    """A process run's name and hyperparameters: the command line, or a notebook's name (a
    kernel's command line is its connection file)."""
    if in_kernel():
        nb = script_path()
        return (os.path.basename(nb) if nb else "notebook"), ({"notebook": nb} if nb else {})
    return " ".join(sys.argv)[:300], {"argv": " ".join(sys.argv[1:])[:200]}


# -- SIGTERM: the runs of this process are interrupted, not lost ----------------------------
_sigterm_installed = False


def _watch_sigterm() -> None:
    """Install a SIGTERM handler once, only over the default action and from the main thread
    (a handler the program installed is left alone; its runs then show as lost)."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed = True
    import signal

    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):
        swallowed("tracking.runs: _watch_sigterm")


#: when the SIGTERM came (set by the handler, the one thing it writes), and whether the runs
#: have been marked since (set by the thread that marks them)
_sigterm_at: float | None = None
_sigterm_marked = False
#: how long that thread waits for a sink another thread is flushing (the main thread, which the
#: signal interrupted, goes on and finishes its flush)
SIGTERM_FLUSH_S = 5.0


def _on_sigterm(signum: int, frame: Any) -> None:
    """Have this process's open runs (and its process run) marked interrupted, with their output,
    then die of SIGTERM as the default action would: the exit status a supervisor sees is unchanged.

    The handler runs in the main thread between two bytecodes of whatever it was doing, which
    may hold a sink's lock or be inside a write on the same SQLite connection: it only notes the
    time and starts a thread (``_thread.start_new_thread``: no lock of ``threading``'s, none
    that Python code can hold across bytecodes) that queues the ends, flushes and sends SIGTERM
    again; the handler then restores the default action and the process dies of it."""
    import signal

    global _sigterm_at, _sigterm_marked
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        # another handler, installed later, chained to ours (Lightning's does: it stops training
        # gracefully and raises in the loop). The default action would not have run: neither do we;
        # the computation's exception ends its run as interrupted.
        return
    if _sigterm_at is None:
        _sigterm_at = time.time()
        try:
            import _thread

            _thread.start_new_thread(_mark_interrupted, ())
            return
        except RuntimeError:  # the interpreter is shutting down: no thread starts, nothing is marked
            _sigterm_marked = True
    if _sigterm_marked:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    # else: a second SIGTERM while the runs are being marked; that thread sends the last one


def _mark_interrupted() -> None:
    """(a thread of its own, started by the SIGTERM handler) End the open runs as interrupted and
    write them, within ``SIGTERM_WAIT_S`` whatever the store does (a write waiting on a busy
    database is left behind: the process dies with it), then SIGTERM."""
    import signal

    global _sigterm_marked
    try:
        writer = threading.Thread(target=_write_interrupted, name="memolab-sigterm", daemon=True)
        writer.start()
        writer.join(SIGTERM_WAIT_S)
    except Exception:  # a thread started from a SIGTERM handler: nothing may escape it
        swallowed("marking the runs interrupted at SIGTERM")
    finally:
        _sigterm_marked = True
        os.kill(os.getpid(), signal.SIGTERM)


#: how long the runs' ends may take to write before the process dies of SIGTERM anyway
SIGTERM_WAIT_S = SIGTERM_FLUSH_S + 5.0


def _write_interrupted() -> None:
    try:
        now = _sigterm_at
        for r in list(_open.values()):
            tail = r.tail.text() if r.tail is not None else None
            r.sink.q.append((_sink.END, r.id, "interrupted", now, None, "SIGTERM", None, tail))
        _open.clear()
        if _process_run is not None:
            _process_run.sink.q.append((_sink.END, _process_run.id, "interrupted", now, None, "SIGTERM"))
        _sink.flush_all(timeout=SIGTERM_FLUSH_S)
    except Exception:  # the SIGTERM thread's work: the process dies of SIGTERM whatever happens here
        swallowed("marking the runs interrupted at SIGTERM")


_sink.before_exit.append(lambda: finish_process_run(at_exit=True))

_forked_from: int | None = None


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
    _open.clear()  # the parent's runs: not the child's to end
    _writer_runs.clear()
    _output.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
