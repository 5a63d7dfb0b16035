"""The ``@memo`` decorator: key a call, look it up, compute on a miss, store.

Data flows one way: bound arguments → key (function symbol, code digest,
argument digest, schema) → store → result. A hit in the same process is an
argument hash plus an unpickle from memory; a hit in a new process reads the
index and the blobs; a miss computes under a per-key lease so concurrent
callers compute it once.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import os
import sqlite3
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union, overload

from . import codegraph, config, files, hashing
from .errors import CodeChanged, MemolabWarning, StoreMiss, Unloadable
from .explain import Explanation, explain_key, miss_record, pending_miss, with_before
from .store import Key, Store, get_store, runtime_info, signing
from .store.sqlite import NEWEST_ID_SQL as _NEWEST_ID_SQL, insert_miss
from .summary import summarize
from .text import short_repr  # here before ``text``; kept for who imports it from memo
from .tracking import runs as _runs

F = TypeVar("F", bound=Callable[..., Any])

class MemoFunction:
    """A memoized function. Call it like the original; see ``explain``, ``fresh``, ``clear``."""

    def __init__(self, fn: Callable[..., Any], *, ignore: Sequence[str] = (), version: Optional[str] = None,
                 deps: Iterable[Any] = (), store: Union[None, str, os.PathLike] = None,
                 version_sensitivity: Optional[str] = None) -> None:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"@memo cannot memoize generator function {fn.__qualname__!r}: a generator is consumed lazily, so there is "
                "no single result to store. Return a list (or another container) instead.")
        if not callable(fn):
            raise TypeError(f"@memo needs a function, got {type(fn).__qualname__}")
        self.fn = fn
        self.signature = inspect.signature(fn)
        unknown = [n for n in ignore if n not in self.signature.parameters]
        if unknown:
            raise TypeError(f"@memo(ignore=...) names {unknown} which are not parameters of {fn.__qualname__}")
        self.ignore = frozenset(ignore)
        params = list(self.signature.parameters.values())
        plain = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
        self._fast_names: Optional[Tuple[str, ...]] = tuple(p.name for p in params) if plain else None
        # positional slots exist only for positional-or-keyword parameters (they come first)
        self._fast_npos = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in params)
        self._defaults = tuple((p.name, p.default) for p in params if p.default is not p.empty)
        self._defaults_or_required = frozenset(p.name for p in params)
        self.version = None if version is None else str(version)
        self.deps = tuple(deps)
        if version_sensitivity is not None and version_sensitivity not in config.VERSION_SENSITIVITIES:
            raise ValueError(f"version_sensitivity must be one of {config.VERSION_SENSITIVITIES}, "
                             f"not {version_sensitivity!r}")
        self.version_sensitivity = version_sensitivity
        self.symbol = codegraph.symbol_of(fn)
        # A callable object (a bound method, a partial, an instance with __call__)
        # carries inputs of its own: it is hashed with the arguments on every call.
        self._implicit: Optional[Any] = None if codegraph._is_code(codegraph._unwrap(fn)) else fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self._store_path = store
        self._store_cache: Tuple[Any, Optional[Store]] = (None, None)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<memo {self.symbol}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return _BoundMemo(self, obj)

    def __reduce__(self) -> Any:
        # Sent to another process (a Dask worker, a process pool): the store handle,
        # its connections and in-memory copies never travel. A memoized function its
        # module exposes under its own name goes by reference, so the other process
        # imports that module and calls the very same memo (same key). One in
        # ``__main__`` (a script, a notebook) cannot be imported there: it goes by value
        # (``cloudpickle``, which Dask and Ray use, carries the function itself), and
        # the other process rebuilds the memo around it.
        module, qualname = self.fn.__module__, self.fn.__qualname__
        # (``__mp_main__`` is a spawned child's copy of the script: no other process imports it either)
        if module not in ("__main__", "__mp_main__") and _lookup(module, qualname) is self:
            return _memo_by_name, (module, qualname)
        return _rebuild_memo, (self.fn, tuple(sorted(self.ignore)), self.version, self.deps, self._store_path,
                               self.version_sensitivity)

    # -- key -------------------------------------------------------------------------
    def store(self) -> Store:
        # The default store follows the working directory, the settings and the
        # environment (the store, and the team store in front of it); the pid is in the
        # cache key because a forked child must not share our connections.
        if self._store_path is not None:
            where: Any = (self._store_path, config.pid())
        else:
            env = config.environ_bytes
            where = (config.generation(), env(b"MEMOLAB_STORE"), env(b"MEMOLAB_REMOTE"), env(b"MEMOLAB_REMOTE_BLOBS"),
                     os.getcwd(), config.pid())
        cached, store = self._store_cache
        if cached != where or store is None:
            store = get_store(self._store_path)
            self._store_cache = (where, store)
        return store

    def code_version(self) -> codegraph.CodeVersion:
        return codegraph.function_code(self.fn, self.deps, self.version_sensitivity)

    def _code_digest(self, cv: codegraph.CodeVersion) -> str:
        return cv.digest if self.version is None else f"{cv.digest}+v{self.version}"

    def bind(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> inspect.BoundArguments:
        """Bind with defaults applied; arguments always in signature order (the key depends on it)."""
        fast = self._fast_names
        if fast is not None and len(args) <= self._fast_npos:
            # ``Signature.bind`` costs more than the rest of a hit: for plain
            # signatures bind by hand, and fall back to it for anything unusual.
            values = dict(zip(fast, args))
            ok = True
            for k, v in kwargs.items():
                if k in values or k not in self._defaults_or_required:
                    ok = False
                    break
                values[k] = v
            if ok:
                for k, d in self._defaults:
                    if k not in values:
                        values[k] = d
                if len(values) == len(fast):
                    return inspect.BoundArguments(self.signature, {k: values[k] for k in fast})  # type: ignore[arg-type]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.fn.__qualname__}(): {e}") from None
        bound.apply_defaults()
        return bound

    def key(self, *args: Any, **kwargs: Any) -> Key:
        """The store key this call would use (function, code digest, argument digest, schema)."""
        return self._key(self.bind(args, kwargs))[0]

    def _named(self, bound: inspect.BoundArguments) -> List[Tuple[str, Any]]:
        named = [(n, v) for n, v in bound.arguments.items() if n not in self.ignore]
        if self._implicit is not None:
            named.append((_IMPLICIT, self._implicit))
        return named

    def _key(self, bound: inspect.BoundArguments) -> Tuple[Key, Dict[str, str], codegraph.CodeVersion]:
        cv = self.code_version()
        args_digest, per_arg = hashing.hash_arguments(self._named(bound))
        return (self.symbol, self._code_digest(cv), args_digest, hashing.KEY_SCHEMA), per_arg, cv

    # -- calling ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return self._call_async(args, kwargs, force=False)
        return self._call(args, kwargs, force=False)

    def fresh(self, *args: Any, **kwargs: Any) -> Any:
        """Recompute this call and overwrite what is stored."""
        if self.is_async:
            return self._call_async(args, kwargs, force=True)
        return self._call(args, kwargs, force=True)

    # The sync and async paths differ only in how they wait for another process
    # and how they call ``fn``; everything else is shared below.
    def _call(self, args: Sequence[Any], kwargs: Dict[str, Any], force: bool) -> Any:
        call, value = self._prepare(args, kwargs, force)
        if call is None:
            return value
        owner = ""
        while True:
            try:
                # A hit is one read: no lease, no owner id (which reads /proc) made for it.
                row = None if force else call.store.lookup(call.key)
                if row is not None:
                    state = "hit"
                elif self._lease_free(call):
                    state, owner = "free", ""
                else:
                    owner = owner or call.store.owner_id()
                    state, row = call.store.acquire(call.key, owner, force, looked_up=True,
                                                    on_owner=self._miss_writer(call))
                if state == "hit":
                    found, value = self._load(call.store, call.key, row)
                    if found:
                        return value
                    if _again(call):
                        continue
                    state = "unstored"
            except (sqlite3.Error, OSError, UnicodeDecodeError) as e:  # StoreUnavailable is an OSError
                if self._store_trouble(call, e):
                    continue  # the key's damaged row was taken out of use: claim it afresh
                return self.fn(*call.bound.args, **call.bound.kwargs)
            if state == "unstored":
                return self.fn(*call.bound.args, **call.bound.kwargs)
            t0, run = self._start(call)
            ev, token = _enter(call, run)
            c0 = time.perf_counter()
            try:
                value = self.fn(*call.bound.args, **call.bound.kwargs)
            except BaseException as e:
                _running.reset(token)
                call.store.note_duration(call.key, time.perf_counter() - c0)
                self._failed(call, owner, run, e)
                raise
            _running.reset(token)
            call.store.note_duration(call.key, time.perf_counter() - c0)
            self._done(call, owner, value, t0, run, ev)
            return value

    async def _call_async(self, args: Sequence[Any], kwargs: Dict[str, Any], force: bool) -> Any:
        call, value = self._prepare(args, kwargs, force)
        if call is None:
            return value
        import asyncio  # imported here: asyncio alone costs 30 ms of `import memolab`

        # one owner per task: two coroutines on one thread must not share a lease
        task_owner = f"{call.store.owner_id()}:{id(asyncio.current_task())}"
        owner = task_owner
        delay = 0.01
        miss: Any = None
        while True:
            try:
                row = None if force else call.store.lookup(call.key)
                if row is not None:
                    state = "hit"
                elif self._lease_free(call):
                    state, owner = "free", ""
                else:
                    owner = task_owner
                    miss = miss or self._miss_writer(call)
                    state, row = call.store.try_acquire(call.key, owner, force, on_owner=miss)
                if state == "hit":
                    found, value = self._load(call.store, call.key, row)
                    if found:
                        return value
                    if _again(call):
                        continue
                    state = "unstored"
            except (sqlite3.Error, OSError, UnicodeDecodeError) as e:
                if self._store_trouble(call, e):
                    continue
                return await self.fn(*call.bound.args, **call.bound.kwargs)
            if state == "unstored":
                return await self.fn(*call.bound.args, **call.bound.kwargs)
            if state == "wait":
                await asyncio.sleep(delay)  # never block the event loop while another process computes
                delay = min(delay * 1.5, 0.25)
                continue
            t0, run = self._start(call)
            ev, token = _enter(call, run)
            c0 = time.perf_counter()
            try:
                value = await self.fn(*call.bound.args, **call.bound.kwargs)
            except BaseException as e:
                _running.reset(token)
                call.store.note_duration(call.key, time.perf_counter() - c0)
                self._failed(call, owner, run, e)
                raise
            _running.reset(token)
            call.store.note_duration(call.key, time.perf_counter() - c0)
            self._done(call, owner, value, t0, run, ev)
            return value

    def _store_trouble(self, call: "_Call", e: BaseException) -> bool:
        """The store failed this call: True to claim again (once: the key's row held text that
        does not decode and was taken out of use), else warn and let the caller compute unstored."""
        from .store.health import take_out_of_use

        if isinstance(e, UnicodeDecodeError) and not call.retried:
            call.retried.append(True)
            if take_out_of_use(call.store, call.key, f"undecodable text in the index ({e})"):
                return True
        self._store_unusable(e)
        return False

    def _store_unusable(self, e: BaseException) -> None:
        # A full disk, an unwritable, read-only, damaged or newer index must cost
        # the cache, never the value: compute without a lease and without storing.
        # Once per store and problem: a loop of calls must not drown in warnings.
        from .store.health import warn_unusable

        warn_unusable(self.symbol, e, stacklevel=5)  # _store_unusable, _store_trouble, _call, __call__, the caller

    def _prepare(self, args: Sequence[Any], kwargs: Dict[str, Any], force: bool) -> Tuple[Optional["_Call"], Any]:
        """Key the call. A hit on this process's in-memory copies returns (None, value)."""
        bound = self.bind(args, kwargs)
        hashed_files = files.encoded
        key, per_arg, cv = self._key(bound)
        store = self.store()
        if not force:
            found, value = store.load_from_memory(key)
            if found:
                hashing.remember_loaded(value, key)
                return None, value
        return _Call(bound, key, per_arg, cv, store, force, files.encoded != hashed_files, [], [], [], []), None

    def _start(self, call: "_Call") -> Tuple[float, Any]:
        """We own the key's lease (its miss recorded with it), or need none (a quick
        function): open a run for its logs."""
        t0 = time.time()
        return t0, _runs.begin(self.symbol, call.key, call.bound.arguments, call.store)

    def _lease_free(self, call: "_Call") -> bool:
        """A miss of a quick function (``Store.is_quick``) computes without a lease: its miss
        is recorded with its result, in one transaction instead of two."""
        if call.force or not call.store.is_quick(call.key):
            return False
        writer = self._miss_writer(call)
        call.pending[:] = [] if writer is None else [writer]
        return True

    def _failed(self, call: "_Call", owner: str, run: Any, error: Optional[BaseException] = None) -> None:
        call.store.release(call.key, owner)
        self._write_pending(call)
        _runs.end(run, "failed", error=error)

    def _write_pending(self, call: "_Call") -> None:
        """The miss record of a lease-free miss that did not ride with a stored result."""
        if not call.pending:
            return
        write = call.pending.pop()
        try:
            with call.store.index.write() as c:
                write(c)
        except Exception:
            pass  # the explanation is advisory: never fail the call over it

    def _done(self, call: "_Call", owner: str, value: Any, t0: float, run: Any,
              ev: Optional["Running"] = None) -> None:
        try:
            self._finish(call, owner, value, t0, run, ev)
        finally:
            self._write_pending(call)

    def _finish(self, call: "_Call", owner: str, value: Any, t0: float, run: Any, ev: Optional["Running"]) -> None:
        if not call.force and not _known_absent(call) and self._unloadable(call, value):
            call.store.release(call.key, owner)
            _runs.end(run, "done", None)
            return
        if call.files and not self._same_files(call):
            # A file argument was rewritten between keying and reading: the result
            # belongs to neither content, so it is returned but not stored.
            warnings.warn(f"{self.symbol}: a memolab.File/Dir argument changed while the function ran; the result "
                          "is returned but not stored", MemolabWarning, stacklevel=4)
            call.store.release(call.key, owner)
            _runs.end(run, "done", None)
            return
        # A run that logged nothing is written with the result, in its transaction, and
        # so is a lease-free miss's record.
        rider = _runs.rider(run, call.key)
        ride = getattr(call.store, "ride_along", None) if rider is not None or call.pending else None
        if ride is not None:
            ride(rider if not call.pending else _with_pending(call.pending, rider))
        try:
            eval_id = self._save(call.store, call.key, owner, value, call.bound, call.per_arg, call.cv, t0, call)
        finally:
            if ride is not None:
                ride(None)
        if eval_id is not None and ev is not None:
            ev.stored()
        _runs.end(run, "done", eval_id, written=rider if ride is not None and eval_id is not None else None)

    def _unloadable(self, call: "_Call", value: Any) -> bool:
        """The same result was stored before and could not be rebuilt (a ``__setstate__`` that
        raises): storing it again would only be refused again on the next call, so the value is
        returned unstored. "The same" is the same pickle payload; a different one is stored."""
        from .store.health import unloadable

        prev = unloadable(call.store, call.key)
        if prev is None:
            return False
        why, payload_digest = prev
        try:
            from . import pickling
            from .store import digest_bytes

            if digest_bytes(pickling.dumps_with_refs(value)[0]) != payload_digest:
                return False
        except Exception:
            return False  # cannot even be pickled: ``_save`` says why
        warnings.warn(f"{self.symbol}: result not stored: the same result stored before could not be rebuilt ({why}), "
                      "so it is computed on every call. Make its class load again (or return plain data).",
                      MemolabWarning, stacklevel=5)
        return True

    def _same_files(self, call: "_Call") -> bool:
        """Do the arguments (their files) still hash to the key's argument digest?"""
        try:
            return hashing.hash_arguments(self._named(call.bound))[0] == call.key[2]
        except Exception:  # a file vanished: not what the key says either
            return False

    def _load(self, store: Store, key: Key, row: Dict[str, Any]) -> Tuple[bool, Any]:
        try:
            value = store.load(key, row)
        except CodeChanged as e:
            # Code the result refers to changed: an ordinary miss, not damage.
            store.mark_corrupt(key, row, e.reason, status="stale")
            return False, None
        except Unloadable as e:
            # The result's own code refused to rebuild it: not damage, and the same
            # value stored again would be refused again (see ``_unloadable``).
            warnings.warn(f"{self.symbol}: stored result #{row['id']} cannot be used ({e.reason}); recomputing",
                          MemolabWarning, stacklevel=4)
            store.mark_corrupt(key, row, e.reason, status="unloadable")
            return False, None
        except (ValueError, TypeError, KeyError, IndexError) as e:
            # An index row that does not decode (damaged JSON or sizes): a miss
            # whose recomputation replaces the row, never an error out of the call.
            warnings.warn(f"{self.symbol}: stored result #{row.get('id')} cannot be used (damaged index row: "
                          f"{type(e).__name__}: {e}); recomputing", MemolabWarning, stacklevel=4)
            store.mark_corrupt(key, row, f"damaged index row: {e}")
            return False, None
        except StoreMiss as e:
            if self._row_replaced(store, key, row):
                # Another process cleared, collected or recomputed this row (and
                # its blobs) while we read it: nothing is damaged, read again.
                return False, None
            warnings.warn(f"{self.symbol}: stored result #{row['id']} cannot be used ({e.reason}); recomputing",
                          MemolabWarning, stacklevel=4)
            store.mark_corrupt(key, row, e.reason)
            return False, None
        store.count_hit(row["id"])
        hashing.remember_loaded(value, key, _result_token(row), row["id"])
        return True, value

    @staticmethod
    def _row_replaced(store: Store, key: Key, row: Dict[str, Any]) -> bool:
        try:
            now = store.index.lookup(key)
        except Exception:
            return False
        return now is None or now["id"] != row["id"]

    def _miss_writer(self, call: "_Call") -> Optional[Callable[[sqlite3.Connection], None]]:
        """Why this call misses, recorded with the lease we are about to take, in its
        transaction (a lease-free miss: with its result); None if it cannot be
        explained. A miss of code this process has seen stored, whose key has no row
        at all (the common one: new arguments), is explained when asked
        (``explain.settle``), from its key and argument snapshot; any other is
        explained now (bounded: indexed reads of the nearest evaluation)."""
        store, key = call.store, call.key
        try:
            if (not call.force and (key[0], key[1]) in store.stored_codes and store.index.known_absent(key)
                    and hasattr(store.index, "nearest")):
                # the evaluations that exist now, before this miss stores its own
                text = with_before(pending_miss(key, self._call_snapshot(call), call.cv.sensitivity),
                                   store.index.conn().execute(_NEWEST_ID_SQL).fetchone()[0])
            else:
                text = _json(miss_record(store, key, self._call_snapshot(call), call.cv, forced=call.force))
        except Exception:  # explaining must never stop the computation
            return None
        symbol = self.symbol

        def write(c: sqlite3.Connection) -> None:
            try:
                insert_miss(c, symbol, text)
            except sqlite3.Error:
                pass  # the lease (or the result) matters, the explanation does not

        return write

    def _call_snapshot(self, call: "_Call") -> Dict[str, List[str]]:
        """``_arg_snapshot`` of a call, made once for its miss record and its result's row."""
        if not call.snapshot:
            call.snapshot.append(self._arg_snapshot(call.bound, call.per_arg))
        return call.snapshot[0]

    def _arg_snapshot(self, bound: inspect.BoundArguments, per_arg: Dict[str, str]) -> Dict[str, List[str]]:
        return {n: [d, short_repr(bound.arguments[n] if n in bound.arguments else self._implicit)]
                for n, d in per_arg.items()}

    def _save(self, store: Store, key: Key, owner: str, value: Any, bound: inspect.BoundArguments,
              per_arg: Dict[str, str], cv: codegraph.CodeVersion, t0: float,
              call: Optional["_Call"] = None) -> Optional[int]:
        t1 = time.time()
        info = runtime_info()
        snapshot = {
            "deps": cv.deps,
            "args": self._call_snapshot(call) if call is not None else self._arg_snapshot(bound, per_arg),
            "ignored": sorted(self.ignore),
            "version": self.version,
            "result": short_repr(value),
            "result_summary": summarize(value),  # "state_dict: 6 tensors, 1.2 MB" for the dashboard
            # digests of the result's arrays/tensors: a loaded copy passed to
            # another memoized function is then hashed in O(1) (hashing.remember_loaded)
            "result_digest": hashing.result_token(value),
        }
        sources = {d: (sym, cv.sources[sym]) for sym, d in cv.deps.items() if sym in cv.sources}
        fields = {
            "started": t0, "finished": t1, "duration": t1 - t0,
            "host": info["host"], "python": info["python"],
            "versions": _versions_json(info["memolab"]),
            "snapshot": _json(snapshot),
        }
        try:
            eval_id = store.save(key, owner, value, fields, sources)
            hashing.note_result(key, snapshot["result_digest"], eval_id)
        except Exception as e:
            store.release(key, owner)
            from .pickling import find_unpicklable

            path, reason = find_unpicklable(value)
            where = f" at {path}" if path else ""
            if config.settings().warn_unstorable:
                warnings.warn(f"{self.symbol}: result not stored{where}: {reason or e}. The computed value is returned "
                              "but the next call will recompute it.", MemolabWarning, stacklevel=5)
            return None
        store.stored_codes.add((key[0], key[1]))  # this code's later misses can be explained when asked
        return eval_id

    # -- inspection ------------------------------------------------------------------
    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        """Would this call hit? If not, why: new arguments (which), or which code changed (with a diff)."""
        bound = self.bind(args, kwargs)
        key, per_arg, cv = self._key(bound)
        return explain_key(self.store(), key, self._arg_snapshot(bound, per_arg), cv)

    def clear(self) -> int:
        """Forget every stored evaluation of this function; returns how many."""
        return self.store().clear(self.symbol)

    def evaluations(self) -> List[Dict[str, Any]]:
        return self.store().index.evaluations(self.symbol)


