"""The generic rules: how a class, an object by what pickle would save, and a
``__memo_hash__`` object are hashed, and ``resolve``, which picks the handler of a
type nobody registered (inherited from a base, or one of these rules)."""
from __future__ import annotations

import copyreg
import sys
import types
from collections import OrderedDict
from typing import Any

from .. import codegraph
from ..errors import HashError
from .primitives import NAME_TOKENS, name_token, pack_Q, str_token
from .registry import (
    STRUCTURAL,
    TYPE_BLIND,
    Encoding,
    Handler,
    dispatch,
    excluded_attributes,
    lazy,
    lazy_running,
    policies,
    resolved,
    run_lazy,
    type_name,
)


def child_error(e: BaseException, segment: str, obj: Any) -> HashError:
    """Turn a failure below a container into a HashError whose path names the child.

    Containers build the segment only on failure: formatting ``[i]`` for every
    element would cost more than hashing it.
    """
    if isinstance(e, HashError):
        return e.at(segment)
    return HashError("value is nested too deeply to hash", segment, obj)


def encode_extra_state(enc: Encoding, obj: Any) -> None:
    """Attributes that a subclass instance carries besides its container data."""
    d = getattr(obj, "__dict__", None)
    if d:
        enc.write(b"+")
        enc.encode_child(d, "")
    else:
        enc.write(b"-")  # explicit, so an optional part can never be confused with what follows


def encode_class(enc: Encoding, obj: type) -> None:
    # same bytes as write(b"C"), write_str(symbol), write_str(digest); both are
    # recomputed on every call (a class's code can change), only their encodings are cached
    enc.write(b"C" + str_token(codegraph.symbol_of(obj)) + str_token(codegraph.object_digest(obj)))


def _encode_protocol(enc: Encoding, obj: Any) -> None:
    enc.write(b"X")
    enc.write_str(type_name(type(obj)))
    enc.encode_child(obj.__memo_hash__(), ".__memo_hash__()")


# -- generic objects ---------------------------------------------------------------

def encode_object(enc: Encoding, obj: Any, exclude: frozenset[str] = frozenset()) -> None:
    """Class identity (symbol + code digest) plus what pickle would save."""
    if enc.memoize(obj):
        return
    t = type(obj)
    # pickle asks copyreg's table before the object (numpy's ufuncs, compiled regexes, torch's
    # layouts are reduced there), and so does the key: it is what pickle would save
    reducer = copyreg.dispatch_table.get(t)
    try:
        rv: Any = reducer(obj) if reducer is not None else obj.__reduce_ex__(4)
    except Exception as e:  # the object says it cannot be pickled
        raise HashError(f"cannot hash {t.__qualname__} object ({e})", "", obj) from None
    if isinstance(rv, str):  # a global singleton, pickled by name
        home = getattr(obj, "__module__", None)
        home = home if isinstance(home, str) else t.__module__
        if _user_module(home):
            # user code's own singleton (``CONFIG = Config()`` with a ``__reduce__`` naming it): its
            # name says nothing of what it holds, which the user edits; it counts by class code and state
            _encode_singleton(enc, obj, t, f"{codegraph.key_module(home)}:{rv}", exclude)
            return
        # a library's singleton (``np.sin``, a sentinel): its name, under its library's version
        enc.write(b"G")
        enc.write_str(f"{codegraph.key_module(t.__module__)}:{rv}")
        return
    # b"O" + the class token (``encode_class``) in one write
    enc.write(b"OC" + str_token(codegraph.symbol_of(t)) + str_token(codegraph.object_digest(t)))
    func, args = rv[0], rv[1]
    state = rv[2] if len(rv) > 2 else None
    listitems = rv[3] if len(rv) > 3 else None
    dictitems = rv[4] if len(rv) > 4 else None
    # copyreg.__newobj__(cls) is the common case: the class is already hashed.
    if getattr(func, "__name__", "") in ("__newobj__", "__newobj_ex__") and args and args[0] is t:
        enc.buf += b"n"  # an atom: the next write flushes
        if len(args) > 1:
            enc.encode_child(args[1:], ".<new args>")
    else:
        enc.encode_child(func, ".<reduce>")
        enc.encode_child(args, ".<reduce args>")
    if state is not None:
        excluded = excluded_attributes(t) if policies else exclude
        if exclude and excluded is not exclude:
            excluded = excluded | exclude
        # attributes that are all left out are no state: pickle saves none for an empty __dict__, so an
        # object whose cache was filled as it was used (and is excluded) keys as it did before
        if not (excluded and type(state) is dict and all(k in excluded for k in state)):
            _encode_state(enc, state, excluded)
    if listitems is not None:
        enc.write(b"L")
        enc.encode_child(list(listitems), "")
    if dictitems is not None:
        enc.write(b"D")
        ordered = isinstance(obj, OrderedDict)
        items = list(dictitems)
        tmp = OrderedDict(items) if ordered else dict(items)
        enc.encode_child(tmp, "")


