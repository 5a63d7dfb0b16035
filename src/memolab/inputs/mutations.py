"""Arguments a memoized body changes in place: found on a miss, stored with the result, put back
into the caller's own objects on a hit (docs/cache-rules.md, "Arguments the body changes").

``train(model, opt)`` returns a loss and leaves the model trained: the loss alone is not what the
call did. On a miss every argument is hashed again after the body (``changed``), against the
per-argument digests of the key; the identity cache makes that O(1) for what it can prove unwritten
(a tensor whose storage is still copy-on-write, a stored tensor's untouched mapping) and everything
else is rehashed, so a fused optimizer step or a BatchNorm kernel, which move no version counter, are
seen. The arguments that changed are stored with the result, in the same pickle (``Post``): one
payload, one signature, the same blobs, so the team store's trust rules cover them as they cover
results, and shared references between them (an optimizer's parameters are the model's) stay shared.

On a hit, ``restore`` puts each stored argument back into the caller's object of that name, by the
rule registered for its type (``register_restorer``; torch's and numpy's register lazily through
``hooks.LAZY_HOOKS["restoring"]``): tensors and arrays are copied into in place, bitwise (their
identity, views and an optimizer's references to them survive), modules and plain objects attribute
by attribute, containers item by item, objects with ``state_dict``/``load_state_dict`` through those.
The restored arguments then hash to what the body left, so the next call's key is the one the
computing process made. A result that is (or holds, in a tuple, list or dict) one of the call's own
argument objects is stored as a reference to it and comes back as the caller's object (``out is
model``), as the plain call returns it.

What cannot be put back — a live iterator (a DataLoader's ``_iterator``), an open file, a C object
without state — is found by a walk of the changed arguments (and, for what a key leaves out, a
comparison of the live objects the arguments hold before and after the body: ``live_parts``): the
call warns naming its path and stores nothing, as for an argument file that changed.
"""
from __future__ import annotations

import array
import collections
import datetime
import decimal
import enum
import fractions
import functools
import importlib
import pathlib
import re
import struct
import threading
import types
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .. import hashing
from ..errors import HashError, MemolabError, swallowed
from ..hashing import files
from ..hashing.identity import path_segment
from ..settings.hooks import HOOK_WAIT, LAZY_HOOKS

__all__ = ["Post", "ArgRef", "Changes", "CannotRestore", "Side", "Before", "register_restorer",
           "register_side", "rule_of", "put_back", "put_object", "put_replace", "live_parts", "problems", "changed",
           "split", "restore"]

#: how deep and wide the walks (``problems``, ``live_parts``) go into an argument
_DEPTH = 8
_WIDTH = 256
_NODES = 20000
#: values a walk passes by (they hold nothing)
_ATOMS = frozenset((int, float, complex, bool, str, bytes, type(None)))


