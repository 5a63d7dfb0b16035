"""The ``@memo`` decorator: key a call, look it up, compute on a miss, store.

Data flows one way: bound arguments → key (function symbol, code digest,
argument digest, schema) → store → result. A hit in the same process is an
argument hash plus an unpickle from memory; a hit in a new process reads the
index and the blobs; a miss computes under a per-key lease so concurrent
callers compute it once.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast, overload

from .. import codegraph, distributed, hashing
from ..codegraph.where import unwrap
from ..errors import HashError, trimmed
from ..hashing import files
from ..inputs import expiry, reads
from ..inputs.implicit import parts as implicit_parts
from ..key import make as make_key
from ..settings import config
from ..settings.text import short_repr
from ..store import Key, Store, get_store, marks
from .call import IMPLICIT, ROUTES_PER_CALL, Call, Running, running
from .explain import Explanation, explain_key, shown_here
from .fasthits import CACHES, MISS, FastTable, eligible
from .lifecycle import drive_async, drive_sync, first_look, lifecycle
from .rows import memory_hit

__all__ = ["memo", "MemoFunction", "running", "Running", "short_repr"]  # the last three: here before call/text

F = TypeVar("F", bound=Callable[..., Any])

#: ``@memo(code=...)``: what of the code joins a key
CODE_MODES = ("digest", "version")

class MemoFunction:
    """A memoized function. Call it like the original; see ``explain``, ``fresh``, ``clear``."""

    def __init__(self, fn: Callable[..., Any], *, ignore: Sequence[str] = (), version: str | None = None,
                 deps: Iterable[Any] = (), store: None | str | os.PathLike[str] = None,
                 version_sensitivity: str | None = None, collective: bool | str = True,
                 global_rng: bool = True, env: Sequence[str] = (), code: str = "digest",
                 max_age: None | int | float | str | Any = None,
                 validate: Callable[[dict[str, Any]], Any] | None = None,
                 verbose: None | bool | int = None, keep: bool = False, team: bool = True) -> None:
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
        self._fast_names: tuple[str, ...] | None = tuple(p.name for p in params) if plain else None
        #: ``lambda a: {names[0]: a[0], ...}``: ``dict(zip(names, args))`` of the commonest call in
        #: one dict display (``bind``), a third of its instructions (no zip, no pair per argument)
        self._fast_dict = None if self._fast_names is None else _positional_dict(self._fast_names)
        # positional slots exist only for positional-or-keyword parameters (they come first)
        self._fast_npos = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in params)
        self._defaults = tuple((p.name, p.default) for p in params if p.default is not p.empty)
        #: (function, its ``__defaults__``, its ``__kwdefaults__``) as bound: new ones assigned
        #: (``fn.__defaults__ = ...``) change what the body computes, so they are bound (``_defaults_now``)
        self._defaults_src = _defaults_source(fn) if self._defaults else None
        self._defaults_or_required = frozenset(p.name for p in params)
        self.version = None if version is None else str(version)
        self.deps = tuple(deps)
        if version_sensitivity is not None and version_sensitivity not in config.VERSION_SENSITIVITIES:
            raise ValueError(f"version_sensitivity must be one of {config.VERSION_SENSITIVITIES}, "
                             f"not {version_sensitivity!r}")
        self.version_sensitivity = version_sensitivity
        #: inside a process group, every rank makes this call together (docs/distributed.md): True (every
        #: rank computes), "main_first"/"local_main_first" (computed once per job), False (rank-local)
        self.collective: bool | str = distributed.check_collective(collective)
        #: the global random generators the body draws from join the key (``globalrng``)
        self.global_rng = bool(global_rng)
        if isinstance(env, str) or not all(isinstance(v, str) and v for v in env):
            raise TypeError(f"@memo(env=...) takes a list of environment variable names, not {env!r}")
        #: environment variables whose values join the key
        self.env = tuple(env)
        if code not in CODE_MODES:
            raise ValueError(f"@memo(code=...) must be one of {CODE_MODES}, not {code!r}")
        if code == "version" and self.version is None:
            raise ValueError(f"@memo(code='version') on {fn.__qualname__}: keys calls by version= alone, ignoring the "
                             "code, so it needs version=... (bump it whenever a change of the code changes results)")
        #: "digest": the code digest joins the key; "version": only ``version`` does (docs/cache-rules.md)
        self.code = code
        #: stored results older than this many seconds are recomputed (``expiry``); None: never
        self.max_age = expiry.parse_max_age(max_age)
        if validate is not None and not callable(validate):
            raise TypeError(f"@memo(validate=...) takes a function of the stored evaluation's metadata, not {validate!r}")
        #: ``validate(metadata) -> bool``: False refuses a stored result (recomputed), as joblib's
        #: ``cache_validation_callback``
        self.validate = validate
        #: what its calls say on the ``memolab`` logger (``report``); None: ``configure(verbose=...)``
        self.verbose: int | None = _verbosity(verbose)
        #: every evaluation it stores is kept: gc never drops it (``store.marks``)
        self.keep = bool(keep)
        #: False: its results stay on this machine, never asked of nor published to the team store
        self.team = bool(team)
        # named after the user code it runs: a library decorator without functools.wraps
        # names every wrapper alike (``codegraph.runs``)
        self.symbol = codegraph.symbol_of(codegraph.runs(fn))
        _claim_symbol(self)
        reads.register(self)  # what a caller's hit compares the code and version it used with
        marks.declare(self.symbol, team=self.team, keep=self.keep)
        # A callable object (a bound method, a partial, an instance with __call__)
        # carries inputs of its own: it is hashed with the arguments on every call.
        self.implicit: Any | None = None if codegraph.is_code(unwrap(fn)) else fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self._store_path = store
        #: (``store``'s last question's answer, the store it opened for it): a plain attribute, read
        #: by every repeat hit (``calls/fasthits``)
        self.store_cache: tuple[Any, Store | None] = (None, None)
        functools.update_wrapper(self, fn)
        #: repeat hits of plain arguments (``fasthits``); None: this function cannot have one
        self._fast = FastTable() if eligible(self.implicit, self._defaults, self.is_async) else None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name not in CACHES:  # an option changed: the fast table's entries were made under the old one
            fast = self.__dict__.get("_fast")
            if fast is not None:
                fast.clear()

    def __repr__(self) -> str:
        return f"<memo {self.symbol}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return _BoundMemo(self, obj)

    def __memo_hash__(self) -> Any:
        # Passed as an argument (``run(step_fn=step)``), a memoized function counts as what it
        # runs: its code digest (everything it depends on, ``deps`` and ``version``), the defaults
        # it binds and a callable object's own state; never its name (an edit of a module's
        # function would keep its callers' keys).
        self._defaults_now()
        return ("memo", self.symbol, self.code_digest(), self._defaults, self.implicit)

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
        options = (tuple(sorted(self.ignore)), self.version, self.deps, self._store_path, self.version_sensitivity,
                   self.collective, self.global_rng, self.env, self.code, self.max_age, self.validate, self.verbose,
                   self.keep, self.team)
        if module in ("__main__", "__mp_main__") and _lookup(module, qualname) is self:
            # A script's memo: the standard pickler (``multiprocessing``'s pools, spawn or fork) can
            # carry no function of ``__main__`` by value, and cannot name ``self.fn`` (the script's
            # name holds the memo), so it goes as that name *and* as the function by value, in
            # bytes cloudpickle wrote: a pool's child has the script as its ``__main__`` and takes
            # its memo (warm graph, same key); a Dask or Ray worker has not and rebuilds it
            return _memo_from_script, (qualname, _by_value((self.fn, options)))
        return _rebuild_memo, (self.fn, *options)

    # -- key -------------------------------------------------------------------------
    def store(self) -> Store:
        # The default store follows the working directory, the settings and the
        # environment (the store, and the team store in front of it); the pid is in the
        # cache key because a forked child must not share our connections.
        path = self._store_path
        where = config.store_where() if path is None else _explicit_where(path)
        cached, store = self.store_cache
        if cached != where or store is None:
            store = get_store(self._store_path)
            self.store_cache = (where, store)
        return store

    def store_probe(self) -> tuple[Callable[[], Any], tuple[Any, Store | None]]:
        """What ``store`` asks to find its store (a function of nothing, whose answer is compared
        with the first item of ``store_cache``), and that cache: (its answer, the store it gave).
        A repeat hit (``calls/fasthits``) serves a store's copy only while ``store`` would return
        that very store: the same answer, the same cache. (Setting ``store`` empties the table.)"""
        path = self._store_path
        probe = config.store_where if path is None else functools.partial(_explicit_where, path)
        return probe, self.store_cache

    def code_version(self) -> codegraph.CodeVersion:
        if self.code == "version":  # keyed by ``version`` alone: the code is not even read
            return codegraph.CodeVersion("version", sensitivity=self.version_sensitivity or "ignore")
        return codegraph.function_code(self.fn, self.deps, self.version_sensitivity)

    def code_digest(self, cv: codegraph.CodeVersion | None = None) -> str:
        """The code part of this function's keys now (of ``cv``, its code version, if given)."""
        if cv is None:
            cv = self.code_version()
        return cv.digest if self.version is None else f"{cv.digest}+v{self.version}"

    def _defaults_now(self) -> None:
        """Bind the function's defaults anew where the program assigned new ones since they were
        bound (the key binds defaults: the old ones would key a call the body computes with the new)."""
        src = self._defaults_src
        if src is None or not _defaults_moved(src):
            return
        self.signature = inspect.signature(self.fn)  # (setting an option empties the repeat-hit table)
        self._defaults = tuple((p.name, p.default) for p in self.signature.parameters.values()
                               if p.default is not p.empty)
        self._defaults_src = _defaults_source(self.fn)
        if self._fast is not None and not eligible(self.implicit, self._defaults, self.is_async):
            self._fast = None  # (a default that is not a plain scalar; a table emptied is kept otherwise)

    def watch_defaults(self) -> None:
        """Read the function's defaults as raw bytes from now on, where they were read as attributes
        (the repeat-hit table's check, on every hit: ``fasthits``); for the defaults bound now."""
        src = self._defaults_src
        if src is not None and src[3] is None:
            now = _defaults_source(self.fn, view=True)
            if now is not None and now[1] is src[1] and now[2] is src[2]:  # (new ones: ``_defaults_now`` binds them)
                self._defaults_src = now

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        """Bind with defaults applied; arguments always in signature order (the key depends on it)."""
        arguments = self._arguments(args, kwargs)
        return inspect.BoundArguments(self.signature, arguments)  # (the signature ``_arguments`` bound with)

    def _arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``bind(args, kwargs).arguments``, without making the ``BoundArguments`` (a Python
        ``__init__``, 1,700 instructions): a call past memory makes it only if it computes
        (``Call.bound``)."""
        if self._defaults_src is not None:
            self._defaults_now()
        fast = self._fast_names
        if not kwargs and fast is not None and len(args) == len(fast):
            # every parameter given by position (the commonest call): nothing to reorder or default
            # (``_fast_dict`` is ``dict(zip(fast, args))`` for lengths equal, checked above)
            return self._fast_dict(args)  # type: ignore[misc]  # (set with fast)
        if fast is not None and len(args) <= self._fast_npos:
            # ``Signature.bind`` costs more than the rest of a hit: for plain
            # signatures bind by hand, and fall back to it for anything unusual.
            values = dict(zip(fast, args, strict=False))
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
                    return {k: values[k] for k in fast}
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.fn.__qualname__}(): {e}") from None
        bound.apply_defaults()
        return bound.arguments

    def key(self, *args: Any, **kwargs: Any) -> Key:
        """The store key this call would use (function, code digest, argument digest, schema)."""
        return self._key(self._arguments(args, kwargs))[0]

    def _named(self, arguments: dict[str, Any]) -> list[tuple[str, Any]]:
        ignore = self.ignore
        named = [(n, v) for n, v in arguments.items() if n not in ignore] if ignore else [*arguments.items()]
        if self.implicit is not None:
            named.append((IMPLICIT, self.implicit))
        # switches that change results (torch's default dtype, TF32, ...) while not at their
        # defaults, and the environment variables of ``env``: docs/cache-rules.md
        extra = implicit_parts(self.env)
        if extra:
            named.extend(extra)
        return named

    def _key(self, arguments: dict[str, Any], visit: list[Any] | None = None
             ) -> tuple[Key, dict[str, str], codegraph.CodeVersion, list[tuple[str, Any]]]:
        """The key of the bound ``arguments`` (``bind(...).arguments``). ``visit``: filled with what
        the argument hash walked through (``hashing.hash_arguments``)."""
        # (``code_version``'s commonest way without its call: a function keyed by its code)
        cv = codegraph.function_code(self.fn, self.deps, self.version_sensitivity) if self.code != "version" \
            else self.code_version()
        named = self._named(arguments)
        try:
            args_digest, per_arg = hashing.hash_arguments(named, "args", visit)
        except HashError as e:
            raise e.for_user() from None  # its remedies; trimmed in __call__
        code = cv.digest if self.version is None else self.code_digest(cv)  # (``code_digest``'s commonest answer)
        return make_key((self.symbol, code, args_digest, hashing.KEY_SCHEMA)), per_arg, cv, named

    # -- calling ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._fast  # a repeat hit of plain arguments (``fasthits``); a process group's: ``_call``
        if fast is not None and fast.entries and "torch.distributed" not in sys.modules:
            value = fast.hit(self, args, kwargs)
            if value is not MISS:
                return value
        if self.is_async:
            return self._acall(args, kwargs, False)
        try:
            return self._call(args, kwargs, False)
        except HashError as e:  # an argument memolab cannot key: the error at the caller's line
            if not getattr(e, "trim", False):
                raise  # raised by the body (an inner call's, already trimmed): untouched
            raise trimmed(e) from None

    def fresh(self, *args: Any, **kwargs: Any) -> Any:
        """Recompute this call and overwrite what is stored."""
        if self.is_async:
            return self._acall(args, kwargs, True)
        try:
            return self._call(args, kwargs, True)
        except HashError as e:
            if not getattr(e, "trim", False):
                raise
            raise trimmed(e) from None

    # The decision logic of a call past this process's memory is ``lifecycle.lifecycle``, one
    # generator for both: the sync call drives it in this thread, the async one in its task.
    # An in-memory hit returns before it (``_prepare``): no generator, no owner id.
    def _call(self, args: Sequence[Any], kwargs: dict[str, Any], force: bool) -> Any:
        if "torch.distributed" in sys.modules:  # a dict lookup: the seam of the distributed driver
            drive = distributed.collective_driver()  # None outside a group of 2+ ranks or when rank-local
            if drive is not None:
                if self.collective is False:
                    with distributed.rank_local():  # what its body calls is this rank's own too
                        return self._call(args, kwargs, force)

                def prepare(collective: bool) -> tuple[Call | None, Any]:
                    # a collective call: every rank keys it and takes the branch the group agrees
                    # on, no answer from this process's memory alone (another rank's may lack it)
                    if not collective:
                        return self._prepare(args, kwargs, force)
                    with distributed.keying():
                        return self._prepare(args, kwargs, force, memory=False)

                return drive(prepare, self.fn, distributed.mode_of(self.collective))
            fast = self._fast  # (outside a group of ranks: the table, as ``__call__`` asks it)
            if fast is not None and not force:
                value = fast.hit(self, tuple(args), kwargs)
                if value is not MISS:
                    return value
        call, value = self._prepare(args, kwargs, force)
        if call is None:
            return value
        found, first = first_look(call)  # (a store hit ends here: no generator)
        if found:
            return first
        return drive_sync(lifecycle(call, call.store.owner_id, first), self.fn, call.bound)

    async def _acall(self, args: Sequence[Any], kwargs: dict[str, Any], force: bool) -> Any:
        call, value = self._prepare(args, kwargs, force)  # keyed when awaited, as the function runs
        if call is None:
            return value
        import asyncio  # imported here: asyncio alone costs 30 ms of `import memolab`

        store = call.store

        def task_owner() -> str:
            # one owner per task: two coroutines on one thread must not share a lease
            return f"{store.owner_id()}:{id(asyncio.current_task())}"

        return await drive_async(lifecycle(call, task_owner), self.fn, call.bound)

    def _prepare(self, args: Sequence[Any], kwargs: dict[str, Any], force: bool,
                 memory: bool = True) -> tuple[Call | None, Any]:
        """Key the call. A hit on this process's in-memory copies returns (None, value) (``memory``)."""
        arguments = self._arguments(args, kwargs)
        signature = self.signature  # (the one they were bound with: ``Call.bound`` is made of both, if needed)
        hashed_files = files.encoded
        visit: list[Any] = []  # where a miss looks for results of other evaluations (memolab.inputs.upstream)
        key, per_arg, cv, named = self._key(arguments, visit)
        store = self.store()
        at = None if self.max_age is None and self.validate is None else expiry.now()  # (read once a call)
        if not force and memory and store.has_copy(key):  # (``memory_hit``'s first test: a store hit's call less)
            fresh = None if at is None else (lambda row: expiry.verdict(row, at, self.max_age, self.validate,
                                                                         self.symbol) is None)
            seen: list[Any] = []
            found, value = memory_hit(store, key, fresh, named, seen)
            if found:
                if at is None and self._fast is not None:
                    self._fast.admit(self, tuple(args), kwargs, key, cv, store, named, seen, value)  # (``fasthits``)
                return None, value
        # (the File/Dir arguments it hashed: their content is in the key, so no reads of its body;
        # none when the count is unchanged, ``encoded_since``'s own first test, without its call)
        own = files.encoded_since(hashed_files) if files.encoded != hashed_files else False
        return Call(self, signature, arguments, key, per_arg, cv, store, force, own, named, visit, at), None

    # -- inspection ------------------------------------------------------------------
    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        """Would this call hit? If not, why: new arguments (which), or which code changed (with a diff)."""
        bound = self.bind(args, kwargs)
        visit: list[Any] = []
        key, per_arg, cv, named = self._key(bound.arguments, visit)
        store = self.store()
        call = Call(self, bound.signature, bound.arguments, key, per_arg, cv, store, False, False, named, visit)
        row = None
        for _ in range(ROUTES_PER_CALL):  # where the call's global generator states send it
            row = call.accepted(store.index.lookup(call.key), store.index.lookup)  # (or accepted code's)
            if row is None or call.reroute(row) is None:
                break
        if row is not None:  # (expired, a file it read changed, found through an accept)
            from .acceptance import explain_found

            found = explain_found(call, row)
            if found is not None:
                return shown_here(found)
        return explain_key(store, call.key, call.call_snapshot(), cv, inputs=call.inputs())

    def accept(self, *args: Any, yes: bool = False, **kwargs: Any) -> dict[str, Any]:
        """Record that this function's current code gives the same results as the code a miss
        was compared with (``memolab accept``): later calls with this code use the evaluations
        stored under that code, without computing. With arguments, the miss of that call; with
        none (for a function that needs some), the function's last recorded miss, which must be
        of this code. Shows the diff, then asks (on a terminal) unless ``yes``; refuses without
        either. Returns the accept (``id``, ``fn``, ``new_code``, ``old_code``, ...).
        (A function with a parameter named ``yes`` passes it positionally here.)"""
        from .acceptance import accept_call

        return accept_call(self, args, kwargs, yes)

    def undo_accept(self, accept_id: int | None = None) -> list[dict[str, Any]]:
        """Take back the accepts that let this function's current code use results of other code
        (or the one numbered ``accept_id``): such calls miss again. Returns those taken back."""
        from .acceptance import undo_for

        return undo_for(self, accept_id)

    def clear(self) -> int:
        """Forget every stored evaluation of this function; returns how many."""
        return self.store().clear(self.symbol)

    def evaluations(self) -> list[dict[str, Any]]:
        """Every stored evaluation of this function (rows of the index), newest first; a table in a notebook."""
        return Evaluations(self.store().index.evaluations(self.symbol))


