"""Where memolab's third-party integrations register: one table, by dotted path.

The core (``hashing``, ``pickling``) never imports an integration. Each entry
names, as ``"module:function"``, what to run the first time a type from a
third-party module is hashed or pickled; only then is the integration imported
(the way ``dask.tokenize`` registers pandas and numpy lazily). So ``import
memolab`` imports neither numpy nor torch, and the integrations depend on the
core, never the other way round.

Keys are the third-party module: a top-level package (``"numpy"``) or, for
hashing, a dotted prefix (``"torch.optim"``). Hashing hooks are called with no
arguments; pickling hooks with ``register_reducer``; ``computing`` hooks, with
no arguments, before a memoized function computes once their module has been
imported (``before_computing``). An integration may add
further hooks of its own when it runs (torch adds ``torch.optim``).
"""
from __future__ import annotations

import functools
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..errors import swallowed

LAZY_HOOKS: dict[str, dict[str, str]] = {
    # run before the first type with a class from the module in its MRO is hashed
    "hashing": {
        "numpy": "memolab.hashing.arrays:register",
        "torch": "memolab.torch.registry:register",
        "torchdata": "memolab.torch.iteration:register_hashing",  # torchdata.nodes loaders and nodes
        # a DistributedDataParallel module: what it wraps and how it syncs (docs/distributed.md)
        "torch.nn.parallel": "memolab.torch.distributed:register_hashing",
        "pyarrow": "memolab.arrow.keys:register_arrow",  # tables, batches and arrays by content
        # Hugging Face datasets: tables by content, once per Arrow table (identity cache)
        "datasets": "memolab.hf.keys:register",
        # Lightning modules and datamodules without their Trainer; a Trainer argument refused
        "lightning": "memolab.lightning.keys:register",
        "pytorch_lightning": "memolab.lightning.keys:register_pytorch_lightning",
        "lightning_fabric": "memolab.lightning.keys:register_lightning_fabric",
        # OmegaConf/Hydra configs by their resolved values, types and structure, not their internals
        "omegaconf": "memolab.omegaconf.keys:register",
        # models, generation configs, fast tokenizers, TrainingArguments by their declared content
        "transformers": "memolab.transformers.keys:register",
        "pandas": "memolab.pandas.keys:register",  # derived values pandas caches as it is used left out
        # live handles refused with what to pass instead (docs/hashing.md, "Live handles")
        "optuna": "memolab.handles.optuna:register",
        "sqlite3": "memolab.handles.databases:register_sqlite3",
        "psycopg": "memolab.handles.databases:register_psycopg",
        "sqlalchemy": "memolab.handles.databases:register_sqlalchemy",
        "polars": "memolab.handles.polars:register",  # a LazyFrame reads files its plan only names
    },
    # run the first time an object of a type from the top-level module is pickled
    "pickling": {
        "numpy": "memolab.pickling.arrays:register",
        # dataclasses compares its sentinels by identity: copies made by unpickling would drop fields
        "dataclasses": "memolab.pickling:register_dataclasses",
        "torch": "memolab.torch.pickling:register",
        # Hugging Face datasets stored as their Arrow data, not as paths into HF's cache
        "datasets": "memolab.hf.store:register",
        # a StatefulDataLoader or torchdata.nodes loader stopped mid-epoch keeps its position
        "torchdata": "memolab.torch.iteration:register_pickling",
        # an Accelerate-prepared loader stopped mid-epoch (its GradientState is process-wide)
        "accelerate": "memolab.torch.iteration:register_accelerate_pickling",
    },
    # run before a memoized function computes, once the module has been imported (hooks called
    # with no arguments): integrations that must act inside computations
    "computing": {
        # HF's cache names made inside a computation carry memolab's code digest
        "datasets": "memolab.hf.cache:install",
        # files pyarrow opens natively (pd.read_parquet, pyarrow.parquet): noted as the body's reads
        "pyarrow.parquet": "memolab.arrow.reads:install",
    },
    # process-wide random generators a memoized body may draw from (``memolab.inputs.globalrng``):
    # registered once their module is imported, also in the middle of a body (called with no
    # arguments; each registers its generators and wraps the library's seed functions)
    "global_rng": {
        "random": "memolab.inputs.rnglibs:register_random",
        "numpy": "memolab.inputs.rnglibs:register_numpy",
        "torch": "memolab.torch.rng:register_global",
    },
    # how a stored argument state goes back into the caller's object of a type from the module
    # (``memolab.inputs.mutations``: arguments a memoized body changed), registered on first need
    "restoring": {
        "torch": "memolab.torch.restore:register",
        "numpy": "memolab.numpy.restore:register",
    },
    # switches of a library that change results (torch's default dtype, TF32, determinism):
    # registered before the first key made once the module is imported (``memolab.inputs.implicit``)
    "switches": {
        "torch": "memolab.torch.numerics:register",
        "torch.nn.modules.module": "memolab.torch.modules:register_switches",  # process-wide module hooks
    },
    # a library decorator's arguments kept in its wrapper's closure (``@torch.autocast(...)``): the
    # readers of their configuration, registered before a graph reads one (``codegraph.decorators``)
    "decorators": {
        "torch": "memolab.torch.decorators:register",
        "torch._dynamo": "memolab.torch.decorators:register_dynamo",
    },
    # who drives a memoized call once the module is imported: a function returning the driver, or
    # None while it does not apply (``memolab.distributed.collective_driver``)
    "drivers": {
        # inside an initialised process group of 2+ ranks, the ranks agree on hit or miss; outside
        # one, where Lightning's launcher may start ranks inside a call, they agree afterwards
        "torch.distributed": "memolab.torch.distributed:active_driver",
    },
    # is this process one whose exit runs no atexit handlers? (asked once its module is imported,
    # when a store is opened: its usage is then written after each hit, ``store.usage``)
    "exits": {
        "ray": "memolab.ray:killed_at_exit",  # a Ray worker is killed, never exits
    },
}