class Running:
    """The evaluation being computed in this context (``running()``): what
    ``memolab.checkpoint`` files its checkpoints under."""

    __slots__ = ("key", "store", "run", "force", "on_stored")

    def __init__(self, key: Key, store: Store, run: Any, force: bool) -> None:
        self.key = key
        self.store = store
        self.run = run  # the tracking run handle (or None), whose logs a resumed computation continues
        self.force = force  # computed by ``fresh()``: start over, whatever was checkpointed
        self.on_stored: List[Callable[[], None]] = []

    def stored(self) -> None:
        """The result is stored: run what waited for that (dropping checkpoints)."""
        for cb in self.on_stored:
            try:
                cb()
            except Exception:  # housekeeping must never fail a call that succeeded
                pass


_running: "contextvars.ContextVar[Optional[Running]]" = contextvars.ContextVar("memolab_evaluation", default=None)


def running() -> Optional[Running]:
    """The memoized evaluation computing in this context (a miss in progress), or None."""
    return _running.get()


def _enter(call: "_Call", run: Any) -> Tuple[Running, Any]:
    ev = Running(call.key, call.store, run, call.force)
    return ev, _running.set(ev)


#: the argument name under which a memoized callable object's own state is keyed
_IMPLICIT = "<callable>"


def _with_pending(pending: List[Callable[[sqlite3.Connection], None]],
                  rider: Optional[Callable[[sqlite3.Connection], None]]) -> Callable[[sqlite3.Connection], None]:
    """A rider writing a lease-free miss's record, then ``rider`` (a run's)."""
    def both(c: sqlite3.Connection) -> None:
        pending[0](c)
        if rider is not None:
            rider(c)
        pending.clear()  # reached only if nothing raised: the savepoint keeps both

    return both