class CannotRestore(MemolabError):
    """A stored argument state cannot be put back into the caller's object (``path``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


class ArgRef:
    """A result's reference to one of the call's own argument objects (restored as the caller's)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> Any:
        return ArgRef, (self.name,)

    def __repr__(self) -> str:
        return f"<argument {self.name}>"


class Post:
    """A stored result with the state its body left in the arguments it changed."""

    __slots__ = ("value", "args", "sides")

    def __init__(self, value: Any, args: dict[str, Any], sides: list[tuple[Any, Any]] | None = None) -> None:
        self.value = value
        #: argument name -> the argument as the body left it (pickled with the value)
        self.args = args
        #: (an object inside ``args``, its side state: ``register_side``), e.g. a parameter and its ``.grad``
        self.sides = sides or []

    def __reduce__(self) -> Any:
        return Post, (self.value, self.args, self.sides)


# -- rules: how a stored state goes back into a live object ---------------------------------------

#: ``rule(live, stored, memo, path) -> the object the slot holds afterwards``: ``live`` itself when
#: the state went into it; ``memo`` maps id(stored object) -> the live object it went into
Rule = Callable[[Any, Any, dict[int, Any], str], Any]

_rules: dict[type, Rule] = {}
#: types whose instances the walks do not enter (tensors, arrays: a rule copies them whole)
_leaves: set[type] = set()
_resolved: dict[type, Rule | None] = {}
_lazy_done: set[str] = set()


def register_restorer(type_: type, rule: Rule, leaf: bool = False) -> None:
    """Put stored states of ``type_`` (and subclasses) back with ``rule``; ``leaf``: walks stop there."""
    _rules[type_] = rule
    if leaf:
        _leaves.add(type_)
    _resolved.clear()


def _run_lazy(t: type) -> None:
    for c in t.__mro__:
        top = (getattr(c, "__module__", None) or "").split(".")[0]
        target = LAZY_HOOKS.get("restoring", {}).get(top)
        if target is not None and top not in _lazy_done:
            _lazy_done.add(top)
            module, fn = target.split(":")
            getattr(importlib.import_module(module), fn)()


#: held while a type's rule is resolved, its lazy registration included (re-entrant). A registration
#: is marked done as it starts: a second thread asking for ``np.ndarray``'s rule meanwhile found none,
#: cached that (its results "cannot be put back": returned unstored, computed again). It waits here.
_resolving = threading.RLock()


def rule_of(t: type) -> Rule | None:
    """The rule for instances of ``t``, or None: they cannot be put back. A registered rule (by the
    class's MRO); else ``state_dict``/``load_state_dict``; else, for an instance with attributes
    that is no live iterator, attribute by attribute."""
    try:
        return _resolved[t]
    except KeyError:
        pass
    if not _resolving.acquire(timeout=HOOK_WAIT):  # (a bound against a hang: a registration takes milliseconds)
        return None  # (nothing cached: cannot be put back this time)
    try:
        found = _resolved.get(t, _UNKNOWN)
        return _rule_of_locked(t) if found is _UNKNOWN else found
    finally:
        _resolving.release()


_UNKNOWN: Any = object()


def _rule_of_locked(t: type) -> Rule | None:
    _run_lazy(t)
    found: Rule | None = None
    for c in t.__mro__[:-1]:  # (``object`` itself has no rule: a C object without state is no plain object)
        found = _rules.get(c)
        if found is not None:
            break
    if found is None:
        if callable(getattr(t, "state_dict", None)) and callable(getattr(t, "load_state_dict", None)):
            found = _put_protocol
        elif _live(t):
            found = None
        elif getattr(t, "__reduce_ex__", None) is not _OBJECT_REDUCE_EX or getattr(t, "__reduce__", None) is not _OBJECT_REDUCE:
            # rebuilt by its own reduction (a logger by its name): its attributes are not its state,
            # the slot takes the stored object (a top-level argument of the kind: ``problems``)
            found = put_replace
        elif t.__dictoffset__ or _slots(t):
            found = put_object
    _resolved[t] = found
    return found


def _live(t: type) -> bool:
    """Instances are live state memolab cannot rebuild in place: iterators, files."""
    return hasattr(t, "__next__") and not callable(getattr(t, "state_dict", None))


def _slots(t: type) -> list[str]:
    out: list[str] = []
    for c in t.__mro__:
        s = c.__dict__.get("__slots__", ())
        out.extend([s] if isinstance(s, str) else [n for n in s if n not in ("__dict__", "__weakref__")])
    return out


def _remap(x: Any, memo: dict[int, Any]) -> Any:
    return memo.get(id(x), x)


def put_back(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    """Put ``stored``'s state into ``live``; returns what the slot holding ``live`` holds afterwards."""
    got = memo.get(id(stored))
    if got is not None:
        return got  # reached again (a parameter the optimizer shares with the model)
    if type(live) is not type(stored):
        return stored  # the body put another object there: it is the slot's now
    rule = rule_of(type(live))
    if rule is None:
        raise CannotRestore(path, f"a {type(live).__qualname__} cannot be put back in place")
    return rule(live, stored, memo, path)


def put_replace(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    """An immutable value: the slot takes the stored one (the live one where they are the same
    value, so a tuple of them stays the caller's tuple)."""
    if live is stored or (type(live) in _ATOMS and type(live) is not float and live == stored):
        return live
    if type(live) is float and struct.pack("<d", live) == struct.pack("<d", stored):
        return live
    return stored


def put_object(live: Any, stored: Any, memo: dict[int, Any], path: str, first: tuple[str, ...] = ()) -> Any:
    """Attribute by attribute (``first``: these before the others, where later ones refer to what
    they map). An attribute the stored object lacks is deleted only for a class that pickles its
    whole ``__dict__``: one of its own ``__getstate__`` (an optimizer's) leaves out what is not state."""
    memo[id(stored)] = live
    sd = getattr(stored, "__dict__", None)
    if isinstance(sd, dict):
        ld = live.__dict__
        # written straight into ``__dict__`` as unpickling does: a class's ``__setattr__`` (a module's
        # registering parameters) must not run on state that is already registered
        if getattr(type(live), "__getstate__", _OBJECT_GETSTATE) is _OBJECT_GETSTATE:
            for k in [k for k in ld if k not in sd]:
                del ld[k]
        for k in [*[k for k in first if k in sd], *[k for k in sd if k not in first]]:
            sv = sd[k]
            ld[k] = put_back(ld[k], sv, memo, f"{path}.{k}") if k in ld else _remap(sv, memo)
    for name in _slots(type(live)):
        has_s, has_l = hasattr(stored, name), hasattr(live, name)
        if has_s:
            sv = getattr(stored, name)
            object.__setattr__(live, name, put_back(getattr(live, name), sv, memo, f"{path}.{name}") if has_l
                               else _remap(sv, memo))
        elif has_l:
            object.__delattr__(live, name)
    return live


_OBJECT_GETSTATE = getattr(object, "__getstate__", None)
_OBJECT_REDUCE_EX = object.__reduce_ex__
_OBJECT_REDUCE = object.__reduce__


def _put_protocol(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    live.load_state_dict(stored.state_dict())
    return live


def _put_dict(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    new = []
    for k, sv in stored.items():
        lk = _remap(k, memo)
        new.append((lk, put_back(live[lk], sv, memo, path + path_segment(k)) if lk in live else _remap(sv, memo)))
    live.clear()  # (and refilled in the stored order: an OrderedDict's order is its state)
    live.update(new)
    if getattr(stored, "__dict__", None):
        put_object(live, stored, memo, path)
    return live


def _put_list(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    n = len(live)
    live[:] = [put_back(live[i], s, memo, f"{path}[{i}]") if i < n else _remap(s, memo) for i, s in enumerate(stored)]
    return live


def _put_set(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    live.clear()
    live.update(_remap(x, memo) for x in stored)
    return live


def _put_tuple(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    if len(live) != len(stored):
        return stored
    items = [put_back(a, b, memo, f"{path}[{i}]") for i, (a, b) in enumerate(zip(live, stored, strict=True))]
    if all(a is b for a, b in zip(items, live, strict=True)):
        memo[id(stored)] = live  # (shared as the stored one was: ``(a, a)`` is keyed apart from ``(a, copy(a))``)
        return live
    return type(live)(items) if type(live) is tuple else stored


_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), frozenset, range, type, types.FunctionType,
              types.BuiltinFunctionType, types.MethodType, types.ModuleType, type(Ellipsis), files.File, files.Dir,
              re.Pattern, pathlib.PurePath, datetime.date, datetime.time, datetime.timedelta, datetime.tzinfo,
              decimal.Decimal, fractions.Fraction, uuid.UUID, enum.Enum, functools.partial, property)
for _t in _IMMUTABLE:
    register_restorer(_t, put_replace, leaf=True)


def _put_sequence(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    """A mutable sequence of values (``deque``, ``bytearray``, ``array.array``): its items replaced."""
    memo[id(stored)] = live
    if isinstance(live, collections.deque):
        live.clear()
        live.extend(_remap(x, memo) for x in stored)
    else:
        live[:] = stored
    return live


def _put_weakref(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    """A weak reference stays the caller's where it refers to what its stored one's referent went into
    (a back-reference to the object holding it); any other cannot be made again."""
    target = stored()
    if target is None and live() is None:
        return live
    if target is not None and memo.get(id(target)) is live():
        return live
    raise CannotRestore(path, "a weak reference to an object memolab did not put back")


register_restorer(weakref.ref, _put_weakref, leaf=True)
register_restorer(dict, _put_dict)
for _seq in (collections.deque, bytearray, array.array):
    register_restorer(_seq, _put_sequence)
register_restorer(list, _put_list)
register_restorer(set, _put_set)
register_restorer(tuple, _put_tuple)


# -- walks of live arguments ----------------------------------------------------------------------

def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    t = type(obj)
    if t in _leaves or any(c in _leaves for c in t.__mro__[:-1]) or rule_of(t) is put_replace:
        return
    if isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            if i >= _WIDTH:
                return
            yield path_segment(k), v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            if i >= _WIDTH:
                return
            yield f"[{i}]", v
    if rule_of(t) is _put_protocol:
        return
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        for k, v in list(d.items())[:_WIDTH]:
            yield f".{k}", v
    for name in _slots(t):
        if hasattr(obj, name):
            yield f".{name}", getattr(obj, name)


def _walk(named: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """(path, object) of what the arguments hold, each object once, bounded."""
    for _, path, obj in _walk_named(named):
        yield path, obj


def _walk_named(named: list[tuple[str, Any]]) -> Iterator[tuple[str, str, Any]]:
    """(argument name, path, object) of what the arguments hold, each object once, bounded."""
    seen: set[int] = set()
    stack = [(n, f"args[{n!r}]", v, 0) for n, v in reversed(named)]
    count = 0
    while stack and count < _NODES:
        name, path, obj, depth = stack.pop()
        if id(obj) in seen or type(obj) in _ATOMS:
            continue
        seen.add(id(obj))
        count += 1
        yield name, path, obj
        if depth < _DEPTH:
            stack.extend((name, path + seg, v, depth + 1) for seg, v in reversed(list(_children(obj))))



class Side:
    """State of an object that its key leaves out and a body may still change (a tensor's ``.grad``):
    ``token(obj)`` tells whether it changed (compared with ``same``), ``read``/``write`` carry it."""

    __slots__ = ("token", "same", "read", "write")

    def __init__(self, token: Callable[[Any], Any], same: Callable[[Any, Any], bool], read: Callable[[Any], Any],
                 write: Callable[[Any, Any], None]) -> None:
        self.token, self.same, self.read, self.write = token, same, read, write


_sides: dict[type, Side] = {}


def register_side(type_: type, side: Side) -> None:
    """Instances of ``type_`` (exactly) carry ``side`` state besides what their key sees."""
    _sides[type_] = side


class Before:
    """What the arguments held before a body that their key does not show (``live_parts``)."""

    __slots__ = ("live", "sides")

    def __init__(self) -> None:
        #: path -> the live iterator (or file) there, held so that its id cannot be reused
        self.live: dict[str, Any] = {}
        #: id(object) -> (argument name, the object, its side token)
        self.sides: dict[int, tuple[str, Any, Any]] = {}


def live_parts(named: list[tuple[str, Any]]) -> Before:
    """The live objects (iterators, files) the arguments hold, by path: what a key leaves out
    (a DataLoader's ``_iterator``) and a body may still start; and the side state (``register_side``)
    of what they hold. Compared before and after a body."""
    out = Before()
    try:
        for name, path, obj in _walk_named(named):
            t = type(obj)
            rule_of(t)  # (its module's rules and side states registered, lazily)
            if _live(t):
                out.live[path] = obj
            side = _sides.get(t)
            if side is not None:
                out.sides[id(obj)] = (name, obj, side.token(obj))
    except Exception:  # a walk of the user's objects checks what the key missed; a failing one finds nothing
        swallowed("mutations: live_parts")
    return out


def problems(named: list[tuple[str, Any]]) -> tuple[str, str] | None:
    """(path, why) of the first part of these arguments that could not be put back, or None."""
    for name, value in named:
        t = type(value)
        if rule_of(t) is put_replace and t not in _IMMUTABLE:
            return f"args[{name!r}]", f"a {t.__qualname__}, which its own __reduce__ rebuilds: not changed in place"
    for path, obj in _walk(named):
        t = type(obj)
        if rule_of(t) is None:
            kind = "a live iterator" if _live(t) else f"a {t.__qualname__} (no state memolab can set)"
            return path, kind
    return None


# -- a miss: what changed ---------------------------------------------------------------------------

class Changes:
    """What a body did to its arguments (``changed``)."""

    __slots__ = ("args", "files", "unrestorable", "refs", "sides")

    def __init__(self) -> None:
        #: name -> the argument object, for every argument whose digest moved
        self.args: dict[str, Any] = {}
        #: a memolab.File/Dir argument's digest moved (another writer changed the file meanwhile)
        self.files = False
        #: (path, why) of a change that cannot be put back
        self.unrestorable: tuple[str, str] | None = None
        #: id(argument object) -> its name, for results that are arguments
        self.refs: dict[int, str] = {}
        #: (object inside a changed argument, its side state)
        self.sides: list[tuple[Any, Any]] = []

    def wrap(self, value: Any) -> Any:
        """What is stored for ``value``: itself, or a ``Post`` with the changed arguments."""
        out = _to_refs(value, self.refs, 0) if self.refs else value
        if not self.args and out is value:
            return value
        return Post(out, dict(self.args), self.sides)


def changed(named: list[tuple[str, Any]], per_arg: dict[str, str], live_before: Before | None,
            hashed_files: bool = True) -> Changes:
    """Hash the arguments again after a body: which changed, and whether memolab can put them back.
    ``hashed_files``: the key hashed a ``memolab.File``/``Dir`` (one that changed is no argument the
    body changed: another writer did, and the result belongs to neither content)."""
    ch = Changes()
    ch.refs = {id(v): n for n, v in named if type(v) not in _ATOMS}
    try:
        _, after = hashing.hash_arguments(named)
    except HashError as e:
        ch.unrestorable = (e.path, f"the body left something that cannot be hashed there ({e.reason})")
        return ch
    except Exception as e:  # a file argument vanished, say: not what the key says either
        if hashed_files and any(_holds_files(v) for _, v in named):
            ch.files = True
        else:
            ch.unrestorable = ("args", f"they cannot be hashed again ({type(e).__name__}: {e})")
        return ch
    moved = set()  # arguments whose side state (a gradient) the body changed: no digest shows it
    if live_before is not None:
        for name, obj, token in live_before.sides.values():
            if not _sides[type(obj)].same(token, _sides[type(obj)].token(obj)):
                moved.add(name)
    for name, value in named:
        if after.get(name) == per_arg.get(name) and name not in moved:
            continue
        if hashed_files and _holds_files(value):
            ch.files = True  # (the existing rule: returned, not stored)
        else:
            ch.args[name] = value
    if ch.args:
        try:
            found = problems([(n, v) for n, v in named if n in ch.args])
            if found is not None:
                ch.unrestorable = (found[0], f"{found[1]}, in an argument it changed")
        except Exception as e:  # an object the walk cannot read: nothing memolab could put back either
            ch.unrestorable = ("args", f"{type(e).__name__}: {e}")
    if ch.unrestorable is None and live_before is not None:
        now = live_parts(named)
        for path, obj in now.live.items():
            if live_before.live.get(path) is not obj:
                ch.unrestorable = (path, "a live iterator the body started")
                break
    if ch.args and ch.unrestorable is None and _sides:
        # the side state of everything the changed arguments hold travels with them
        ch.sides = [(obj, _sides[type(obj)].read(obj)) for _, obj in _walk([(n, v) for n, v in named if n in ch.args])
                    if type(obj) in _sides]
    return ch


def _holds_files(value: Any) -> bool:
    if type(value) in (files.File, files.Dir):
        return True
    return any(type(o) in (files.File, files.Dir) for _, o in _walk([("", value)]))


def _to_refs(value: Any, refs: dict[int, str], depth: int) -> Any:
    """``value`` with the call's argument objects in it (itself, or inside a tuple, list or dict)
    replaced by ``ArgRef``s."""
    name = refs.get(id(value))
    if name is not None:
        return ArgRef(name)
    t = type(value)
    if depth >= 3 or t not in (tuple, list, dict):
        return value
    if t is dict:
        items = {k: _to_refs(v, refs, depth + 1) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    seq = [_to_refs(v, refs, depth + 1) for v in value]
    return t(seq) if any(a is not b for a, b in zip(seq, value, strict=True)) else value


# -- a hit: put it back ---------------------------------------------------------------------------

def split(value: Any) -> tuple[Any, Post | None]:
    """A loaded result: (the value as stored, its ``Post`` or None)."""
    if type(value) is Post:
        return value.value, value
    return value, None


def restore(value: Any, post: Post | None, named: list[tuple[str, Any]] | None) -> Any:
    """Put ``post``'s arguments back into the caller's (``named``); the value, its argument
    references resolved to the caller's objects."""
    if post is None:
        return value
    live = dict(named or ())
    memo: dict[int, Any] = {}
    for name, stored in post.args.items():
        if name not in live:
            raise CannotRestore(f"args[{name!r}]", "the call has no such argument")
        obj = live[name]
        got = put_back(obj, stored, memo, f"args[{name!r}]")
        if got is not obj:
            raise CannotRestore(f"args[{name!r}]", f"a {type(obj).__qualname__} cannot be changed in place")
    for stored_obj, state in post.sides:
        target = memo.get(id(stored_obj))
        side = _sides.get(type(stored_obj))
        if target is not None and side is not None:
            side.write(target, state)
    return _from_refs(value, live, memo, 0)


def _from_refs(value: Any, live: dict[str, Any], memo: dict[int, Any], depth: int) -> Any:
    t = type(value)
    if t is ArgRef:
        return live[value.name]
    got = memo.get(id(value))
    if got is not None:
        return got
    if depth >= 3 or t not in (tuple, list, dict):
        return value
    if t is dict:
        return {k: _from_refs(v, live, memo, depth + 1) for k, v in value.items()}
    return t(_from_refs(v, live, memo, depth + 1) for v in value)