#: What a lower layer asks of a layer above it, by dotted path: each layer imports only the
#: layers below it (docs/architecture.md, ``tests/test_architecture.py``), so where a lower
#: layer's operation must end in a higher one's, it names the function here and ``resolve``s it
#: when it runs (the way the store builds a team store from ``memolab.team.layered:layered``).
UPWARD: dict[str, str] = {
    # ``Store.clear(fn)``: the function's finished runs and their logs go with its results
    "purge_logs": "memolab.tracking.retention:purge",
    # ``Store.collect_garbage``: runs whose evaluation is gone lose their logs
    "purge_orphan_logs": "memolab.tracking.retention:purge_orphans",
    # ``Explanation._repr_html_`` and ``Evaluations._repr_html_``: notebooks' HTML is a face's
    "explanation_html": "memolab.ui.display:explanation",
    "evaluations_html": "memolab.ui.display:evaluations_table",
}

#: the tables whose hooks run once their module is imported, watched while a body computes
_ON_IMPORT = ("computing", "global_rng")
_done: set = set()  # (table, module) run already
#: modules whose import the watcher saw (imported while it was in ``sys.meta_path``: from the
#: first memoized computation on, never from ``import memolab``)
_seen: set = set()
#: the sets of top-level modules a computation in progress tried to import (``note_imports``)
_noting: list = []


def note_imports() -> set:
    """Start noting the top-level modules imported (or tried) from now on; ``end_imports`` stops.
    The watcher stays in ``sys.meta_path`` while any set is open."""
    names: set = set()
    _noting.append(names)
    if _watcher not in sys.meta_path:
        sys.meta_path.insert(0, _watcher)
    return names


def end_imports(names: set) -> set:
    try:
        _noting.remove(names)
    except ValueError:
        pass
    return names


