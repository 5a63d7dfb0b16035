"""Serialising results for the store: faithful round-trips or a clean miss.

Pickle protocol 5 with two additions, both made in ``reducer_override`` and
dispatched on ``type(obj)`` through a registry (never ``obj.__class__``, which
proxies override):

* **Code references.** Every function and class from *user* code is written as
  (symbol, code digest). On load the symbol is resolved in the running program
  and its digest recomputed; if it is gone or differs, loading raises
  ``CodeChanged`` and the memo layer recomputes. Library code (stdlib,
  site-packages, memolab itself) is pickled by name as usual: its version is
  part of the function's key already, and hashing library source on every load
  would cost more than it protects.
* **By-value code.** Functions and classes that cannot be imported by name
  (``__main__``, notebooks, ``<locals>``, lambdas, ``type()``-made classes)
  travel as their code: code-object fields (not ``marshal``, whose bytes depend
  on reference counts), globals they use, closure cells, class dicts. The
  stored bytes are deterministic (no tracker ids; frozenset constants sorted).
  An *anchor* is stored with them: the object itself when it is reachable by
  name, else the enclosing importable function or class. If the loading
  process has a live anchor with a different digest, that is ``CodeChanged``;
  a live, unchanged definition is used instead of a rebuilt copy, so
  ``isinstance`` keeps working in the defining script.
* **Buffers.** numpy arrays and torch tensors (``memolab.torch.pickling``,
  registered lazily) go out of band as raw buffers, one per underlying memory
  block, so views keep sharing storage after a load. The store puts each
  buffer in its own content-addressed blob and maps it back without a copy.

Code objects are only valid for the interpreter that compiled them: a by-value
function stored under Python 3.11 is a ``CodeChanged`` miss under 3.12.

Besides this module (the pickler, its reductions, and the rebuilders, which
stay here because stored pickles name them ``memolab.pickling:<name>``):
``locate`` (where code lives), ``sources`` (source fingerprints), ``refs``
(checks without unpickling), ``arrays`` (numpy, registered lazily).
"""
from __future__ import annotations

import functools
import importlib
import io
import pickle
import sys
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CodeChanged, StoreMiss
from ..hashing.reducers import Reducer, reducers
from ..settings.hooks import HOOK_WAIT, LAZY_HOOKS, hook
from .canon import canon, global_names
from .locate import anchor_of, code_digest, is_library_module, lookup_symbol, name_of, walk_qualname
from .refs import check_refs as check_refs, load_error as load_error  # (X as X: also imported from here)
from .sources import source_changed, source_fingerprint

#: Buffers smaller than this stay inside the pickle: a blob per tiny array costs more than it saves.
OUT_OF_BAND_MIN = 64 * 1024
#: Bump when the encoding changes; stored in the index next to each payload.
FORMAT = "p2"

_PYVER = "{}.{}".format(*sys.version_info[:2])

# the table is shared with ``hashing`` (memolab/hashing/reducers.py), which must know the types rebuilt here
_reducers = reducers
_lazy: dict[str, Callable[[], None]] = {}


def register_reducer(type_: type, reducer: Reducer | None) -> None:
    """Reduce exact instances of ``type_`` with ``reducer(pickler, obj)``.

    The reducer returns a reduce tuple, or ``NotImplemented`` for pickle's own
    handling; ``None`` as the reducer means "always pickle's own handling"."""
    _reducers[type_] = reducer


def register_lazy(toplevel: str, register: Callable[[], None]) -> None:
    """Run ``register()`` the first time an object of a type from ``toplevel`` is pickled."""
    _lazy[toplevel] = register


# -- the pickler ----------------------------------------------------------------------