class Evaluations(list[dict[str, Any]]):
    """``MemoFunction.evaluations()``: a plain list of rows, shown as a table in a notebook."""

    def _repr_html_(self) -> str:
        from ..settings import hooks

        return cast(str, hooks.resolve(hooks.UPWARD["evaluations_html"])(self))


def _positional_dict(names: tuple[str, ...]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """``lambda a: {names[0]: a[0], ...}``, which is ``dict(zip(names, a))`` for ``len(a) == len(names)``."""
    assert all(n.isidentifier() for n in names)  # (a signature's parameter names, nothing else)
    return eval("lambda a: {" + ", ".join(f"{n!r}: a[{i}]" for i, n in enumerate(names)) + "}")  # type: ignore[no-any-return]  # noqa: S307


def _lookup(module: str, qualname: str) -> Any:
    """``module.qualname`` if that module is loaded and has it, else None."""
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or part == "<locals>":
            return None
        obj = getattr(obj, part, None)
    return obj


def _memo_by_name(module: str, qualname: str) -> MemoFunction:
    """Unpickling a memo sent by reference: import its module, take the memo it exposes."""
    import importlib

    importlib.import_module(module)
    obj = _lookup(module, qualname)
    if not isinstance(obj, MemoFunction):
        raise TypeError(f"{module}:{qualname} is not a memoized function in this process")
    return obj


def _by_value(value: Any) -> bytes | None:
    """``value`` (a function and its memo's options) by value: cloudpickle's bytes, or None where
    cloudpickle is missing or refuses it (a global the function reads, a ``validate`` lambda, cannot
    travel): then the name alone goes."""
    try:
        import cloudpickle  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        return cast(bytes, cloudpickle.dumps(value))
    except Exception as e:  # pickling by value runs the object's own code (its globals' __reduce__)
        import logging

        logging.getLogger("memolab").debug("memolab: %r cannot be pickled by value (%s): sent by name", value, e)
        return None


def _memo_from_script(qualname: str, by_value: bytes | None) -> MemoFunction:
    """Unpickling a script's memo: the script's own where this process runs the same script (a
    pool's child: its memo has its code graph built already), else the function that came by
    value with the same options (a Dask or Ray worker, or a process whose ``__main__`` is another
    program that happens to define a function of the same name)."""
    import pickle

    fn, options = pickle.loads(by_value) if by_value is not None else (None, ())
    for module in ("__main__", "__mp_main__"):
        obj = _lookup(module, qualname)
        if isinstance(obj, MemoFunction) and (fn is None or _same_code(obj.fn, fn)):
            return obj
    if fn is None:
        raise TypeError(f"__main__:{qualname} is not a memoized function in this process, and it could not be "
                        "sent by value (install cloudpickle)")
    return _rebuild_memo(fn, *options)


def _same_code(a: Any, b: Any) -> bool:
    """Do two functions run the same code (code objects compare by instructions, constants, names)?"""
    ca, cb = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return ca is not None and ca == cb


def _rebuild_memo(fn: Callable[..., Any], ignore: Sequence[str], version: str | None, deps: Iterable[Any],
                  store: None | str | os.PathLike[str], version_sensitivity: str | None,
                  collective: bool | str = True, global_rng: bool = True, env: Sequence[str] = (),
                  code: str = "digest", max_age: float | None = None,
                  validate: Callable[[dict[str, Any]], Any] | None = None,
                  verbose: int | None = None, keep: bool = False, team: bool = True) -> MemoFunction:
    """Unpickling a memo sent by value: the same options around the function that came with it."""
    return MemoFunction(fn, ignore=ignore, version=version, deps=deps, store=store,
                        version_sensitivity=version_sensitivity, collective=collective, global_rng=global_rng,
                        env=env, code=code, max_age=max_age, validate=validate, verbose=verbose, keep=keep, team=team)


def _explicit_where(path: Any) -> tuple[Any, int, int]:
    """``MemoFunction.store``'s question for a memo given its own store: its path, the settings'
    generation (a store that could not be used is opened again after ``configure()``; and a
    repeat hit's ``version_sensitivity`` is the settings' while it is unchanged) and the pid."""
    return path, config.generation(), config.pid()


def _verbosity(v: None | bool | int) -> int | None:
    """``@memo(verbose=...)``: None (the process's setting), True/False, or a level 0..2."""
    try:
        return cast("int | None", config.ENV["MEMOLAB_VERBOSE"].rule.check(v))
    except ValueError:
        raise TypeError(f"@memo(verbose=...) takes True, False or a level 0, 1 or 2, not {v!r}") from None


#: symbol -> the live memoized functions named so whose code memolab cannot see (a library
#: wrapper holding no visible user function): two of them would share every key
_opaque: dict[str, weakref.WeakSet[MemoFunction]] = {}


def _defaults_source(fn: Any, view: bool = False) -> tuple[Any, Any, Any, Any, bytes] | None:
    """The function whose defaults ``inspect.signature(fn)`` reports, with its ``__defaults__`` and
    ``__kwdefaults__`` now, then (``view``) a live view of those two slots as raw bytes
    (``dictversion``: reading them as attributes raises two audit events) or None where unsupported
    or not asked, and the bytes it shows now; None where they come from elsewhere (a
    ``__signature__``, a partial). (No view unless asked: making the first loads ``_ctypes``,
    which a script whose only call is a hit never needs.)"""
    target = inspect.unwrap(fn, stop=lambda f: hasattr(f, "__signature__"))
    if type(target) is not types.FunctionType or hasattr(target, "__signature__"):
        return None
    d, kw = target.__defaults__, target.__kwdefaults__
    v = codegraph.func_view(target) if view else None
    # (the source holds ``d`` and ``kw``: while they live no other object takes their addresses)
    return target, d, kw, None if v is None else v[8:], codegraph.func_slots(None, d, kw)[8:]


def _defaults_moved(src: tuple[Any, Any, Any, Any, bytes]) -> bool:
    """Were other defaults assigned to the function of ``_defaults_source``'s ``src`` since?
    (Written out in ``fasthits.FastTable.hit``: a call less on every repeat hit.)"""
    if src[3] is not None:
        return bool(src[3] != src[4])
    return src[0].__defaults__ is not src[1] or src[0].__kwdefaults__ is not src[2]


def _claim_symbol(m: MemoFunction) -> None:
    """Refuse a second live memoized function that could only be told from another by code
    memolab cannot see: both would have one name and one code digest, so one's stored
    results would be returned for the other's calls."""
    target = codegraph.runs(m.fn)
    if not callable(target) or codegraph.is_user_code(target) or "<locals>" not in getattr(target, "__qualname__", ""):
        return  # user code (its digest tells functions apart) or a library function of its own name
    live = _opaque.setdefault(m.symbol, weakref.WeakSet())
    for other in list(live):
        if other.fn is not m.fn:
            raise TypeError(
                f"@memo: {m.symbol} is a wrapper made by a library decorator that hides the function it runs "
                f"(no functools.wraps, no function in its closure); memolab cannot tell it from {other.fn!r}, "
                "another memoized wrapper of the same name, so they would share stored results. Put @memo "
                "directly on your function (innermost), make the decorator use functools.wraps, or memoize "
                "a named function that calls the wrapped one.")
    live.add(m)


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

    def accept(self, *args: Any, yes: bool = False, **kwargs: Any) -> dict[str, Any]:
        return self._memo.accept(self._obj, *args, yes=yes, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._memo, name)


@overload
def memo(fn: F) -> F: ...
@overload
def memo(*, ignore: Sequence[str] = ..., version: str | int | None = ..., deps: Iterable[Any] = ...,
         store: None | str | os.PathLike[str] = ..., version_sensitivity: str | None = ...,
         collective: bool | str = ..., global_rng: bool = ..., env: Sequence[str] = ...,
         code: str = ..., max_age: None | int | float | str | Any = ...,
         validate: Callable[[dict[str, Any]], Any] | None = ...,
         verbose: None | bool | int = ..., keep: bool = ..., team: bool = ...) -> Callable[[F], F]: ...


def memo(fn: Callable[..., Any] | None = None, *, ignore: Sequence[str] = (), version: str | int | None = None,
         deps: Iterable[Any] = (), store: None | str | os.PathLike[str] = None,
         version_sensitivity: str | None = None, collective: bool | str = True, global_rng: bool = True,
         env: Sequence[str] = (), code: str = "digest", max_age: None | int | float | str | Any = None,
         validate: Callable[[dict[str, Any]], Any] | None = None,
         verbose: None | bool | int = None, keep: bool = False, team: bool = True, **unknown: Any) -> Any:
    """Persistently memoize ``fn``.

    ``ignore``: parameter names left out of the key (verbosity, devices, loggers).
    ``version``: a manual salt; bump it to invalidate every stored result.
    ``deps``: extra code the function depends on that static analysis cannot see.
    ``store``: a store directory for this function only.
    ``version_sensitivity``: how much of third-party package versions joins the key
    (``exact|minor|major|ignore``); defaults to ``configure(version_sensitivity=...)``.
    ``collective``: inside a ``torch.distributed`` group, every rank makes the call and the
    ranks agree on hit or miss; ``False`` for a call one rank makes alone; ``"main_first"``:
    computed once per job by rank 0 while the others wait and load it (``"local_main_first"``:
    by one rank per store the ranks share), for bodies that run no collectives (docs/distributed.md).
    ``global_rng``: the global random generators (torch, numpy, ``random``) a body draws from
    join its key, and a hit leaves them where the body did; ``False`` ignores them
    (docs/cache-rules.md, "Global random generators").
    ``env``: environment variables whose values join the key.
    ``code``: ``"digest"`` (the default: the code and everything it depends on join the key) or
    ``"version"``: only ``version`` does, the code is ignored (joblib's ``ignore_code``; an edit that
    changes results is then served stale results until ``version`` is bumped: docs/cache-rules.md).
    ``max_age``: stored results older than this (seconds, a ``timedelta``, or ``"30m"``, ``"12h"``,
    ``"1d"``) are recomputed: for functions that read the outside world.
    ``validate``: ``validate(metadata) -> bool`` on every hit (the stored evaluation's ``id``,
    ``started``, ``finished``, ``duration``, ``age``); False recomputes it.
    ``verbose``: what its calls say on the ``memolab`` logger (True/1: misses and what takes
    time, 2: every call past this process's memory, False/0: nothing); None follows
    ``configure(verbose=...)`` / ``$MEMOLAB_VERBOSE`` (docs/logging.md, "What memolab says").
    ``keep``: every evaluation it stores is kept: ``gc`` and team gc never drop it (HitSave's
    ``@experiment``; ``memolab unkeep EVAL`` takes one off).
    ``team``: ``False`` keeps its results on this machine: never asked of, nor uploaded to, the
    team store, nor by ``sync`` or ``pull`` (HitSave's ``local_only``).
    """
    if unknown:  # @memo(ignor=["x"]): "did you mean ignore?"
        from ..settings.text import did_you_mean

        bad = sorted(unknown)[0]
        raise TypeError(f"memo() got an unexpected keyword argument {bad!r}"
                        + did_you_mean(bad, sorted(memo.__kwdefaults__ or ())))

    def wrap(f: Callable[..., Any]) -> Any:
        return MemoFunction(f, ignore=ignore, version=None if version is None else str(version), deps=deps, store=store,
                            version_sensitivity=version_sensitivity, collective=collective, global_rng=global_rng,
                            env=env, code=code, max_age=max_age, validate=validate, verbose=verbose, keep=keep,
                            team=team)

    if fn is not None:
        return wrap(fn)
    return wrap