class _Call(NamedTuple):
    """One call on its way through a miss."""

    bound: inspect.BoundArguments
    key: Key
    per_arg: Dict[str, str]
    cv: codegraph.CodeVersion
    store: Store
    force: bool
    #: the key hashed File/Dir arguments: re-check them before storing
    files: bool = False
    #: non-empty once a damaged row of this key was taken out of use (at most once per call)
    retried: List[bool] = []
    #: the argument snapshot, once made (``_call_snapshot``)
    snapshot: List[Dict[str, List[str]]] = []
    #: a lease-free miss's record, until written (with the result, or alone)
    pending: List[Callable[[sqlite3.Connection], None]] = []
    #: one entry per stored row of the key this call found unusable (``_again``)
    loads: List[bool] = []


def _lookup(module: str, qualname: str) -> Any:
    """``module.qualname`` if that module is loaded and has it, else None."""
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or part == "<locals>":
            return None
        obj = getattr(obj, part, None)
    return obj


def _memo_by_name(module: str, qualname: str) -> "MemoFunction":
    """Unpickling a memo sent by reference: import its module, take the memo it exposes."""
    import importlib

    importlib.import_module(module)
    obj = _lookup(module, qualname)
    if not isinstance(obj, MemoFunction):
        raise TypeError(f"{module}:{qualname} is not a memoized function in this process")
    return obj


