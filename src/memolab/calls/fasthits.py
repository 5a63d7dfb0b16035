"""A repeat hit without keying the call again: one memoized function's table from a call's plain
arguments to the in-memory copy its full path served (docs/cache-rules.md, "Repeat hits").

A repeat hit through the full path binds the arguments, hashes them, makes the key, finds the
store, looks the key up in the store's in-memory copies and checks the row found there. For the
commonest call (a few plain scalars, the same as a moment ago) every step but the last gives
the answer it gave then, and this table skips them. It is used only when that is provable:

* **The arguments.** Only a call whose every argument (positional or by name) has one of the
  exact types ``int``, ``float``, ``str``, ``bytes``, ``bool``, ``None`` is looked up, by
  ``(type, value)`` (a float by its IEEE bytes): ``1``, ``1.0`` and ``True`` are three entries,
  ``0.0`` and ``-0.0`` two, as their digests are (``hashing``: these types encode as a pure
  function of type and value, never by reference, the rule its own scalar digests rely on).
  A tuple is not looked up: the key tells ``f(t, t)`` from ``f(t, copy(t))``, a value cannot.
  A function whose defaults are not such scalars, a callable object (whose own state is
  hashed with its arguments) and an async function have no table.
* **What else made the key** is the same object or value as when the entry was made, each
  asked the way the full path asks it: the code version (the code graph's quiet check, or where
  a namespace was written, ``MemoFunction.code_version``'s full check: the very ``CodeVersion``
  object the entry was made with, which a graph replaces whenever its digest may change), the
  handler registry's generation, the
  store (``MemoFunction.store``: the working directory, the settings, the environment, the
  pid), and the switches and ``env=`` variables that join every key (``implicit.parts``). A
  memoized function's attributes (its options) are its own: setting any empties its table.
* **The row.** Only a row the full path served from memory as it is: no expiry
  (``max_age``, ``validate``), no files read by path, no generator states (those are checked
  on every hit, and this table does not repeat the checks). The entry holds the very row
  object the store's copy holds: the store's ``load_from_memory`` serves it only while that
  copy is the one the entry was made from, so ``clear``, ``fresh``, a corrupt mark, eviction
  or a reload (each drops or replaces it) send the call down the full path.
* **The value** is what the full path makes of that copy: unpickled afresh (a caller mutating
  a result never reaches the next hit), counted, its digests remembered, its lineage marked,
  and a body in progress told it used it (``rows.served``).
"""
from __future__ import annotations

import struct
from typing import Any

from .. import codegraph, hashing
from ..codegraph import ACTIVE_GUARD
from ..hashing.encoder import REGISTRY_GENERATION
from ..hashing.registry import leaves
from ..inputs.implicit import parts as implicit_parts
from ..inputs.reads import RECORDING
from ..store import Key
from ..store.inline import plain_scalar
from .rows import served, used_by_body

__all__ = ["FastTable", "table_key", "eligible", "ENTRIES", "CACHES", "MISS"]

#: entries a function's table holds; a full table is emptied (refilled by the calls that follow)
ENTRIES = 256
#: a string or bytes argument longer than this is not looked up (the table would hold it)
TEXT_MAX = 256
#: inline bytes the rows of a table may hold (a copy the store evicted stays alive while its
#: entry does); past it the table is emptied
TABLE_BYTES = 1 << 20

_SCALARS = frozenset((int, float, str, bytes, bool, type(None)))
#: hashed and compared by value with nothing to tell apart but the type (kept beside them)
_PLAIN = frozenset((int, bool, type(None)))
_pack_d = struct.Struct("<d").pack
#: an entry's value when the full path's is not an immutable scalar it may share
_UNPICKLE = object()
#: ``FastTable.hit``'s answer where the table cannot answer (no tuple of (found, value) to build)
MISS: Any = object()


