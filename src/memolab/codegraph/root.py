"""The cached graph of one memoized function or object (``Root``) and its per-call checks.

``Root`` builds its ``Graph`` (``codegraph/graph.py``) once, then on each call checks only that
the namespaces the graph went through still hold the same code objects and values
(``_NsCheck``: one per namespace, with version tags where ``dictversion`` has them), and
returns the same ``CodeVersion`` while they do: see the package docstring for the cost model.
"""
from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any

import xxhash

from . import dictversion, origins
from .graph import Graph
from .where import (
    CODE_SCHEMA,
    MISSING as _MISSING,
    CodeVersion,
    cell_value as _cell,
    is_code as _is_code,
    is_immutable as _is_immutable,
    short as _short,
)


def _same_code(now: Any, expected: Any, multi: bool) -> bool:
    """Slot values that are the graph's, but for memolab's own wrappers of them: the drawing
    functions of ``random`` are wrapped only while a memoized body runs (``globalrng``)."""
    pairs = zip(now, expected, strict=False) if multi else ((now, expected),)
    return all(a is b or getattr(a, "__memolab_wraps__", None) is b for a, b in pairs)


class _NsCheck:
    """What one namespace must still hold: the code objects the graph went through, the values it read."""

    __slots__ = ("ns", "tag", "last_tag", "cget", "cexpected", "cmulti", "absent", "vget", "vidx", "vmulti",
                 "vlast", "vimmutable")

    def __init__(self, ns: dict[str, Any]) -> None:
        self.ns = ns
        self.tag: Any = None  # set by ``Root._arm``
        self.last_tag: Any = None
        self.cget: Any = None
        self.cexpected: Any = None
        self.cmulti = False
        self.absent: tuple[str, ...] = ()
        self.vget: Any = None
        self.vidx: tuple[int, ...] = ()
        self.vmulti = False
        self.vlast: tuple = ()
        self.vimmutable = False


