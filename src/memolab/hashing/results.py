"""Results loaded from the store: the digests of a result's large leaves are
recorded when it is saved (``result_token``) and handed to the loaded objects
(``remember_loaded``), so passing a memoized result on costs O(1) to hash."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..errors import HashError, swallowed
from . import identity
from .encoder import Encoder
from .objects import resolve
from .reducers import reducers
from .registry import Handler, Leaf, dispatch, excluded_attributes, leaves

# -- results loaded from the store -------------------------------------------------------
#
# A memoized result passed on to another memoized function should cost O(1) to
# hash. At save time ``result_token`` records the digests of the result's large
# leaves; when the result is loaded, ``remember_loaded`` enters the fresh
# objects into the identity cache under those digests — but only through the
# leaf's ``loaded`` stamp, i.e. only where a later change would be detected.

_MAX_TOKENS = 4096
# object.__getstate__ is Python 3.11's: on 3.10 a class without its own has none at all
_OBJECT_GETSTATE = getattr(object, "__getstate__", None)
_result_tokens: OrderedDict[Any, tuple[list[str], Any]] = OrderedDict()
_tokens_lock = threading.Lock()


#: handlers whose objects a result walk enters (attribute by attribute): plain
#: objects and, registered by torch support, datasets, samplers and loaders
_walk_handlers: set[Any] = set()


def register_result_walk(handler: Handler) -> None:
    """Let result walks (``result_token``/``remember_loaded``) enter objects hashed by ``handler``.

    Only for handlers that hash an object as its attributes (``Encoder.encode_object``);
    never for state no stamp can vouch for (modules, optimizers).
    """
    _walk_handlers.add(handler)


def _plain_pickled(t: type) -> bool:
    """Does unpickling restore exactly the instance ``__dict__`` that was saved?

    Only then do the leaves of a loaded object stand where the saved object's
    did, so the stored digests can be handed to them in walk order. A class of
    its own ``__reduce__``/``__getstate__``/``__setstate__`` may rebuild its
    attributes differently (scale them, drop them): not entered, nor is a type
    memolab's own pickler has a reducer for.
    """
    if reducers.get(t) is not None:
        return False  # memolab's own pickler rebuilds it its way (a registered reducer)
    got = _plain_cache.get(t)
    if got is None:
        got = (getattr(t, "__reduce_ex__", None) is object.__reduce_ex__
               and getattr(t, "__reduce__", None) is object.__reduce__
               and getattr(t, "__getstate__", _OBJECT_GETSTATE) is _OBJECT_GETSTATE
               and not hasattr(t, "__setstate__")
               and "__slots__" not in vars(t))
        _plain_cache[t] = got
    return got


_plain_cache: dict[type, bool] = {}


def _walk_leaves(value: Any, out: list[tuple[Any, Leaf]], depth: int = 0, seen: set[int] | None = None) -> None:
    """The large leaves of a result, in a deterministic order: inside lists, tuples,
    dicts and objects with plain pickling whose handler allows it (``register_result_walk``).

    A value that is no list, tuple or dict and has no ``__dict__`` (an ``int``, a ``str``) is a
    leaf by its exact type in ``leaves`` or has none: ``calls/fasthits`` skips remembering the
    digests of a scalar result whose type is not there (``remember_loaded`` would find nothing)."""
    t = type(value)
    h = dispatch.get(t)
    if h is None:
        h = resolve(t)  # runs lazy registrations (numpy, torch) for this type
    lf = leaves.get(t)
    if lf is not None:
        out.append((value, lf))
    elif depth < 8 and len(out) < 10000:
        if t is list or t is tuple:
            for x in value:
                _walk_leaves(x, out, depth + 1, seen)
        elif t is dict:
            for x in value.values():
                _walk_leaves(x, out, depth + 1, seen)
        elif h in _walk_handlers and _plain_pickled(t):
            d = getattr(value, "__dict__", None)
            if type(d) is not dict:
                return
            if seen is None:
                seen = set()
            if id(value) in seen:  # shared (a loader's dataset and its sampler's data_source)
                return
            seen.add(id(value))
            excluded = excluded_attributes(t)
            for k in sorted(d, key=str):
                if k not in excluded:
                    _walk_leaves(d[k], out, depth + 1, seen)


def _leaf_digest(x: Any, lf: Leaf) -> bytes:
    """``x``'s digest through the identity cache, recording it where a stamp vouches for ``x``."""
    stamp = lf.stamp(x) if identity.enabled else None
    d = identity.lookup(x, stamp) if stamp is not None else None
    if d is None:
        stamp = lf.track(x) if identity.enabled else None  # before the content is read
        d = lf.digest(x)
        lf.remember(x, stamp, d)
    return d


