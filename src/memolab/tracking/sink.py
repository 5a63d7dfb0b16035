"""The write path: a lock-free queue per store, drained by one background thread.

Logging must cost the training loop almost nothing, so the caller only appends
a tuple to a ``collections.deque`` (``append``/``popleft`` are atomic under the
GIL, so no lock is taken on the hot path). Encoding (PNG, JSON) and SQLite
writes happen on the flusher thread, every ``INTERVAL`` seconds or sooner when
the queue grows past ``WAKE_AT``. ``flush()`` drains synchronously; a memoized
call flushes when it ends, so a stored result always has its logs on disk, and
the process flushes at exit. A committed flush survives ``SIGKILL`` (WAL mode).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import MemolabWarning, swallowed
from ..store import beats as _beats
from . import notes, schema

INTERVAL = 1.0
WAKE_AT = 20_000

# SQLite INTEGER range: a larger step cannot be bound (OverflowError)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

# queue record kinds (first tuple element)
START, END, SCALAR, EVENT, HPARAMS, NAME, NOTE = 0, 1, 2, 3, 4, 5, 6


class Sink:
    """Pending log records of one store."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self.q: deque = deque()
        self._counts: dict[tuple[int, str], int] = {}  # points written per (run, tag): each point's block
        self._lock = threading.Lock()  # one drainer at a time keeps records in order
        with self._lock:
            schema.ensure(index.conn())

    def flush(self, timeout: float | None = None) -> int:
        """Write everything queued so far; returns the number of records written.
        With ``timeout``, give up (returning 0) if another drainer holds the queue that long:
        a signal handler may have interrupted this very thread inside a flush."""
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return 0
        try:
            return self._drain()
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def drained(self) -> Iterator[None]:
        """Everything queued so far written, and no other drainer until the block ends: for a
        block that renumbers this process's points in the store (a resumed run receiving the
        logs of the run it continues, ``resume.continue_from``). Each tag's count is read again
        from the store by the next flush: the numbers this process kept may have moved."""
        with self._lock:
            self._drain()
            try:
                yield
            finally:
                self._counts.clear()

    def _drain(self) -> int:
        q = self.q
        items: list[tuple] = []
        pop = q.popleft
        try:
            while True:
                items.append(pop())
        except IndexError:
            pass
        if not items:
            return 0
        try:
            self._write(items)
        except BaseException:
            # put them back (in order) so a transient "database is locked" loses nothing
            q.extendleft(reversed(items))
            raise
        return len(items)

    def _write(self, items: list[tuple]) -> None:
        starts: list[Any]
        ends: list[Any]
        scalars: list[Any]
        events: list[Any]
        hparams: list[Any]
        starts, ends, scalars, events, hparams = [], [], [], [], []
        # per (run, tag): [n, last step, its value, its wall, first step, steps never decreased, prior count]
        last: dict[tuple[int, str], list[Any]] = {}
        blocks: dict[tuple[int, str, int], list[Any]] = {}
        c = self.index.conn()
        dropped: list[str] = []
        for n, it in enumerate(items):
            if not n & 255 and threading.current_thread() is _thread:
                tick_if_due()  # a long batch (images to encode) must not hold up a lease's heartbeat
            try:
                self._add(it, c, last, blocks, starts, ends, scalars, events, hparams)
            except Exception as e:
                # One record that cannot be stored (the caller checks what it can, this is the
                # last line) is dropped: put back with its batch, it would fail every later
                # flush and take every other log of the process with it.
                dropped.append(f"{it[:3]!r}: {type(e).__name__}: {e}")
        if dropped:
            import warnings

            warnings.warn(f"memolab.log: dropped {len(dropped)} record(s) that cannot be stored, first {dropped[0]}",
                          MemolabWarning, stacklevel=2)
        self._commit(items, c, last, blocks, starts, ends, scalars, events, hparams)

    def _add(self, it: tuple, c: Any, last: dict[tuple[int, str], list[Any]], blocks: dict[tuple[int, str, int], list[Any]],
             starts: list, ends: list, scalars: list, events: list, hparams: list) -> None:
        """Turn one queued record into rows; raises (touching nothing) if it cannot be stored."""
        kind = it[0]
        if kind == SCALAR:
            _, run, tag, step, wall, value = it
            if not I64_MIN <= step <= I64_MAX:
                raise OverflowError(f"step {step} does not fit 64 bits")
            wall = float(wall)
            if value != value:  # SQLite turns NaN into NULL anyway; say so explicitly
                value = None
            rt = (run, tag)
            cur = last.get(rt)
            if cur is None:
                before = self._counts.get(rt)
                if before is None:  # first flush of this tag by this process: continue where the store is
                    row = c.execute("SELECT n FROM scalar_tags WHERE run=? AND tag=?", rt).fetchone()
                    before = row[0] if row else 0
                cur = last[rt] = [0, step, value, wall, step, 1, before]
            elif step >= cur[1]:
                cur[1], cur[2], cur[3] = step, value, wall
            else:
                cur[5] = 0
            seq = cur[6] + cur[0]
            scalars.append((run, tag, step, seq, wall, value))
            b = (run, tag, seq // schema.BLOCK)
            cur[0] += 1
            blk = blocks.get(b)
            if blk is None:
                blk = blocks[b] = [0, step, step, 0.0, 0.0, 0, None, None]
            blk[0] += 1
            if step < blk[1]:
                blk[1] = step
            if step > blk[2]:
                blk[2] = step
            blk[3] += wall
            if value is not None:
                blk[4] += value
                blk[5] += 1
                if blk[6] is None or value < blk[6]:
                    blk[6] = value
                if blk[7] is None or value > blk[7]:
                    blk[7] = value
        elif kind == EVENT:
            _, run, ekind, tag, step, wall, payload = it
            if not I64_MIN <= step <= I64_MAX:
                raise OverflowError(f"step {step} does not fit 64 bits")
            wall = float(wall)
            meta, data = _encode(ekind, payload)
            if ekind == "png":
                ekind = "image"
            events.append((run, ekind, tag, step, wall, meta, data))
        elif kind == START:
            _, run, fields = it
            starts.append((run, fields["fn"], fields.get("code"), fields.get("args"), fields.get("schema"),
                           fields.get("parent"), fields.get("name"), fields["started"], fields["started"],
                           "running", json.dumps(fields.get("hparams") or {}, default=str, allow_nan=True),
                           fields.get("pid"), fields.get("host"), fields.get("script"),
                           json.dumps(fields["argtext"]) if fields.get("argtext") else None))
        elif kind == END:
            _, run, status, finished, eval_id, *rest = it
            rest += [None] * (3 - len(rest))  # error, traceback, output
            ends.append((status, finished, finished, eval_id, rest[0], rest[1], rest[2], status, run))
        elif kind == HPARAMS:
            _, run, values = it
            hparams.append((run, values))
        elif kind == NAME:
            _, run, name = it
            hparams.append((run, name))  # applied in order with the hparams records
        elif kind == NOTE:  # memolab.log.note()/tag(): (NOTE, run, "note"|"tag", text, time)
            hparams.append((it[1], it))

    def _commit(self, items: list[tuple], c: Any, last: dict[tuple[int, str], list[Any]],
                blocks: dict[tuple[int, str, int], list[Any]], starts: list, ends: list, scalars: list, events: list,
                hparams: list) -> None:
        now = time.time()
        with self.index.write():
            if starts:
                c.executemany(
                    "INSERT OR IGNORE INTO runs(id, fn, code, args, schema, parent, name, started, updated, status, hparams,"
                    " pid, host, script, argtext) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", starts)
            if scalars:
                c.executemany("INSERT INTO scalars(run, tag, step, seq, wall, value) VALUES (?,?,?,?,?,?)", scalars)
                # SET expressions all see the old row, so the CASE compares against the previous last_step
                c.executemany(
                    "INSERT INTO scalar_tags(run, tag, n, last_step, last_value, last_wall, first_step, ordered)"
                    " VALUES (?,?,?,?,?,?,?,?)"
                    " ON CONFLICT(run, tag) DO UPDATE SET n = n + excluded.n,"
                    " last_value = CASE WHEN excluded.last_step >= last_step THEN excluded.last_value ELSE last_value END,"
                    " last_wall = CASE WHEN excluded.last_step >= last_step THEN excluded.last_wall ELSE last_wall END,"
                    " ordered = (ordered AND excluded.ordered AND excluded.first_step >= last_step),"
                    " last_step = MAX(last_step, excluded.last_step)",
                    [(r, t, v[0], v[1], v[2], v[3], v[4], v[5]) for (r, t), v in last.items()])
                c.executemany(
                    "INSERT INTO scalar_blocks(run, tag, block, n, step_min, step_max, wall_sum, value_sum, value_n, vmin, vmax)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT(run, tag, block) DO UPDATE SET n = n + excluded.n,"
                    " step_min = MIN(step_min, excluded.step_min), step_max = MAX(step_max, excluded.step_max),"
                    " wall_sum = wall_sum + excluded.wall_sum, value_sum = value_sum + excluded.value_sum,"
                    " value_n = value_n + excluded.value_n,"
                    # scalar MIN/MAX return NULL if either side is NULL (a block of only NaNs so far)
                    " vmin = COALESCE(MIN(vmin, excluded.vmin), vmin, excluded.vmin),"
                    " vmax = COALESCE(MAX(vmax, excluded.vmax), vmax, excluded.vmax)",
                    [(*k, *v) for k, v in blocks.items()])
            if events:
                c.executemany("INSERT INTO log_events(run, kind, tag, step, wall, meta, data) VALUES (?,?,?,?,?,?,?)", events)
            for run, values in hparams:
                if isinstance(values, str):  # a NAME record
                    c.execute("UPDATE runs SET name=? WHERE id=?", (values, run))
                    continue
                if isinstance(values, tuple):  # a NOTE record
                    _, _, nkind, text, when = values
                    notes.insert(c, nkind, text, run=run, when=when, source="log")
                    continue
                row = c.execute("SELECT hparams FROM runs WHERE id=?", (run,)).fetchone()
                if row is not None:
                    merged = json.loads(row[0] or "{}")
                    merged.update(values)
                    c.execute("UPDATE runs SET hparams=? WHERE id=?", (json.dumps(merged, default=str), run))
            touched = {it[1] for it in items if it[0] != END}
            if touched:
                c.executemany("UPDATE runs SET updated=? WHERE id=? AND status='running'", [(now, r) for r in touched])
            if ends:
                c.executemany("UPDATE runs SET status=?, finished=?, updated=?, eval_id=COALESCE(?, eval_id), error=?,"
                              " traceback=?, output=?, argtext=CASE WHEN ?='done' THEN NULL ELSE argtext END"
                              " WHERE id=?", ends)
        for rt, v in last.items():  # only now that it is committed
            self._counts[rt] = v[6] + v[0]


def _encode(kind: str, payload: Any) -> tuple[str | None, bytes | None]:
    """Turn a queued payload into (meta JSON, data bytes) — off the caller's thread."""
    if kind == "image":
        from .encode import image_png

        data, (h, w, ch) = image_png(payload)
        return json.dumps({"height": h, "width": w, "channels": ch}), data
    if kind == "png":  # already encoded (PIL images, matplotlib figures)
        data, (h, w, ch) = payload
        return json.dumps({"height": h, "width": w, "channels": ch}), data
    if kind == "histogram":
        # sums of huge values overflow to inf: stored as JSON Infinity (Python reads it back), never refused
        return json.dumps(payload, allow_nan=True), None
    if kind == "text":
        return None, payload.encode("utf-8")
    raise ValueError(f"unknown log event kind {kind!r}")


# -- one flusher thread for every sink of the process -------------------------------------
_sinks: dict[str, Sink] = {}
_sinks_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None


class _Discard:
    """Where logs go when the store cannot take them (read-only, unusable): nowhere, and
    without piling up in memory while the computation goes on."""

    index = None

    def __init__(self) -> None:
        self.q: deque = deque(maxlen=0)

    def flush(self, timeout: float | None = None) -> int:
        return 0


DISCARD: Any = _Discard()  # stands where a Sink goes (sink_for)


def sink_for(index: Any) -> Sink:
    if getattr(index, "discard_logs", False):
        return DISCARD  # what a run uses of a sink: q, flush, index (None)
    key = str(index.path)
    s = _sinks.get(key)
    if s is None:
        with _sinks_lock:
            s = _sinks.get(key)
            if s is None:
                s = _sinks[key] = Sink(index)
                _hook_exit()
    if _thread is None:  # first sink, or a forked child (threads do not survive fork)
        _ensure_thread()
    return s


_exit_hooked = False


def _hook_exit() -> None:
    """The last flush at exit, registered with the first sink (never by ``import memolab``)."""
    global _exit_hooked
    if not _exit_hooked:
        _exit_hooked = True
        atexit.register(_at_exit)


def _ensure_thread() -> None:
    global _thread, _ticked
    if _thread is None or not _thread.is_alive():
        with _sinks_lock:
            if _thread is None or not _thread.is_alive():
                _ticked = time.monotonic()  # (its first round: within an interval)
                _thread = threading.Thread(target=_loop, name="memolab-log-flusher", daemon=True)
                _thread.start()


def ensure_ticking() -> bool:
    """The flusher thread runs (started if need be), and calls ``tickers`` about once a second:
    the one thread a computation starts; the others start from it when their work is due
    (``store.ticker``: a lease's heartbeat; ``system``: the sampler of a run that lasts).
    False while it is held up (no round for ``3 * INTERVAL``: a write waiting for a busy
    database): the caller then starts its own thread."""
    if _thread is None or not _thread.is_alive():
        _ensure_thread()
        return True
    return time.monotonic() - _ticked < 3 * INTERVAL


#: called by the flusher thread on each round (each about ``INTERVAL`` apart): what starts the
#: threads of work found due (a heartbeat, the system sampler), so that none starts for less
tickers: list[Callable[[], None]] = []


def wake() -> None:
    if _thread is None:
        _ensure_thread()
    _wake.set()


def _loop() -> None:
    while True:
        _wake.wait(INTERVAL)
        _wake.clear()
        tick_if_due()
        for s in list(_sinks.values()):
            try:
                s.flush()
            except Exception:  # the flusher thread's loop: never let it die
                # records were put back; a busy database is retried on the next tick
                swallowed("a flush of the logs (retried on the next round)")
                time.sleep(0.05)
            tick_if_due()


#: ``time.monotonic()`` of the flusher's last round of ``tickers``
_ticked = 0.0


def tick_if_due() -> None:
    """(the flusher thread) Run ``tickers`` if a round is due: before and between its flushes,
    and every 256 records of a long one."""
    global _ticked
    now = time.monotonic()
    if now - _ticked < INTERVAL / 2:
        return
    _ticked = now
    for tick in list(tickers):
        try:
            tick()
        except Exception:  # the flusher thread's loop: what a ticker starts (threads) must never kill it
            swallowed(f"the flusher's round of {tick!r}")


def flush_all(timeout: float | None = None) -> None:
    """Write every queued log record of this process now (blocking; see ``Sink.flush`` for ``timeout``)."""
    for s in list(_sinks.values()):
        s.flush(timeout)


#: called first at exit, before the last flush: the runs module ends the process run here
#: (it registers itself; this module never imports it, since it imports this one)
before_exit: list[Callable[[], None]] = []


def _at_exit() -> None:
    for hook in list(before_exit):
        try:
            hook()
        except Exception:  # an exit hook: the flush below must still run
            swallowed("tracking.sink: _at_exit")  # the flush below must still run
    for s in list(_sinks.values()):
        try:
            s.flush()
        except Exception:  # an exit hook: it must never break the program's exit
            swallowed("tracking.sink: _at_exit")


def _after_fork() -> None:
    # The child inherits copies of the parent's queues (already owned by the parent)
    # and no flusher thread; start clean.
    global _thread, _sinks_lock, _wake
    for s in _sinks.values():
        s.q.clear()
        # the parent's count of points written per (run, tag): numbering the child's points from
        # it would give both processes the same (run, tag, step, seq) key; the store's is exact
        s._counts.clear()
        s._lock = threading.Lock()
    _sinks_lock = threading.Lock()
    _wake = threading.Event()
    _thread = None


_mp_hooked = False


def _before_fork() -> None:
    # A multiprocessing (fork) child leaves through os._exit, which skips atexit, so its
    # logs would be lost; multiprocessing runs its own finalizers first. The registry of
    # those is emptied in the child before the target runs, so the finalizer is added by
    # an after-fork callback, registered here once multiprocessing is in use.
    global _mp_hooked
    if not _mp_hooked:
        import sys

        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(_mp_child, _mp_child)
            _mp_hooked = True


def _mp_child(_: Any) -> None:
    import multiprocessing.util as util

    util.Finalize(None, _at_exit, exitpriority=100)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork)


_beats.ticker = ensure_ticking
tickers.append(_beats.beat_due)