class Root:
    """The cached graph of one memoized function (or of one class or function hashed as a value)."""

    __slots__ = ("extra", "sensitivity", "graph", "static", "checks", "same", "values", "vslow", "cv", "lock",
                 "views", "stamp", "armed", "fviews", "fslots", "__weakref__")

    def __init__(self, objs: list[Any], extra: tuple, sensitivity: str,
                 value_digest: Callable[[Any, str], str]) -> None:
        # ``current`` reads namespaces, then records what it saw (tags, value
        # slots): two threads interleaving there could record an old value
        # under a new tag and serve a stale digest from then on.
        self.lock = threading.Lock()
        self.extra = extra
        self.sensitivity = sensitivity
        g = self.graph = Graph(sensitivity, value_digest)
        g.build(objs)
        self.static = dict(g.deps)
        #: per value slot: (last object seen, its digest)
        self.values: list[tuple[Any, str]] = [(_MISSING, "") for _ in g.value_slots]
        per_ns: dict[int, tuple[_NsCheck, dict[str, Any], list[str], list[int]]] = {}

        def entry(ns: dict[str, Any]) -> tuple[_NsCheck, dict[str, Any], list[str], list[int]]:
            e = per_ns.get(id(ns))
            if e is None:
                e = per_ns[id(ns)] = (_NsCheck(ns), {}, [], [])
            return e

        #: (namespace, name, object) whose type overrides ``==``: checked by identity one by one, each
        #: slot once (2,000 functions calling ``math.sqrt`` go through one slot, not 2,000)
        same: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        for ns, name in g.absent:
            c = entry(ns)[0]
            if name not in c.absent:
                c.absent += (name,)
        for ns, name, obj in g.code_slots:
            if type(obj).__eq__ is not object.__eq__:  # type: ignore[comparison-overlap]
                same.setdefault((id(ns), name), (ns, name, obj))
                entry(ns)
            else:
                entry(ns)[1][name] = obj
        for ns, name, obj in g.identity_slots:
            same.setdefault((id(ns), name), (ns, name, obj))
        self.same: list[tuple[Any, str, Any]] = list(same.values())
        # value slots of one namespace are read with one itemgetter; cells and
        # names not bound yet are read one by one, on every call
        self.vslow: list[int] = []
        for i, (_sym, where, name) in enumerate(g.value_slots):  # type: ignore[assignment]  # (None: a cell)
            if name is not None and type(where) is dict and name in where:
                e = entry(where)
                e[2].append(name)
                e[3].append(i)
            else:
                self.vslow.append(i)
        self.checks: list[_NsCheck] = []
        for c, code, vnames, vidx in per_ns.values():
            if code:
                keys = sorted(code)
                c.cget = operator.itemgetter(*keys)
                c.cexpected = tuple(code[k] for k in keys) if len(keys) > 1 else code[keys[0]]
                c.cmulti = len(keys) > 1
            if vnames:
                c.vget = operator.itemgetter(*vnames)
                c.vidx = tuple(vidx)
                c.vmulti = len(vnames) > 1
            self.checks.append(c)
        self.views: tuple[memoryview, ...] | None = None
        #: the stamp taken *before* the last full check that found everything unchanged
        #: and immutable; None while some value must be re-read on every call
        self.stamp: bytes | None = None
        self.cv: CodeVersion | None = None
        #: version tags are read from the graph's second check on (``_arm``)
        self.armed = False
        #: the function slots of ``graph.func_checks`` as raw bytes (``dictversion.func_view``), and
        #: the bytes they showed when the graph was built; None: read them as attributes
        self.fviews: tuple[memoryview, ...] | None = None
        self.fslots = b"".join(dictversion.func_slots(*c[1:]) for c in g.func_checks)

    def _arm(self) -> None:
        """Start reading dict version tags: at the graph's second check, not its first.

        One stamp for the whole graph: the version tags of every namespace and
        class dict it went through, read in one C-level pass (``b"".join``) and
        compared in one ``memcmp``. While it equals the stamp of the last full
        check and every value read there was immutable, nothing the digest was
        made from can have changed, and no per-namespace or per-class check
        runs (issue 14: per-class checks made a repeat call grow with the
        number of classes, 75 ns each). Where a tag cannot be read
        (``dictversion``), there is no stamp and every check runs each call.

        Not on the first check: a first check compares every name anyway (no tag
        was recorded before it), and reading tags costs loading ``_ctypes``
        (about 0.6 ms), which a script whose only call is a hit never needs.
        Tags taken from the second check on are recorded by a full check first."""
        self.armed = True
        for c in self.checks:
            c.tag = dictversion.tag_reader(c.ns)
            c.last_tag = None
        for cc in self.graph.class_checks:
            cc.arm()
        fviews = [dictversion.func_view(c[0]) for c in self.graph.func_checks]
        self.fviews = None if None in fviews else tuple(fviews)  # type: ignore[arg-type]  # (no None in them)
        views = [dictversion.tag_view(c.ns) if c.tag is not None else None for c in self.checks]
        views += [v for cc in self.graph.class_checks for v in (cc.view, cc.mro_view)]
        # the functions' slots join the stamp: a quiet call compares them in the same ``memcmp``
        views += self.fviews if self.fviews is not None else [None]
        self.views = None if None in views else tuple(views)  # type: ignore[arg-type]  # (no None in them)
        self.stamp = None

    def _functions_changed(self, stamp: bytes | None) -> bool:
        """Does a function of the graph hold another code object or defaults than when it was built?
        ``stamp``: the gather ``_current`` just took, whose tail is the functions' slots (``_arm``
        puts their views last), read again here only when there is none."""
        if stamp is not None:
            return stamp[len(stamp) - len(self.fslots):] != self.fslots
        if self.fviews is not None:
            return b"".join(self.fviews) != self.fslots
        return any(f.__code__ is not c or f.__defaults__ is not d or f.__kwdefaults__ is not k
                   for f, c, d, k in self.graph.func_checks)

    def current(self) -> CodeVersion | None:
        """This graph's code version now, or None when the graph must be rebuilt."""
        with self.lock:
            return self._current()

    def quiet(self) -> CodeVersion | None:
        """``current``'s answer when no dict the graph went through was written since a full
        check found every value immutable (the stamp, which holds the graph's functions' code and
        defaults pointers too) and each name checked through an object that overrides ``==``
        (``same``: ``math.copysign``, ``os.environ``) still holds that very object in its plain
        dict; else None: ask ``current``. It reads raw bytes and dict entries only, hashing
        nothing: no user code runs (``_current_quiet``'s ``getattr`` is reached only for an object
        that is not the one recorded), so it cannot reach this graph again (the caller skips the
        cycle guard ``current`` needs: a repeat hit's commonest case).

        It takes no lock, and needs none: it only reads, and ``_current`` (which writes under the
        lock) sets ``cv`` before the stamp it belongs to. A stamp read here was set after its
        ``cv``, so the ``cv`` read after it is that one or a later writer's; and dict version tags
        only grow, so tags equal to the stamp mean no write since that writer began: a later
        writer's ``cv`` is then of a state newer than the one seen here, never older (the caller
        compares it by identity with the one it holds, so a newer one is a miss, not an answer).
        A stamp and views from before ``_arm`` are None or differ (it sets the views, then clears
        the stamp)."""
        views = self.views
        stamp = self.stamp
        if views is None or stamp is None or b"".join(views) != stamp:
            return None
        for ns, name, obj in self.same:
            if type(ns) is not dict or ns.get(name, _MISSING) is not obj:
                return None
        # (``_current_quiet``'s function checks are in the stamp: ``_arm`` made views of every
        # function's slots, or made no stamp at all)
        return self.cv

    def _current(self) -> CodeVersion | None:
        g = self.graph
        if not self.armed and self.cv is not None:
            self._arm()
        # taken first: a write that lands while the checks below run makes the next stamp differ
        stamp = b"".join(self.views) if self.views is not None else None
        if stamp is not None and stamp == self.stamp:
            return self._current_quiet()
        values = self.values
        dirty: list[int] = []
        seen_tags = []
        for c in self.checks:
            tag = c.tag.value if c.tag is not None else None
            if tag is not None and tag == c.last_tag and c.vimmutable:
                continue  # nothing written to this namespace since it was last checked
            ns = c.ns
            try:
                if tag is None or tag != c.last_tag:  # names can only be rebound by a write
                    # one C-level read per namespace, compared by identity: ``!=`` would
                    # ask the *new* object, which may claim equality (or return an array)
                    if c.cget is not None:
                        now = c.cget(ns)
                        if not (all(map(operator.is_, now, c.cexpected)) if c.cmulti else now is c.cexpected) \
                                and not _same_code(now, c.cexpected, c.cmulti):
                            return None
                    if c.absent and any(map(ns.__contains__, c.absent)):
                        return None  # a name now shadows the builtin the graph resolved it to
                cur = c.vget(ns) if c.vget is not None else ()
            except KeyError:  # a name the graph went through was deleted
                return None
            if c.vget is not None:
                if not c.vmulti:
                    cur = (cur,)
                if not (c.vimmutable and all(map(operator.is_, cur, c.vlast))):
                    dirty.extend(c.vidx)
            seen_tags.append((c, tag))
        for ns, name, obj in self.same:
            now = ns.get(name, _MISSING)
            if now is not obj and getattr(now, "__memolab_wraps__", None) is not obj:
                return None
        if self._functions_changed(stamp):
            return None
        for cc in g.class_checks:
            if not cc.unchanged():
                return None
        dirty.extend(self.vslow)
        changed = self.cv is None
        slots = g.value_slots
        for i in dirty:
            sym, where, name = slots[i]  # type: ignore[assignment]  # (None: a cell)
            v = _cell(where) if name is None else where.get(name, _MISSING)
            last_v, d = values[i]
            if v is last_v and _is_immutable(v):
                continue
            nd = g.value_digest(v, sym)
            values[i] = (v, nd)
            changed = changed or nd != d
        for c, tag in seen_tags:
            c.last_tag = tag
            if c.vget is not None:
                c.vlast = tuple(values[i][0] for i in c.vidx)
                c.vimmutable = all(_is_immutable(o) for o in c.vlast)
            else:
                c.vimmutable = True
        if changed:
            self.cv = self._code_version()
        quiet = not self.vslow and all(c.vimmutable for c in self.checks)
        self.stamp = stamp if quiet else None
        return self.cv

    def _current_quiet(self) -> CodeVersion | None:
        """``_current`` when no dict the graph went through was written since a full check.

        What no dict tag covers is still checked: names resolved through an
        object whose ``==`` is overridden (``same``); the functions' code and
        defaults are in the stamp. Cells and names not bound yet (``vslow``)
        keep the stamp unset, so they never reach this path.
        """
        for ns, name, obj in self.same:
            now = ns.get(name, _MISSING)
            if now is not obj and getattr(now, "__memolab_wraps__", None) is not obj:
                return None
        return self.cv

    def _code_version(self) -> CodeVersion:
        g = self.graph
        deps = dict(self.static)
        sources = dict(g.sources)
        for (sym, _where, _name), (v, d) in zip(g.value_slots, self.values, strict=False):
            deps[sym] = d
            if v is not _MISSING and not _is_code(v):
                sources[sym] = f"{sym.rpartition(':')[2]} = {_short(v)}\n"
        h = xxhash.xxh3_128()
        h.update(CODE_SCHEMA.encode())
        for k in sorted(deps):
            v = deps[k]
            if k.startswith("pkg:") or k.startswith("python:"):
                v = origins.truncate(v, self.sensitivity)
            b = f"{k}={v}".encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
        return CodeVersion(h.hexdigest(), deps, sources, self.sensitivity, frozenset(g.lazy))