def result_token(value: Any) -> list[str] | None:
    """Digests of ``value``'s large leaves (arrays, tensors; see ``_walk_leaves``), or None.

    The computed value's leaves are entered into the identity cache on the way
    (where their stamp allows): passing a fresh result on to another memoized
    function costs O(1) in the process that computed it too.
    """
    try:
        leaves: list[tuple[Any, Leaf]] = []
        _walk_leaves(value, leaves)
        return [_leaf_digest(x, lf).hex() for x, lf in leaves] or None
    except Exception:  # the walk reads the user's objects (their attributes, buffers): a result we cannot hash is still a result
        swallowed("hashing the result's leaves")
        return None


class _KnownLeaves(Encoder):
    """An encoder that takes the digests of leaves it was given (by object) instead of
    computing them again: a result's leaves were just digested for its token."""

    __slots__ = ("known",)
    known: dict[int, Any]

    def write_leaf(self, obj: Any, leaf: Leaf) -> None:
        got = self.known.get(id(obj))
        if got is not None and got[0] is obj:
            self.write(b"H" + got[1])
            return
        Encoder.write_leaf(self, obj, leaf)


def result_digests(value: Any) -> tuple[list[str] | None, str | None]:
    """(``result_token(value)``, the digest ``value`` has as an argument), the latter only for a
    result holding arrays or tensors (a token), else None.

    The second is what a later call passed an equal object as an argument hashes it to (its
    per-argument digest): how a result that reached that call as a copy (a Dask worker's
    transfer, a file written and read again) is told to come from this evaluation
    (``memolab.inputs.upstream``, "by content"). Equal plain data (``None``, a number, a small config)
    is too common to say so: those results get none."""
    try:
        found: list[tuple[Any, Leaf]] = []
        _walk_leaves(value, found)
        digests = [_leaf_digest(x, lf) for x, lf in found]
    except Exception:  # the walk reads the user's objects (their attributes, buffers): a result we cannot hash is still a result
        swallowed("hashing the result's leaves")
        return None, None
    if not digests:
        return None, None
    token = [d.hex() for d in digests]
    try:
        enc = _KnownLeaves()
        enc.known = {id(x): (x, d) for (x, _), d in zip(found, digests, strict=False)}
        enc.encode(value)
        return token, enc.hexdigest()
    except HashError:  # not hashable as an argument (a live generator inside): no content lineage
        return token, None
    except Exception:  # encoding runs the user's objects' own code (__reduce_ex__, __getstate__)
        swallowed("hashing the result as an argument")
        return token, None


def note_result(key: Any, token: list[str] | None, origin: Any = None) -> None:
    if not token:
        return
    with _tokens_lock:
        _result_tokens[key] = (token, origin)
        _result_tokens.move_to_end(key)
        while len(_result_tokens) > _MAX_TOKENS:
            _result_tokens.popitem(last=False)


def remember_loaded(value: Any, key: Any = None, token: list[str] | None = None, origin: Any = None) -> None:
    """Record a value just loaded from the store under the digests it was stored with."""
    if token is None:
        got = _result_tokens.get(key)
        if got is None:
            return
        token, origin = got
    elif key is not None:
        note_result(key, token, origin)
    if not identity.enabled:
        return
    leaves: list[tuple[Any, Leaf]] = []
    _walk_leaves(value, leaves)
    if len(leaves) != len(token):
        return  # not the shape we saved: trust nothing
    for (x, lf), d in zip(leaves, token, strict=False):
        lf.remember(x, lf.loaded(x), bytes.fromhex(d), origin)