def table_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """A call's key in the table, or None where its arguments are not plain scalars.

    The commonest call (positional ints, bools, None) is keyed as (their types, the arguments):
    ``1`` and ``True`` are equal values of two types. Any other is keyed by parts: a float by its
    IEEE bytes (``0.0`` and ``-0.0`` apart, a NaN by its bits, as its digest is), a named
    argument with its name, after the positional ones; the ``None`` first tells the two forms apart."""
    types = tuple(map(type, args))
    if not kwargs and _PLAIN.issuperset(types):
        return types, args
    if not _SCALARS.issuperset(types):
        return None
    out: list[Any] = [None]
    for v in args:
        p = _part(v)
        if p is None:
            return None
        out.append(p)
    for n, v in kwargs.items():
        p = _part(v)
        if p is None:
            return None
        out.append((n, *p))
    return tuple(out)


def _part(v: Any) -> Any:
    t = type(v)
    if t is float:
        return t, _pack_d(v)
    if t in _SCALARS and (len(v) <= TEXT_MAX if t is str or t is bytes else True):
        return t, v
    return None


class FastTable:
    """One memoized function's repeat hits: table key -> what its full path served."""

    __slots__ = ("entries", "held")

    def __init__(self) -> None:
        #: table key -> (key, store, code graph, code version, switches/env parts, row, named,
        #: handler generation, the value to share or ``_UNPICKLE``, the row test of a load,
        #: ``memo.store_probe``'s question, the version sensitivity the code was checked in)
        self.entries: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: inline bytes of the rows held (``TABLE_BYTES``)
        self.held = 0

    def clear(self) -> None:
        self.entries = {}
        self.held = 0

    def hit(self, memo: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The value the full path would serve this call from the same in-memory copy, or ``MISS``.

        Each check is written out here rather than asked of the function the full path calls
        (a Python call costs about as much as the check it makes): the same questions, asked
        of the same objects, in one frame."""
        entries = self.entries
        if not entries:
            return MISS
        n = len(args)  # (one or two arguments without ``map``: a third of its cost)
        types = (type(args[0]),) if n == 1 else (type(args[0]), type(args[1])) if n == 2 else tuple(map(type, args))
        k = (types, args) if not kwargs and _PLAIN.issuperset(types) else table_key(args, kwargs)
        if k is None:
            return MISS
        e = entries.get(k)
        if e is None:
            return MISS
        src = memo._defaults_src  # (``memo._defaults_moved``, written out: new defaults, the full path binds them)
        if src is not None and (src[3] != src[4] if src[3] is not None
                                else src[0].__defaults__ is not src[1] or src[0].__kwdefaults__ is not src[2]):
            return MISS
        key, store, root, cv, extra, row, named, gen, atom, accept, probe, sens = e
        # The store ``memo.store()`` would return: its cache holds this store, for the answer its
        # question (``store_probe``: the settings' generation, the store variables, the working
        # directory, the pid) gives now. (The settings' generation, in every store's question,
        # also stands for ``version_sensitivity``'s default, resolved into ``sens`` when the
        # entry was made: the settings are the same object while it is unchanged.)
        cached = memo.store_cache
        if cached[1] is not store or probe() != cached[0] or gen != REGISTRY_GENERATION[0] \
                or implicit_parts(memo.env) != extra:
            entries.pop(k, None)  # (the full path makes the entry of what is true now)
            return MISS
        if root is not None:
            # what ``codegraph.function_code`` asks before ``Root.quiet``: no digest under way in
            # this thread (whose cycle guard could answer otherwise), the root built in this sensitivity
            now = root.quiet() if not ACTIVE_GUARD.ids and root.sensitivity == sens else None
            if now is None:  # a namespace it went through was written (a script's own loop): the full check
                now = memo.code_version()
            if now is not cv:
                entries.pop(k, None)
                return MISS
        if atom is not _UNPICKLE:
            # what ``served`` does to an immutable scalar: nothing but remembering its (empty) digests
            if not store.hit_in_memory(key, row):
                entries.pop(k, None)
                return MISS
            if type(atom) in leaves:  # (else ``remember_loaded`` finds no leaf in a scalar: hashing/results.py)
                hashing.remember_loaded(atom, key)
            if RECORDING.get() is not None:  # (``reads.active()``)
                used_by_body(key, row)
            return atom
        found, value = store.load_from_memory(key, accept)
        if not found:
            entries.pop(k, None)
            return MISS
        return served(store, key, value, row, named)[0]

    def admit(self, memo: Any, args: tuple[Any, ...], kwargs: dict[str, Any], key: Key, cv: Any, store: Any,
              named: list[tuple[str, Any]], seen: list[Any], value: Any) -> None:
        """After the full path served this call from memory (``seen``: ``rows.memory_hit``'s note,
        ``value``: what it returned), with no expiry to judge: make its entry where every
        condition of the module's holds."""
        if len(seen) != 1:
            return
        served_key, row, post = seen[0]
        if served_key != key or post or row.get("reads", True) or row.get("state_deps", True) is not None:
            return  # routed by generator states, arguments put back, files read: checked on every hit
        extra = [p for p in named if p[0][:1] == "<"]  # (pseudo-arguments: no parameter name starts so)
        if any(v is not None and type(v) is not str for _, v in extra):
            return  # a library's switches (a dict of its settings): keyed, not compared here
        k = table_key(args, kwargs)
        if k is None:
            return
        root = None
        if memo.code != "version":  # (keyed by ``version`` alone: a code digest that cannot change)
            root = codegraph.function_root(memo.fn)
            if root is None or root.cv is not cv or root.extra != memo.deps:
                return  # a digest of a cycle, of a graph not cached: asked of the full path each time
        probe, cached = memo.store_probe()
        if cached[1] is not store:
            return  # (another thread opened another store meanwhile: the next call's full path decides)
        sens = codegraph.sensitivity(memo.version_sensitivity)
        atom = value if type(value) in _SCALARS and _plainly_pickled(store, key, row, value) else _UNPICKLE
        memo.watch_defaults()  # (once: setting it empties this table, before this entry is made)
        size = len(row.get("inline") or b"")
        if len(self.entries) >= ENTRIES or self.held + size > TABLE_BYTES:
            self.clear()
        self.held += size

        def accept(r: dict[str, Any], row: dict[str, Any] = row) -> bool:
            return r is row

        self.entries[k] = (key, store, root, cv, extra, row, named, REGISTRY_GENERATION[0], atom, accept,
                           probe, sens)


def _plainly_pickled(store: Any, key: Key, row: dict[str, Any], value: Any) -> bool:
    """Is the in-memory copy's payload the plain pickle of ``value`` (an immutable scalar)? Then
    unpickling it runs no code and gives an equal value of the same type every time, and the
    table may return ``value`` itself. A payload that made it by any other way (a reducer, a
    class) is unpickled on every hit, as the full path does."""
    payload_of = getattr(store, "memory_payload", None)  # (a team store: its local store's copies, unpickled)
    payload = payload_of(key, row) if payload_of is not None else None
    if not payload or payload[0] != 0x80:
        return False
    plain, read = plain_scalar(payload)  # (read without the unpickler: a fresh process's first hit imports none)
    if plain:  # the payload builds one scalar and nothing else: ``value`` if it is that very scalar
        return type(read) is type(value) and (_pack_d(read) == _pack_d(value) if type(value) is float else read == value)
    import _pickle

    return bool(_pickle.dumps(value, protocol=payload[1]) == payload)


def eligible(implicit: Any, defaults: tuple[tuple[str, Any], ...], is_async: bool) -> bool:
    """Can a function have a table: no callable object's own state to hash, plain defaults (a
    default list could be changed in place between calls), and not a coroutine function."""
    return implicit is None and not is_async and table_key(tuple(d for _, d in defaults), {}) is not None


#: ``MemoFunction`` attributes that are caches of its own, not options: setting them keeps the table
CACHES = frozenset(("store_cache", "_fast"))