#: the ``global_rng`` modules already imported when ``import memolab`` ran (``note_present``):
#: only read, nothing installed, so whatever imported them may also have seeded them
_before_memolab: frozenset[str] = frozenset()


def note_present() -> None:
    """Note which ``global_rng`` modules are imported already (called once by ``import memolab``,
    which installs nothing: the watcher goes into ``sys.meta_path`` at the first memoized
    computation, ``before_computing``)."""
    global _before_memolab
    _before_memolab = frozenset(m for m in LAZY_HOOKS["global_rng"] if m in sys.modules)


def imported_after_memolab(module: str) -> bool:
    """Was ``module`` imported after ``import memolab`` (or not at all yet)?"""
    return module not in _before_memolab


def import_was_watched(module: str) -> bool:
    """Did the watcher see ``module`` imported (so nothing ran between its import and its hooks)?"""
    return module in _seen


def before_computing() -> None:
    """Run, once each, the ``computing`` and ``global_rng`` hooks whose module has been
    imported (a dict lookup per hook and miss until then; nothing once all have run). A
    module not imported yet is watched: a computation that imports it in its body must
    not run its first minutes without the hook (nor draw from a generator unwatched), so
    the hook runs right after that import."""
    if _all_watched_done():
        if _running:
            for table in _ON_IMPORT:
                _await_running(table)
        return
    for table in _ON_IMPORT:
        for module in LAZY_HOOKS[table]:
            if (table, module) not in _done:
                if module in sys.modules:
                    _run_on_import(module, (table,))
                elif _watcher not in sys.meta_path:
                    sys.meta_path.insert(0, _watcher)
    if _running:
        for table in _ON_IMPORT:
            _await_running(table)


def _all_watched_done() -> bool:
    return all((t, m) in _done for t in _ON_IMPORT for m in LAZY_HOOKS[t])


def pending(table: str) -> list:
    """The modules of ``table`` whose hook has not run: the very list ``run_imported`` walks (and
    shrinks as hooks run), for a caller that tests it on every call before calling that."""
    got = _pending.get(table)
    if got is None:
        got = _pending[table] = [m for m in LAZY_HOOKS[table] if (table, m) not in _done or (table, m) in _running]
    return got


def run_imported(table: str) -> None:
    """Run, once each, the hooks of ``table`` whose module has been imported (called on every
    key for the ``switches`` table: one dict lookup per hook not run yet, nothing once all ran)."""
    waiting = pending(table)
    modules = sys.modules
    for module in waiting:  # (no copy while none is imported: every key asks for ``switches``)
        if module in modules:
            for m in list(waiting):  # a copy: running a hook takes it out of the list
                if m in modules:
                    _run_on_import(m, (table,))  # (one another thread is running stays pending: waited for)
            return


#: table -> its modules whose hook has not run (``run_imported``'s list, shrunk as they run)
_pending: dict[str, list] = {}


#: (table, module) -> (the thread running its hook now, set once the hook has run). A hook is
#: marked done as it starts (so that the imports it makes do not run it again), but what it
#: registers exists only once it returns: another thread that asks for the table's hooks meanwhile
#: waits for it (``_await_running``). Without that wait, a Dask worker's second task thread began
#: its body while the first registered numpy's generator (its proof of an unseeded state takes
#: milliseconds): the body's entry states lacked numpy, its end found numpy registered, counted
#: it as drawn from, and stored the result under a dependency on an "unseeded" numpy no later
#: call matched. Each later call was routed to a key of its own and computed again.
_running: dict[tuple[str, str], tuple[int, threading.Event]] = {}
_running_lock = threading.Lock()
#: how long a thread waits for another's hook (a bound against a hang: a hook imports and
#: registers, in milliseconds); past it, the waiter goes on without what that hook registers
HOOK_WAIT = 60.0