def _rebuild_memo(fn: Callable[..., Any], ignore: Sequence[str], version: Optional[str], deps: Iterable[Any],
                  store: Union[None, str, os.PathLike], version_sensitivity: Optional[str]) -> "MemoFunction":
    """Unpickling a memo sent by value: the same options around the function that came with it."""
    return MemoFunction(fn, ignore=ignore, version=version, deps=deps, store=store,
                        version_sensitivity=version_sensitivity)


class _BoundMemo:
    """``obj.method`` for a memoized method: ``self`` is an argument like any other."""

    __slots__ = ("_memo", "_obj")

    def __init__(self, memo_fn: MemoFunction, obj: Any) -> None:
        self._memo = memo_fn
        self._obj = obj

    def __reduce__(self) -> Any:
        return _BoundMemo, (self._memo, self._obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._memo(self._obj, *args, **kwargs)

    def fresh(self, *args: Any, **kwargs: Any) -> Any:
        return self._memo.fresh(self._obj, *args, **kwargs)

    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        return self._memo.explain(self._obj, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._memo, name)


def _result_token(row: Dict[str, Any]) -> Optional[List[str]]:
    if "result_token" in row and signing.secret() is None:
        # the two answers of most small results, without parsing: no token recorded
        # (nothing the result walk remembers) or one without arrays or tensors
        text = row["result_token"]
        if text is None:
            return None
        if text == "[]":
            return []
    import json

    if not signing.snapshot_trusted(row):
        return None  # a signed store's older rows: their snapshot is not signed, so not believed
    try:
        if "result_token" in row:  # extracted by the lookup: a hit parses a short list, not the snapshot
            token = json.loads(row["result_token"]) if row["result_token"] else None
        else:
            token = json.loads(row.get("snapshot") or "{}").get("result_digest")
        if token is not None:
            for d in token:  # a damaged snapshot must cost the O(1) re-hash, never the call
                bytes.fromhex(d)
        return token
    except Exception:
        return None


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)  # insertion order: arguments stay in signature order