def _user_module(name: str) -> bool:
    """Is the module ``name`` (loaded) the user's code, by codegraph's classification?"""
    m = sys.modules.get(name)
    return m is not None and issubclass(type(m), types.ModuleType) and codegraph.is_user_code(m)


def _encode_singleton(enc: Encoding, obj: Any, t: type, name: str, exclude: frozenset[str]) -> None:
    # b"O" + the class token, then 0x1d: a user singleton by its name and state (its
    # ``__getstate__``: ``__dict__`` and slots), never read by pickle
    enc.write(b"OC" + str_token(codegraph.symbol_of(t)) + str_token(codegraph.object_digest(t)) + b"\x1d")
    enc.write_str(name)
    getstate = getattr(obj, "__getstate__", None)
    try:
        state = getstate() if getstate is not None else getattr(obj, "__dict__", None)
    except Exception as e:  # the object's own __getstate__ refuses: said as a HashError naming it
        raise HashError(f"cannot hash {t.__qualname__} object {name} ({e})", "", obj) from None
    if state is None:
        enc.write(b"-")
        return
    excluded = excluded_attributes(t) | exclude
    _encode_state(enc, state, excluded)


def _encode_state(enc: Encoding, state: Any, excluded: frozenset[str] = frozenset()) -> None:
    enc.buf += b"S"  # an atom: the next write flushes
    if type(state) is dict:
        # attributes: path segments read as ``.name``
        if enc.memoize(state):
            return
        names = sorted([k for k in state if k not in excluded], key=str) if excluded else sorted(state, key=str)
        enc.write(b"d" + pack_Q(len(names)))
        encode = enc.encode
        for k in names:
            if type(k) is str:  # attribute names: the bytes encode_str writes, cached by value
                enc.buf += NAME_TOKENS.get(k) or name_token(k)
            else:
                encode(k)
            try:
                encode(state[k])
            except (HashError, RecursionError) as e:
                raise child_error(e, f".{k}", state[k]) from None
    elif type(state) is tuple and len(state) == 2 and (state[0] is None or type(state[0]) is dict) and type(state[1]) is dict:
        # (__dict__, __slots__ values)
        enc.write(b"2")
        _encode_state(enc, state[0] or {}, excluded)
        _encode_state(enc, state[1], excluded)
    else:
        enc.encode_child(state, ".<state>")


# -- resolution of types nobody registered ------------------------------------------

def resolve(t: type) -> Handler:
    if lazy or lazy_running[0]:  # (one running in another thread: its handlers exist once it returns)
        run_lazy(t)
        h = dispatch.get(t)
        if h is not None:
            return h
    # Inherit the handler of the nearest registered base class, except for the
    # built-in containers: a subclass of dict may carry attributes of its own.
    h = None
    for base in getattr(t, "__mro__", (t,))[1:]:
        bh = dispatch.get(base)
        if bh is not None and base not in STRUCTURAL and base not in resolved:
            h = _subclass_of(bh) if base in TYPE_BLIND else bh
            break
    if h is None:
        if hasattr(t, "__memo_hash__"):
            h = _encode_protocol
        elif isinstance(t, type) and issubclass(t, type):
            h = encode_class
        else:
            h = encode_object
    dispatch[t] = h
    resolved.add(t)
    return h


def _subclass_of(base_handler: Handler) -> Handler:
    def handler(enc: Encoding, obj: Any) -> None:
        enc.write(b"\x1a")  # a subclass of a value type: its class (by code) comes first
        encode_class(enc, type(obj))
        base_handler(enc, obj)

    return handler
