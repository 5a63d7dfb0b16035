"""Classes in the binding graph: what a class's own code says (``class_info``,
cached and redone when the class is patched) and the per-call check that it has
not been patched since the graph was built (``ClassCheck``)."""
from __future__ import annotations

import functools
import gc
import linecache
import operator
import textwrap
import types
import weakref
from typing import Any

from . import bytecode, dictversion
from .bytecode import digest_text
from .where import (
    cell_value as _cell,
    defaults_of as _defaults,
    is_code as _is_code,
    module_ns as _module_ns,
    short as _short,
    unwrap as _unwrap,
)

# -- classes ---------------------------------------------------------------------------------

#: class attributes that are derived from the rest, or say nothing about behaviour
_CLASS_SKIP = frozenset(("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                         "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__",
                         "__abstractmethods__", "_abc_impl", "__dataclass_fields__", "__match_args__",
                         "__annotate__", "__annotate_func__", "__annotations_cache__",
                         # caches that pickling (copyreg) and typing add to a class later
                         "__slotnames__", "_is_protocol", "__protocol_attrs__", "__callable_proto_members_only__"))


class ClassInfo:
    """What a class's own code says: digest, references of its methods, other code it holds, excerpt."""

    __slots__ = ("digest", "refs", "other_refs", "edges", "values", "source", "dynamic", "ns", "stamp",
                 "slots", "__weakref__")

    def __init__(self, cls: type) -> None:
        self.stamp = _class_stamp(cls)
        #: (function, its ``__code__``, ``__defaults__``, ``__kwdefaults__``) of each function whose code
        #: this analysis read, taken before it was read: no dict holds these (a hot reloader patches a
        #: method's code in place), so the analysis is good while each function still holds them
        self.slots: list[tuple[types.FunctionType, Any, Any, Any]] = []
        parts: list[str] = [cls.__qualname__]
        #: id(globals) -> (globals, names read): methods made by exec (attrs) run with
        #: globals of their own, and a name must be resolved where its code looks it up
        by_ns: dict[int, tuple[dict[str, Any], set]] = {}
        dynamic: list = []
        #: (label, code object held by the class that is not its own method)
        self.edges: list[tuple[str, Any]] = []
        #: (label, plain attribute value): hashed when the graph is built
        self.values: list[tuple[str, Any]] = []
        own: list[types.FunctionType] = []
        prefix = cls.__qualname__ + "."

        def function(label: str, f: Any) -> None:
            if hasattr(f, "__wrapped__") and not isinstance(f, type):
                # the decorator's own code (and a library's arguments, ``Graph.target``), by the code's
                # own name: ``functools.wraps`` copies the method's onto the wrapper
                if isinstance(f, types.FunctionType) and not getattr(f.__code__, "co_qualname", f.__qualname__) \
                        .startswith(prefix):
                    self.edges.append((label + ".<wrapper>", f))
                f = _unwrap(f)
            if isinstance(f, types.FunctionType) and f.__qualname__.startswith(prefix) \
                    and f.__module__ == cls.__module__:
                self.slots.append((f, f.__code__, f.__defaults__, f.__kwdefaults__))
                a = bytecode.analyse_code(f.__code__)
                parts.append(f"{label}={a.digest}")
                by_ns.setdefault(id(f.__globals__), (f.__globals__, set()))[1].update(a.refs)
                dynamic.extend(a.dynamic)
                own.append(f)
                for name, cell in zip(f.__code__.co_freevars, f.__closure__ or (), strict=False):
                    if name != "__class__":  # the cell ``super()`` uses holds the class itself
                        self.values.append((f"{label}.<closure {name}>", _cell(cell)))
                # ``def __init__(self, hidden=HIDDEN)``: the default was computed when the
                # class statement ran and lives on the function, not in its code, so an
                # edit of HIDDEN leaves the bytecode digest as it was
                for name, v in _defaults(f, named=True):
                    if _is_code(_unwrap(v)):
                        self.edges.append((f"{label}.<default {name}>", v))
                    else:
                        self.values.append((f"{label}.<default {name}>", v))
            elif _is_code(f):
                self.edges.append((label, f))
            else:
                self.values.append((label, f))

        for name in sorted(cls.__dict__):
            if name in _CLASS_SKIP or (name[:1] == "_" and name[-1:] == "_" and name[1:2] != "_" and len(name) > 2):
                continue  # _sunder_ names are enum's bookkeeping, derived from the members
            v = cls.__dict__[name]
            if isinstance(v, (staticmethod, classmethod)):
                function(f"{name}<{type(v).__name__}>", v.__func__)
            elif isinstance(v, property):
                for part in ("fget", "fset", "fdel"):
                    if getattr(v, part) is not None:
                        function(f"{name}<property.{part}>", getattr(v, part))
            elif type(v).__name__ == "cached_property" and hasattr(v, "func"):
                function(f"{name}<cached_property>", v.func)
            elif isinstance(v, functools.singledispatchmethod):
                # its own body, and the dispatcher holding every registered implementation
                function(f"{name}<singledispatchmethod>", v.func)
                self.edges.append((f"{name}<dispatcher>", v.dispatcher))
            elif isinstance(v, types.FunctionType) or (hasattr(v, "__wrapped__") and callable(v)):
                function(name, v)
            elif cls in type(v).__mro__:  # not isinstance(): TypedDict and others raise from __instancecheck__
                # an Enum member: what it stands for, not the member (whose hash needs this class's digest)
                self.values.append((f"{name}<member>", getattr(v, "_value_", None)))
            elif isinstance(v, type) or isinstance(v, types.ModuleType) or isinstance(v, types.BuiltinFunctionType):
                self.edges.append((name, v))
            else:
                self.values.append((name, v))
        if type(cls) is not type:
            self.edges.append(("<metaclass>", type(cls)))
        module_ns = _module_ns(cls.__module__)
        groups = sorted(by_ns.values(), key=lambda g: g[0] is not module_ns)  # the module's own first
        self.ns = groups[0][0] if groups else None
        self.digest = digest_text("class", *parts)
        self.refs = frozenset(groups[0][1]) if groups else frozenset()
        #: names read by methods that run with other globals, each with those globals
        self.other_refs = tuple((g, frozenset(r)) for g, r in groups[1:])
        self.dynamic = tuple(dynamic)
        # methods made by exec (dataclass, attrs) have no lines of the user's own file
        mod_file = module_ns.get("__file__")
        self.source = _class_excerpt(cls, [f for f in own if f.__code__.co_filename == mod_file] or own)
        # what no line of the class statement shows (``hidden=HIDDEN`` reads the same
        # after HIDDEN is edited): the values it was defined with, for explain's diff
        shown = [f"#   {label} = {r}" for label, r in ((label, _short(v)) for label, v in self.values)
                 if " at 0x" not in r]
        if self.source and shown:
            self.source += "# values held since the class was defined:\n" + "\n".join(shown) + "\n"