def _run_on_import(module: str, tables: tuple[str, ...] = _ON_IMPORT) -> None:
    for table in tables:
        target = LAZY_HOOKS[table].get(module)
        if target is None:
            continue
        if (table, module) in _done:
            if _running:
                _await_running(table, module)
            continue
        with _running_lock:  # two threads asking at once: one runs the hook, the other waits for it
            if (table, module) in _done:
                continue
            _done.add((table, module))
            ran = _running[(table, module)] = (threading.get_ident(), threading.Event())
        try:
            if _watcher in sys.meta_path and _all_watched_done() and not _noting:
                sys.meta_path.remove(_watcher)  # nothing left to watch for
            run(target)
        finally:
            pending = _pending.get(table)
            if pending is not None and module in pending:
                pending.remove(module)  # (only now: until then ``run_imported`` of other threads waits for it)
            with _running_lock:
                del _running[(table, module)]
            ran[1].set()


def _await_running(table: str, module: str | None = None) -> None:
    """Wait until the hooks of ``table`` (of ``module`` only, if given) that other threads are
    running have run (bounded by ``HOOK_WAIT``); a thread's own hook in progress (an import it
    makes runs this) is not waited for."""
    me = threading.get_ident()
    with _running_lock:
        others = [ran for (t, m), (who, ran) in _running.items() if t == table and m == (module or m) and who != me]
    for ran in others:
        if not ran.wait(HOOK_WAIT):
            import logging

            logging.getLogger("memolab").debug("hooks: another thread's hook still runs after %s s; going on", HOOK_WAIT)


class _ImportWatcher:
    """A meta path finder that finds nothing itself: for a module of the ``computing`` or
    ``global_rng`` table it asks the finders after it, and gives the spec a loader of its
    own making whose ``exec_module`` runs the hooks once the module has been executed.

    Only a plain file loader (``SourceFileLoader``, ``SourcelessFileLoader``,
    ``ExtensionFileLoader``: state = name + path) is replaced, by a new instance of the
    same class; the loader the other finder made is left as it was, and a loader of any
    other kind (a zipimporter, the frozen or builtin importer, an editable install's) is
    neither replaced nor modified: its module's hooks run at the next memoized call
    (``before_computing``, ``run_imported``) instead of right after its import."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if _noting and path is None:  # a top-level module not imported yet: a computation tries it
            for names in _noting:
                names.add(name)
        if not any(name in LAZY_HOOKS[t] and (t, name) not in _done for t in _ON_IMPORT):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = _own_loader(spec.loader)
        if loader is None:
            return spec
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _seen.add(name)
            _run_on_import(name)

        loader.exec_module = exec_module  # the instance memolab made just now, for this import only
        spec.loader = loader
        return spec


def _own_loader(loader: Any) -> Any:
    """A new loader equal to ``loader`` (a plain file loader), or None for any other kind."""
    from importlib import machinery

    if type(loader) not in (machinery.SourceFileLoader, machinery.SourcelessFileLoader,
                            machinery.ExtensionFileLoader):
        return None
    if vars(loader).keys() != {"name", "path"}:  # state of its own we would not copy
        return None
    return type(loader)(loader.name, loader.path)


_watcher = _ImportWatcher()


def exits_without_atexit() -> bool:
    """Will this process end without running its ``atexit`` handlers (``LAZY_HOOKS["exits"]``)?"""
    for module, target in LAZY_HOOKS["exits"].items():
        if module in sys.modules:
            try:
                if resolve(target)():
                    return True
            except Exception:  # an integration's probe of a third-party library (its state, its API of any version)
                swallowed("hooks: exits_without_atexit")
    return False


def run(target: str, *args: Any) -> None:
    """Import ``target`` (``"package.module:function"``) and call it with ``args``."""
    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)(*args)


def resolve(target: str) -> Any:
    """The object ``target`` (``"package.module:name"``) names, its module imported."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def hook(target: str, *args: Any) -> Callable[[], None]:
    """A registration to run later: ``run(target, *args)`` when called."""
    return functools.partial(run, target, *args)