_VERSIONS: Dict[Tuple[str, ...], str] = {}


def _versions_json(memolab_version: str) -> str:
    """``{"memolab": ..., "numpy": ..., "torch": ...}`` as JSON, made once per set of versions."""
    loaded = _loaded_versions()
    k = (memolab_version, *loaded.items())  # type: ignore[arg-type]
    text = _VERSIONS.get(k)  # type: ignore[arg-type]
    if text is None:
        text = _VERSIONS[k] = _json({"memolab": memolab_version, **loaded})  # type: ignore[index]
    return text


#: stored rows of one key a call may find unusable before it computes without the store
_LOADS_PER_CALL = 4


def _again(call: "_Call") -> bool:
    """A stored row of the call's key could not be used (and was taken out of use): look
    again? Bounded: a row the store cannot take out of use (a read-only store, a write that
    fails) would otherwise be found, and refused, forever."""
    call.loads.append(True)
    return len(call.loads) < _LOADS_PER_CALL


def _known_absent(call: "_Call") -> bool:
    """The call's lookup found no row at all for its key (``Index.known_absent``)."""
    known = getattr(call.store.index, "known_absent", None)
    return known is not None and known(call.key)


def _loaded_versions() -> Dict[str, str]:
    out = {}
    for name in ("numpy", "torch"):
        m = sys.modules.get(name)
        if m is not None:
            out[name] = getattr(m, "__version__", "?")
    return out