class Pickler(pickle.Pickler):
    """Protocol-5 pickler with code references and out-of-band buffers.

    ``refs`` collects every code reference written (``{symbol: digest}``, with
    the source file and fingerprint added for by-value code), so the index can
    check them, and ``explain`` say why, without unpickling.
    """

    def __init__(self, file: Any, buffers: list[memoryview]) -> None:
        self.out_of_band = buffers
        super().__init__(file, protocol=5, buffer_callback=self._buffer)
        self.refs: dict[str, Any] = {}
        # id(class) -> (its slot in this dump, the class): see _class_skeleton
        self.by_value_classes: dict[int, tuple[list[Any], type]] = {}
        # id(module globals) -> (the one namespace its by-value functions share on load, the globals)
        # id(set) -> (the canon.Sorted wrapper that writes it, the set)
        self.sorted_sets: dict[int, tuple[Any, Any]] = {}
        self.shared_globals: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}

    def _buffer(self, buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True  # in band
        self.out_of_band.append(raw)
        return False

    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        try:
            reducer = _reducers[t]
        except KeyError:
            reducer = _resolve(t)
        if reducer is None:
            return NotImplemented
        return reducer(self, obj)


#: held while a type's reducer is resolved, its lazy registration included (re-entrant): a thread
#: pickling a numpy array while another registered numpy's reducers (``_lazy`` is left as one starts)
#: cached pickle's own handling for the type, for the life of the process (arrays in band, no blobs)
_resolving = threading.RLock()


def _resolve(t: type) -> Reducer | None:
    if not _resolving.acquire(timeout=HOOK_WAIT):  # (a bound against a hang: one takes milliseconds)
        return None  # pickle's own handling this time, nothing cached
    try:
        return _reducers[t] if t in _reducers else _resolve_locked(t)  # (another thread's, while it waited)
    finally:
        _resolving.release()


def _resolve_locked(t: type) -> Reducer | None:
    top = t.__module__.partition(".")[0] if isinstance(t.__module__, str) else ""
    reg = _lazy.pop(top, None)
    if reg is not None:
        reg()
        if t in _reducers:
            return _reducers[t]
    r: Reducer | None = None
    if issubclass(t, type):
        r = _reduce_class  # metaclasses (ABCMeta, …) make classes: classes are code
    elif any("__class__" in vars(k) for k in t.__mro__[:-1]):
        r = _reduce_honest  # a proxy lying about its class
    _reducers[t] = r
    return r


def _reduce_honest(p: Pickler, obj: Any) -> Any:
    """object's default reduction, but by ``type(obj)``: copyreg's uses ``obj.__class__``."""
    t = type(obj)
    if t.__reduce_ex__ is not object.__reduce_ex__ or t.__reduce__ is not object.__reduce__:  # type: ignore[comparison-overlap]
        return NotImplemented  # the class's own reduction knows best
    getstate = getattr(t, "__getstate__", None)  # by the type: a proxy's __getattr__ would forward
    if getstate is not None:
        return _new_instance, (t,), getstate(obj)
    # Python 3.10 (object.__getstate__ is 3.11's): a plain instance's state is its __dict__
    if any("__slots__" in vars(k) for k in t.__mro__[:-1]):
        return NotImplemented  # slots would be lost here: the default reduction
    return _new_instance, (t,), object.__getattribute__(obj, "__dict__") or None


def _new_instance(cls: type) -> Any:
    # Deliberately not __init__: unpickling restores state, it does not construct.
    return cls.__new__(cls)  # type: ignore[call-overload]  # any class: object's __new__ or its own


# -- functions and classes ---------------------------------------------------------------

def _reduce_code_object(p: Pickler, obj: Any) -> Any:
    """Functions and classes: pickle's own by-name, a checked reference, or by value."""
    if isinstance(obj, type) and not obj.__flags__ & _HEAPTYPE:
        return NotImplemented  # a C type: pickle's by-name save, or its clear error
    modname, qual = name_of(obj)
    if modname != "__main__" and "<" not in qual:
        ok, found = lookup_symbol(modname, qual, import_=False)
        if ok and found is obj:
            if is_library_module(modname):
                return NotImplemented
            d = code_digest(obj)
            p.refs[f"{modname}:{qual}"] = d
            return _load_ref, (modname, qual, d)
    if isinstance(obj, type) and issubclass(obj, _enum_base()):
        raise pickle.PicklingError(f"cannot store enum class {modname}:{qual} by value; define it in an importable module")
    anchor = anchor_of(obj)
    d = code_digest(obj)
    anchor_obj = obj if anchor == qual else (walk_qualname(sys.modules[modname], anchor) if anchor else None)
    anchor_digest = d if anchor == qual else (code_digest(anchor_obj) if anchor else None)
    source = source_fingerprint(anchor_obj, anchor) if anchor else None
    rec = (modname, qual, d, anchor, anchor_digest, source)
    if anchor:
        p.refs[f"{modname}:{anchor}"] = [anchor_digest, *source] if source else anchor_digest
    if isinstance(obj, type):
        slot, _ = p.by_value_classes.setdefault(id(obj), ([], obj))
        return _class_by_value(obj, rec, slot, p)
    return _function_by_value(obj, rec, p)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made by a class statement or type()


def _reduce_class(p: Pickler, obj: Any) -> Any:
    return _reduce_code_object(p, obj)


@functools.lru_cache(maxsize=1)
def _enum_base() -> type:
    import enum

    return enum.Enum


def _load_ref(modname: str, qual: str, digest: str) -> Any:
    ok, obj = lookup_symbol(modname, qual, import_=True)
    if not ok:
        raise CodeChanged(f"`{modname}:{qual}` no longer exists")
    if code_digest(obj) != digest:
        raise CodeChanged(f"`{modname}:{qual}` changed since the result was stored")
    return obj


def _live_definition(rec: tuple) -> Any | None:
    """The live object to use instead of a rebuilt one, or None; ``CodeChanged`` if the anchor changed."""
    modname, qual, _digest_, anchor, anchor_digest, source = rec
    if anchor is None:
        return None
    ok, live = lookup_symbol(modname, anchor, import_=modname != "__main__")
    if not ok:
        if modname == "__main__" or modname not in sys.modules:
            # Another program, or a module we cannot import: the stored code
            # stands alone, unless the file it came from is here and changed.
            why = source_changed(anchor, source)
            if why:
                raise CodeChanged(f"`{modname}:{anchor}` {why}")
            return None
        raise CodeChanged(f"`{modname}:{anchor}` no longer exists")
    if code_digest(live) != anchor_digest:
        raise CodeChanged(f"`{modname}:{anchor}` changed since the result was stored")
    return live if anchor == qual else None


# Objects built from stored code that still await their state. A live definition
# returned instead of a skeleton must never have stored state written into it.
_skeletons: weakref.WeakSet[Any] = weakref.WeakSet()


_CODE_FIELDS = tuple(f for f in (
    "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_nlocals", "co_stacksize", "co_flags",
    "co_code", "co_consts", "co_names", "co_varnames", "co_filename", "co_name", "co_qualname",
    "co_firstlineno", "co_linetable", "co_exceptiontable", "co_freevars", "co_cellvars",
) if hasattr(_reduce_class.__code__, f))


def _reduce_code(p: Pickler, code: types.CodeType) -> Any:
    values = []
    for f in _CODE_FIELDS:
        v = getattr(code, f)
        if f == "co_consts":
            v = tuple(canon(c, p) for c in v)
        values.append(v)
    return _make_code, (_PYVER, values)


def _make_code(pyver: str, values: Sequence[Any]) -> types.CodeType:
    if pyver != _PYVER:
        raise CodeChanged(f"stored code was compiled by Python {pyver}; this is Python {_PYVER}")
    return _reduce_class.__code__.replace(**dict(zip(_CODE_FIELDS, values, strict=False)))


_EMPTY_CELL = "__memolab_empty_cell__"


def _function_by_value(fn: types.FunctionType, rec: tuple, p: Pickler) -> Any:
    code = fn.__code__
    g = fn.__globals__
    # Functions of one module share one namespace after a load too, as they did
    # before (a global one of them rebinds is seen by the others). The dict is
    # written nearly empty (pickle memoises it: one per module per payload);
    # each function adds the globals it uses when its state is set.
    shared, _ = p.shared_globals.setdefault(id(g), ({"__name__": rec[0]}, g))
    used = {}
    for n in global_names(code):
        if n in g and n not in used and n != "__builtins__":
            used[n] = canon(g[n], p)
    state = {
        "globals": used,
        "defaults": fn.__defaults__,
        "kwdefaults": fn.__kwdefaults__,
        "dict": dict(fn.__dict__),
        "doc": fn.__doc__,
        "annotations": dict(getattr(fn, "__annotations__", None) or {}),
        "qualname": fn.__qualname__,
        "module": fn.__module__,
        "name": fn.__name__,  # functools.wraps renames: the code object keeps the old name
    }
    # The skeleton is created (and memoised by pickle) before its state is
    # written, so recursive functions and closures over themselves round-trip.
    # The closure's cells themselves are written (not copies of their values):
    # pickle memoises them, so closures over one variable share it after a load
    # (a counter's inc() and get()). Each cell is made empty and filled after
    # (_reduce_cell), so a cell holding its own function does not recurse.
    return (_function_skeleton, (code, tuple(fn.__closure__ or ()), rec, shared), state, None, None,
            _function_setstate)


def _function_skeleton(code: types.CodeType, cells: Any, rec: tuple, g: dict[str, Any] | None = None) -> Any:
    live = _live_definition(rec)
    if live is not None:
        return live
    if g is None:  # written before globals were shared
        g = {"__name__": rec[0]}
    g.setdefault("__builtins__", __builtins__)
    if isinstance(cells, int):  # written before cells were shared: a count; values come with the state
        cells = tuple(types.CellType() for _ in range(cells))
    fn = types.FunctionType(code, g, code.co_name, None, cells or None)
    _skeletons.add(fn)
    return fn


def _function_setstate(fn: Any, state: dict[str, Any]) -> Any:
    if fn not in _skeletons:
        return fn
    _skeletons.discard(fn)
    fn.__globals__.update(state["globals"])
    fn.__defaults__ = state["defaults"]
    fn.__kwdefaults__ = state["kwdefaults"]
    for cell, v in zip(fn.__closure__ or (), state.get("closure", ()), strict=False):  # payloads written before cells were shared
        if not (isinstance(v, str) and v == _EMPTY_CELL):
            cell.cell_contents = v
    fn.__dict__.update(state["dict"])
    fn.__doc__ = state["doc"]
    fn.__annotations__ = state["annotations"]
    fn.__qualname__ = state["qualname"]
    fn.__name__ = state.get("name", fn.__name__)  # payloads written before the name was stored
    fn.__module__ = state["module"]
    return fn


_CLASS_SKIP = frozenset(("__dict__", "__weakref__", "_abc_impl", "__module__", "__qualname__", "__doc__"))


def _class_by_value(cls: type, rec: tuple, slot: list[Any], p: Pickler) -> Any:
    ns = dict(cls.__dict__)
    slots = ns.get("__slots__")
    if slots is not None:
        for s in [slots] if isinstance(slots, str) else slots:
            ns.pop(s, None)  # the member descriptors: type() makes them again from __slots__
    kwargs = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    if slots is not None:
        kwargs["__slots__"] = canon(slots, p)  # a set of slot names is written sorted too
    if "__orig_bases__" in ns:
        # typing.Generic's __init_subclass__ reads it when the class is made.
        # It holds the bases as written (Box[int]): never the class itself.
        kwargs["__orig_bases__"] = ns["__orig_bases__"]
    state = {k: canon(v, p) for k, v in ns.items() if k not in _CLASS_SKIP and k != "__slots__"}
    # Plain data attributes go into the namespace the class is made with, so
    # that __init_subclass__ and a metaclass, which run then, see them (a
    # plugin registering itself by its ``name``). They cannot refer back to
    # the class, so writing them early cannot recurse. The rest comes after.
    kwargs.update((k, v) for k, v in state.items() if _plain(v) and k not in kwargs)
    if "_abc_impl" in ns:
        # ABC.register() calls live in _abc_impl, not in any attribute: replay
        # them on load, or isinstance() answers differently. Sorted by name,
        # since the registry is a set (its order varies per process).
        state[_ABC_REGISTRY] = sorted(_abc_registry(cls), key=lambda c: (str(getattr(c, "__module__", "")),
                                                                        str(getattr(c, "__qualname__", ""))))
    return (_class_skeleton, (type(cls), cls.__name__, cls.__bases__, kwargs, rec, slot), state, None, None,
            _class_setstate)


_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _plain(v: Any) -> bool:
    return type(v) in _PLAIN or (type(v) is tuple and all(_plain(x) for x in v))


_ABC_REGISTRY = "__memolab_abc_registry__"


def _abc_registry(cls: type) -> list[type]:
    import abc

    try:
        refs = abc._get_dump(cls)[0]  # type: ignore[attr-defined]  # the C implementation's introspection hook
    except (AttributeError, TypeError):
        refs = getattr(cls, "_abc_registry", ())  # the pure-Python _py_abc fallback: a WeakSet
        return list(refs)
    return [c for c in (r() for r in refs) if c is not None]


def _class_skeleton(meta: type, name: str, bases: tuple, kwargs: dict[str, Any], rec: tuple,
                    slot: list[Any] | None = None) -> Any:
    # A class can be reached again while its own construction is being written
    # (its base's state refers back to it): pickle then writes the construction
    # twice and keeps the first result. Making a second class would run the
    # metaclass and __init_subclass__ again (registering an empty twin). So
    # each by-value class has a ``slot``: an empty list written once per
    # payload (pickle memoises it, both constructions get the same list at
    # load), which the first construction fills. No per-load state elsewhere,
    # so loads without by-value classes pay nothing.
    # (Payloads written before slots pass none.)
    if slot:
        return slot[0]
    live = _live_definition(rec)
    if live is not None:
        cls = live
    else:
        cls = meta(name, bases, dict(kwargs))
        _skeletons.add(cls)
    if slot is not None:
        slot.append(cls)
    return cls


def _class_setstate(cls: Any, state: dict[str, Any]) -> Any:
    if cls not in _skeletons:
        return cls
    _skeletons.discard(cls)
    registered = state.pop(_ABC_REGISTRY, ())
    for k, v in state.items():
        setattr(cls, k, v)
    for sub in registered:
        cls.register(sub)
    if "__abstractmethods__" in vars(cls):
        import abc

        abc.update_abstractmethods(cls)  # computed when the (empty) skeleton was made
    return cls


def _reduce_module(p: Pickler, mod: types.ModuleType) -> Any:
    if mod.__name__ == "__main__":
        raise pickle.PicklingError("cannot store the __main__ module itself")
    return importlib.import_module, (mod.__name__,)


def _reduce_method_wrapper(kind: type) -> Reducer:
    def reduce(p: Pickler, obj: Any) -> Any:
        return kind, (obj.__func__,)
    return reduce


def _reduce_property(p: Pickler, obj: property) -> Any:
    return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)