def _class_excerpt(cls: type, own: list[types.FunctionType]) -> str:
    """The ``class`` statement's source, found from its methods' lines (classes carry no line number)."""
    if not own:
        return ""
    filename = own[0].__code__.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename)
    if not lines:
        return ""
    first = min(f.__code__.co_firstlineno for f in own if f.__code__.co_filename == filename)
    last = max(bytecode.last_line(f.__code__) for f in own if f.__code__.co_filename == filename)
    head = f"class {cls.__name__}"
    start = first
    for i in range(first - 1, max(0, first - 400), -1):
        if lines[i - 1].lstrip().startswith(head):
            start = i
            break
    while start > 1 and lines[start - 2].lstrip().startswith("@"):
        start -= 1
    return textwrap.dedent("".join(lines[start - 1:last]))


class_infos: weakref.WeakKeyDictionary[type, ClassInfo] = weakref.WeakKeyDictionary()


def _class_stamp(cls: type) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """What a class's analysis was made from, as far as its dict holds it: its attributes.

    IPython's ``%autoreload`` patches an old class in place (``setattr`` on the
    class, ``__code__`` on its functions) while notebooks keep using it: the
    functions' own slots are ``ClassInfo.slots``.
    """
    return tuple(cls.__dict__), tuple(cls.__dict__.values())


def class_info(cls: type) -> ClassInfo:
    """The cached analysis of ``cls``, redone when the class was changed since (checked per graph build)."""
    info = class_infos.get(cls)
    if info is not None:
        names, objs = _class_stamp(cls)
        if names != info.stamp[0] or len(objs) != len(info.stamp[1]) \
                or not all(map(operator.is_, objs, info.stamp[1])) \
                or any(f.__code__ is not c or f.__defaults__ is not d or f.__kwdefaults__ is not k
                       for f, c, d, k in info.slots):
            info = None
    if info is None:
        info = class_infos[cls] = ClassInfo(cls)
    return info


class ClassCheck:
    """Has a class been patched since the graph was built (``Config.lr = 0.2``,
    ``Model.forward = other``)? A class's attributes are part of its digest, and
    unlike module globals they are not value slots: a change means a rebuild.

    One read of the class dict's version tag where CPython allows (the dict
    behind ``cls.__dict__``'s proxy), else a comparison of its attributes by
    identity. In-place mutation of a mutable class attribute is not seen.
    """

    __slots__ = ("cls", "stamp", "dict", "tag", "view", "last", "mro", "mro_view")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        #: its bases as the graph read them (``Model.__bases__ = (Other,)`` writes no dict)
        self.mro = cls.__mro__
        self.stamp = _class_stamp(cls)
        refs = gc.get_referents(cls.__dict__)  # a mappingproxy refers to exactly the real dict
        self.dict = refs[0] if len(refs) == 1 and type(refs[0]) is dict else None
        # no tag until ``arm`` (a graph's second check): every check compares the attributes
        self.tag: Any = None
        #: the same tag as raw bytes, gathered with every other tag of the graph (``_Root.views``)
        self.view: memoryview | None = None
        self.last = None
        #: its ``__bases__`` and ``__mro__`` pointers as raw bytes, gathered with the tags (None: not
        #: armed, or unsupported: then ``_Root`` makes no stamp)
        self.mro_view: memoryview | None = None

    def arm(self) -> None:
        """Read the class dict's version tag from now on (``_Root._arm``). ``last`` stays
        unset: the next ``unchanged`` compares the attributes once more, then records it."""
        self.tag = dictversion.tag_reader(self.dict) if self.dict is not None else None
        self.view = dictversion.tag_view(self.dict) if self.tag is not None else None  # type: ignore[arg-type]  # tag: dict set
        self.mro_view = dictversion.mro_view(self.cls)
        self.last = None

    def unchanged(self) -> bool:
        if self.cls.__mro__ is not self.mro:  # (new bases: a new MRO tuple, whatever it holds)
            return False
        if self.tag is not None and self.tag.value == self.last:
            return True
        names, objs = _class_stamp(self.cls)
        if names != self.stamp[0] or len(objs) != len(self.stamp[1]) or not all(map(operator.is_, objs, self.stamp[1])):
            return False
        if self.tag is not None:
            self.last = self.tag.value  # written, but with the same objects: nothing to rebuild
        return True