@overload
def memo(fn: F) -> F: ...
@overload
def memo(*, ignore: Sequence[str] = ..., version: Optional[Union[str, int]] = ..., deps: Iterable[Any] = ...,
         store: Union[None, str, os.PathLike] = ..., version_sensitivity: Optional[str] = ...) -> Callable[[F], F]: ...


def memo(fn: Optional[Callable[..., Any]] = None, *, ignore: Sequence[str] = (), version: Optional[Union[str, int]] = None,
         deps: Iterable[Any] = (), store: Union[None, str, os.PathLike] = None,
         version_sensitivity: Optional[str] = None) -> Any:
    """Persistently memoize ``fn``.

    ``ignore``: parameter names left out of the key (verbosity, devices, loggers).
    ``version``: a manual salt; bump it to invalidate every stored result.
    ``deps``: extra code the function depends on that static analysis cannot see.
    ``store``: a store directory for this function only.
    ``version_sensitivity``: how much of third-party package versions joins the key
    (``exact|minor|major|ignore``); defaults to ``configure(version_sensitivity=...)``.
    """
    def wrap(f: Callable[..., Any]) -> Any:
        return MemoFunction(f, ignore=ignore, version=None if version is None else str(version), deps=deps, store=store,
                            version_sensitivity=version_sensitivity)

    if fn is not None:
        return wrap(fn)
    return wrap