def _reduce_cell(p: Pickler, cell: Any) -> Any:
    # Made empty, memoised, then filled: a cell that holds (something holding)
    # the function it belongs to is reached again while that function's
    # construction is written, and finds this cell already made.
    try:
        contents = cell.cell_contents
    except ValueError:
        return _empty_cell, ()
    return _empty_cell, (), canon(contents, p), None, None, _fill_cell


def _empty_cell() -> Any:
    return types.CellType()  # the cell type has no importable name


def _fill_cell(cell: Any, contents: Any) -> Any:
    cell.cell_contents = contents
    return cell


def _make_cell(v: Any) -> Any:
    # kept so payloads written before cells were filled after creation still load
    return types.CellType(v)


register_reducer(types.FunctionType, _reduce_code_object)
register_reducer(type, _reduce_class)
register_reducer(types.CodeType, _reduce_code)
register_reducer(types.ModuleType, _reduce_module)
register_reducer(staticmethod, _reduce_method_wrapper(staticmethod))
register_reducer(classmethod, _reduce_method_wrapper(classmethod))
register_reducer(property, _reduce_property)
register_reducer(types.CellType, _reduce_cell)
# Python 3.11's cached_property carries an RLock, which cannot be pickled: a
# class using one could not be stored by value. Its lock is rebuilt, not stored.
register_reducer(functools.cached_property,
                 lambda p, obj: (_cached_property, (obj.func, {k: v for k, v in vars(obj).items() if k != "lock"})))
# dataclass fields keep their metadata in one; class bodies meet them often.
register_reducer(types.MappingProxyType, lambda p, obj: (_mappingproxy, (dict(obj),)))


def _cached_property(func: Any, state: dict[str, Any]) -> Any:
    cp = functools.cached_property(func)
    cp.__dict__.update(state)
    return cp


def _mappingproxy(d: dict[Any, Any]) -> Any:
    return types.MappingProxyType(d)  # the type has no importable name of its own


# -- numpy: rebuilding arrays (their reduction is memolab.pickling.arrays) ------------------

def _np_from_buffer(buf: Any, dtype: Any, shape: tuple[int, ...], order: str) -> Any:
    import numpy as np

    flat = np.frombuffer(buf, dtype=np.uint8)
    if dtype.itemsize == 0 or flat.size == 0:
        return np.empty(shape, dtype=dtype, order=order)  # type: ignore[call-overload]
    return flat.view(dtype).reshape(shape, order=order)


def _np_view(root: Any, dtype: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any:
    import numpy as np

    base = root.reshape(-1, order="A").view(np.uint8)
    return np.ndarray(shape, dtype=dtype, buffer=base, offset=offset, strides=strides)


#: the rebuilders under public names, for ``memolab.pickling.arrays``: pickles still name them
#: by their own ``__qualname__`` (``memolab.pickling._np_from_buffer``), as before the split
np_from_buffer, np_view = _np_from_buffer, _np_view


def register_dataclasses(register_reducer: Callable[[type, Reducer | None], None]) -> None:
    # dataclasses compares its sentinels by identity (``f._field_type is _FIELD``,
    # ``default is MISSING``); copies made by unpickling would silently drop fields.
    import dataclasses

    def by_name(name: str) -> Reducer:
        return lambda p, obj: (_dataclass_sentinel, (name,))

    register_reducer(dataclasses._FIELD_BASE, lambda p, obj: (_dataclass_sentinel, (obj.name,)))  # type: ignore[attr-defined]
    register_reducer(dataclasses._MISSING_TYPE, by_name("MISSING"))
    register_reducer(dataclasses._KW_ONLY_TYPE, by_name("KW_ONLY"))  # type: ignore[attr-defined]


def _dataclass_sentinel(name: str) -> Any:
    import dataclasses

    return getattr(dataclasses, name)


for _toplevel, _target in LAZY_HOOKS["pickling"].items():
    register_lazy(_toplevel, hook(_target, register_reducer))


# -- public API ------------------------------------------------------------------------------

def dumps_with_refs(obj: Any) -> tuple[bytes, list[memoryview], dict[str, Any]]:
    """(pickle bytes, out-of-band buffers in order, code references: {symbol: digest,
    or [digest, source file, fingerprint] for code stored by value})."""
    buffers: list[memoryview] = []
    f = io.BytesIO()
    p = Pickler(f, buffers)
    p.dump(obj)
    return f.getvalue(), buffers, p.refs


def dumps(obj: Any) -> tuple[bytes, list[memoryview]]:
    """Serialise ``obj``: (pickle bytes, out-of-band buffers in order)."""
    data, buffers, _ = dumps_with_refs(obj)
    return data, buffers


def loads(data: bytes, buffers: Sequence[Any] = ()) -> Any:
    """Rebuild a value; ``CodeChanged`` if code it refers to changed, ``StoreMiss`` if code is gone."""
    try:
        return pickle.loads(data, buffers=buffers)
    except StoreMiss:
        raise
    except Exception as e:  # unpickling runs the stored classes' own code: said as a load error
        from . import moved

        if moved.names_moved(e):  # stored before the layout: memolab's modules by their old names
            try:
                return moved.loads(data, buffers)
            except StoreMiss:
                raise
            except Exception as again:  # the stored classes' own code again: said as a load error
                raise load_error(again) from again
        raise load_error(e) from e


def find_unpicklable(obj: Any, path: str = "result", _depth: int = 0, _seen: set | None = None) -> tuple[str, str]:
    """Locate the innermost part of ``obj`` that cannot be stored: (path, reason)."""
    seen = _seen if _seen is not None else set()
    try:
        dumps(obj)
        return "", ""
    except Exception as e:  # pickling runs the object's own code: its error is the reason
        reason = f"{type(e).__name__}: {e}"
    if id(obj) in seen or _depth > 50:
        return path, reason
    seen.add(id(obj))
    children: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    else:
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            children = [(f"{path}.{k}", v) for k, v in state.items()]
    for p, child in children:
        sub_path, sub_reason = find_unpicklable(child, p, _depth + 1, seen)
        if sub_path:
            return sub_path, sub_reason
    return path, reason
