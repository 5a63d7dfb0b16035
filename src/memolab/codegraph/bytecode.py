"""One function's normalised digest and free names, read from its code object.

Why the code object and not a fresh parse of the source? The compiler has
already turned the AST into it, positions dropped: hashing it costs no parse at
all (a 20,000-line package would take longer than our budget just to re-parse),
and its name resolution is the compiler's own, so comprehension, class-body,
``global`` and ``nonlocal`` scoping are exactly Python's. What is left out is
exactly what the AST-with-positions-dropped leaves out, plus the docstring:

* line numbers and columns (``co_firstlineno``, the line and position tables),
  so comments, blank lines and formatting (``black``) never change a digest;
* the file name (a project checked out elsewhere keeps its keys);
* the docstring (a constant that no instruction loads).

Everything the AST would keep is kept: every instruction, name, constant
(nested functions, lambdas and comprehensions by their own digest), argument
layout, flags and exception table. Bytecode differs across Python minor
versions; so does the AST dump, and the stdlib version joins keys anyway.

A reference is ``("np", "linalg", "norm")``: a global name and the attribute
chain loaded from it, or ``("@import", level, module, name)`` for an import
statement inside the function.
"""
from __future__ import annotations

import dis
import linecache
import sys
import textwrap
import types
import weakref
from typing import Any

import xxhash

from . import code_cache

Ref = tuple[Any, ...]


def digest_text(*parts: str) -> str:
    """One digest of several strings, each length-prefixed so that no two splits collide."""
    h = xxhash.xxh3_128()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class Analysis:
    """What one function's code says: normalised digest, source excerpt, free references."""

    __slots__ = ("digest", "source", "refs", "dynamic")

    def __init__(self, digest: str, source: str, refs: frozenset[Ref],
                 dynamic: tuple[tuple[int, str, Ref | None], ...]) -> None:
        self.digest = digest
        self.source = source
        self.refs = refs
        #: (line, construct, object) of what cannot be resolved statically (getattr with a computed
        #: name, eval...); ``object`` is the reference getattr reads from, when simple
        self.dynamic = dynamic

_DYNAMIC = {"eval": "eval()", "exec": "exec()", "globals": "globals()", "vars": "vars()",
            "__import__": "__import__() with a computed name"}


def _const(c: Any, out: list[str]) -> None:
    t = type(c)
    if t is types.CodeType:
        out.append("code:" + code_digest(c))
    elif t is tuple:
        out.append("(")
        for x in c:
            _const(x, out)
        out.append(")")
    elif t is frozenset:
        # a set literal's order follows string hashing, which is salted per process
        parts: list[str] = []
        for x in c:
            sub: list[str] = []
            _const(x, sub)
            parts.append("\x1f".join(sub))
        out.append("{" + "\x1e".join(sorted(parts)) + "}")
    else:
        out.append(f"{t.__name__}:{c!r}")




_OP = dis.opmap
_CACHE, _EXTENDED_ARG = _OP.get("CACHE", -1), _OP["EXTENDED_ARG"]
_LOAD_CONST, _IMPORT_NAME = _OP["LOAD_CONST"], _OP["IMPORT_NAME"]
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_BINARY_SUBSCR = _OP["BINARY_SUBSCR"]
# LOAD_NAME appears in class bodies nested in a function: a name it does not
# find in the class namespace comes from the globals
_NAME_OPS = frozenset(_OP[o] for o in ("LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL") if o in _OP)
_STORE_NAME = _OP.get("STORE_NAME", -1)
_ATTRS = frozenset(_OP[o] for o in ("LOAD_ATTR", "LOAD_METHOD") if o in _OP)
# since 3.11 LOAD_GLOBAL's low bit says "push NULL"; since 3.12 LOAD_ATTR's says "method"
_GLOBAL_SHIFT = 1 if sys.version_info >= (3, 11) else 0
_ATTR_SHIFT = 1 if sys.version_info >= (3, 12) else 0
_METHOD = _OP.get("LOAD_METHOD", -1)


def _instructions(code: types.CodeType) -> list[tuple[int, int, int]]:
    """(opcode, argument, offset) of each real instruction: a plain byte walk, no ``dis`` objects.

    ``dis.get_instructions`` builds a named tuple per instruction and costs most
    of a first analysis; we only need opcodes and arguments.
    """
    b = code.co_code
    out = []
    ext = 0
    for i in range(0, len(b), 2):
        op = b[i]
        if op == _CACHE:
            continue
        arg = b[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = arg << 8
            continue
        ext = 0
        out.append((op, arg, i))
    return out


_HASCONST = frozenset(dis.hasconst)
_HASNAME = frozenset(dis.hasname)
#: name instructions whose argument carries flag bits below the name's index
#: (3.12's LOAD_SUPER_ATTR, ``super().name``: two flag bits)
_NAME_SHIFT = {_LOAD_GLOBAL: _GLOBAL_SHIFT, **{o: _ATTR_SHIFT for o in _ATTRS if o != _METHOD},
               **({_OP["LOAD_SUPER_ATTR"]: 2} if "LOAD_SUPER_ATTR" in _OP else {})}
_MAKE_FUNCTION = _OP["MAKE_FUNCTION"]
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
#: MAKE_FUNCTION's flags (3.11, 3.12): annotations and a closure are values below the code object
_ANNOTATIONS, _CLOSURE = 0x04, 0x08


def _value_start(ins: list[tuple[int, int, int]], end: int) -> int | None:
    """The index of the first instruction of the one value the instructions up to ``end`` push,
    or None where that cannot be told by stack effects alone (a jump inside)."""
    need = 1
    j = end
    while j >= 0:
        op, arg, _ = ins[j]
        if op in _JUMPS:
            return None
        try:
            need -= dis.stack_effect(op, arg if op >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return None
        if need == 0:
            return j
        if need < 0:
            return None
        j -= 1
    return None


def _annotations(ins: list[tuple[int, int, int]]) -> set[int]:
    """Indices of the instructions that build the annotations of functions defined in this code
    (``def inner(x: int) -> str`` nested in a function): annotations never count, as for the
    function itself, whose ``__annotations__`` are no part of its code. (3.11 and 3.12: 3.13
    sets them with SET_FUNCTION_ATTRIBUTE, where they still count.)"""
    out: set[int] = set()
    for m, (op, arg, _) in enumerate(ins):
        if op != _MAKE_FUNCTION or not arg & _ANNOTATIONS or sys.version_info >= (3, 13):
            continue
        end = m - 2  # below the code object (LOAD_CONST)
        if arg & _CLOSURE:
            start = _value_start(ins, end)
            if start is None:
                continue
            end = start - 1
        start = _value_start(ins, end)
        if start is not None:
            out.update(range(start, end + 1))
    return out
_digests: weakref.WeakKeyDictionary[types.CodeType, str] = weakref.WeakKeyDictionary()


def code_digest(code: types.CodeType) -> str:
    """The normalised digest of one code object (nested code objects included, by their digest).

    Constants are hashed where an instruction loads them, not by their index
    in ``co_consts``: a docstring takes a slot there (shifting every index) but
    no instruction loads it, so adding or editing one changes nothing.
    """
    d = _digests.get(code)
    if d is not None:
        return d
    consts = code.co_consts
    stream: list[str] = []
    ins = _instructions(code)
    skip = _annotations(ins)
    names = code.co_names
    for i, (op, arg, _) in enumerate(ins):
        if i in skip:
            continue
        if op in _HASCONST:
            stream.append("K")
            _const(consts[arg], stream)
        elif op in _HASNAME:
            # by the name itself, not its index in ``co_names``: names only annotations read
            # are left out, and would shift every later index
            shift = _NAME_SHIFT.get(op, 0)
            stream.append(f"{op}.{arg & ((1 << shift) - 1)}.{names[arg >> shift]}")
        else:
            stream.append(f"{op}.{arg}")
    d = digest_text(
        "code", code.co_name,
        f"{code.co_argcount},{code.co_posonlyargcount},{code.co_kwonlyargcount},{code.co_flags}",
        repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars),
        getattr(code, "co_exceptiontable", b"").hex(), " ".join(stream))
    _digests[code] = d
    return d


def _line_at(code: types.CodeType, offset: int) -> int:
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line or code.co_firstlineno
    return code.co_firstlineno


def _getattr_object(ins: list[tuple[int, int, int]], j: int, names: tuple, consts: tuple) -> Ref | None:
    """The object of ``getattr(obj, name)`` when it is a global chain or ``importlib.import_module("m")``.

    When that object is a module, the whole module is a dependency already and
    the computed name needs no warning; the graph checks, since only it knows.
    """
    if ins[j][0] != _LOAD_GLOBAL:
        return None
    chain = [names[ins[j][1] >> _GLOBAL_SHIFT]]
    j += 1
    while j < len(ins) and ins[j][0] in _ATTRS:
        op, arg, _ = ins[j]
        chain.append(names[arg] if op == _METHOD else names[arg >> _ATTR_SHIFT])
        j += 1
    if chain[-1] == "import_module" and j < len(ins) and ins[j][0] == _LOAD_CONST \
            and isinstance(consts[ins[j][1]], str):
        return ("@import", 0, consts[ins[j][1]], None)
    return tuple(chain)


def _scan(code: types.CodeType, refs: set[Ref], dynamic: list[tuple[int, str, Ref | None]]) -> None:
    ins = _instructions(code)
    skip = _annotations(ins)
    if skip:  # names read only by annotations are no dependencies
        ins = [x for i, x in enumerate(ins) if i not in skip]
    names, consts = code.co_names, code.co_consts
    # names a class body binds itself are its own attributes, not globals
    local = {names[a] for o, a, _ in ins if o == _STORE_NAME} | {"__name__"}
    n = len(ins)
    i = 0
    while i < n:
        op, arg, off = ins[i]
        if op == _LOAD_GLOBAL or op in _NAME_OPS:
            name = names[arg >> _GLOBAL_SHIFT] if op == _LOAD_GLOBAL else names[arg]
            if op != _LOAD_GLOBAL and name in local and op == _OP["LOAD_NAME"]:
                i += 1
                continue
            chain = [name]
            j = i + 1
            while j < n and ins[j][0] in _ATTRS:
                jop, jarg, _ = ins[j]
                chain.append(names[jarg] if jop == _METHOD else names[jarg >> _ATTR_SHIFT])
                j += 1
            refs.add(tuple(chain))
            if chain == ["sys", "modules"] and j + 1 < n and ins[j][0] != _LOAD_CONST \
                    and any(ins[k][0] == _BINARY_SUBSCR for k in range(j, min(j + 4, n))):
                dynamic.append((_line_at(code, off), "sys.modules[...] with a computed name", None))
            if chain[-1] in ("import_module", "__import__"):
                # ``importlib.import_module("m")`` (however spelled) and ``__import__("m")``:
                # the chain consumed the attribute, so the module is read here
                if j < n and ins[j][0] == _LOAD_CONST and isinstance(consts[ins[j][1]], str):
                    refs.add(("@import", 0, consts[ins[j][1]], None))
                elif chain[-1] == "import_module":
                    dynamic.append((_line_at(code, off), "import_module() with a computed name", None))
            if name == "getattr" and i + 2 < n:
                obj, attr = ins[i + 1], ins[i + 2]
                if attr[0] == _LOAD_CONST and isinstance(consts[attr[1]], str):
                    if obj[0] == _LOAD_GLOBAL:
                        refs.add((names[obj[1] >> _GLOBAL_SHIFT], consts[attr[1]]))
                else:
                    dynamic.append((_line_at(code, off), "getattr() with a computed name",
                                    _getattr_object(ins, i + 1, names, consts)))
            elif name in _DYNAMIC:
                if name != "__import__" or not (i + 1 < n and ins[i + 1][0] == _LOAD_CONST):
                    dynamic.append((_line_at(code, off), _DYNAMIC[name], None))
            i = j
            continue
        if op in _ATTRS and i + 1 < n:
            attr_name = names[arg] if op == _METHOD else names[arg >> _ATTR_SHIFT]
            if attr_name == "import_module":
                nop, narg, _ = ins[i + 1]
                if nop == _LOAD_CONST and isinstance(consts[narg], str):
                    refs.add(("@import", 0, consts[narg], None))
                else:
                    dynamic.append((_line_at(code, off), "import_module() with a computed name", None))
        elif op == _IMPORT_NAME:
            level = consts[ins[i - 2][1]] if i >= 2 and ins[i - 2][0] == _LOAD_CONST else 0
            fromlist = consts[ins[i - 1][1]] if i >= 1 and ins[i - 1][0] == _LOAD_CONST else None
            module = names[arg]
            if not fromlist:
                refs.add(("@import", level or 0, module, None))
            else:
                for name in fromlist:
                    refs.add(("@import", level or 0, module, None if name == "*" else name))
        i += 1
    for c in consts:
        if type(c) is types.CodeType:
            _scan(c, refs, dynamic)


_STORE_ATTR, _DELETE_ATTR = _OP["STORE_ATTR"], _OP["DELETE_ATTR"]
_LOAD_NAME = _OP["LOAD_NAME"]
_ROOTS = frozenset((_LOAD_GLOBAL, _LOAD_NAME))


def _chain_before(ins: list[tuple[int, int, int]], end: int, names: tuple) -> tuple[str, ...] | None:
    """The ``a.b.c`` (a global or module-level name and attributes) loaded by the instructions
    ending at ``end``, or None for anything else."""
    attrs: list[str] = []
    j = end
    while j >= 0 and ins[j][0] in _ATTRS and ins[j][0] != _METHOD:
        attrs.append(names[ins[j][1] >> _ATTR_SHIFT])
        j -= 1
    if j < 0 or ins[j][0] not in _ROOTS:
        return None
    op, arg, _ = ins[j]
    root = names[arg >> _GLOBAL_SHIFT] if op == _LOAD_GLOBAL else names[arg]
    return (root, *reversed(attrs))


def _chain_after(ins: list[tuple[int, int, int]], start: int, names: tuple) -> tuple[tuple[str, ...] | None, int]:
    """The ``a.b.c`` loaded by the instructions from ``start`` on, and the index after it."""
    if start >= len(ins) or ins[start][0] not in _ROOTS:
        return None, start
    op, arg, _ = ins[start]
    chain = [names[arg >> _GLOBAL_SHIFT] if op == _LOAD_GLOBAL else names[arg]]
    j = start + 1
    while j < len(ins) and ins[j][0] in _ATTRS and ins[j][0] != _METHOD:
        chain.append(names[ins[j][1] >> _ATTR_SHIFT])
        j += 1
    return tuple(chain), j


def patch_sites(code: types.CodeType) -> list[tuple[tuple[str, ...], str | None]]:
    """Where ``code`` (and the code nested in it) assigns or deletes an attribute of something
    a global name leads to: ``X.a.attr = v``, ``del X.attr``, ``setattr(X.a, "attr", v)``
    (the attribute None when ``setattr`` computes it). ``codegraph.patches`` keeps those whose
    ``X`` is a library's."""
    out: list[tuple[tuple[str, ...], str | None]] = []
    ins = _instructions(code)
    names, consts = code.co_names, code.co_consts
    for i, (op, arg, _) in enumerate(ins):
        if op in (_STORE_ATTR, _DELETE_ATTR):
            chain = _chain_before(ins, i - 1, names)
            if chain is not None:
                out.append((chain, names[arg]))
        elif op in _ROOTS and (names[arg >> _GLOBAL_SHIFT] if op == _LOAD_GLOBAL else names[arg]) == "setattr":
            chain, j = _chain_after(ins, i + 1, names)
            if chain is not None:
                c = consts[ins[j][1]] if j < len(ins) and ins[j][0] == _LOAD_CONST else None
                out.append((chain, c if isinstance(c, str) else None))
    for c in consts:
        if type(c) is types.CodeType:
            out.extend(patch_sites(c))
    return out


def last_line(code: types.CodeType) -> int:
    """The last source line of ``code`` and of the code nested in it."""
    last = code.co_firstlineno
    for _, _, line in code.co_lines():
        if line and line > last:
            last = line
    for c in code.co_consts:
        if type(c) is types.CodeType:
            last = max(last, last_line(c))
    return last


def excerpt(code: types.CodeType) -> str:
    """The source lines of ``code`` (decorators included), for diffs; empty without source."""
    # a reloaded module's file was read into linecache before the edit: look again
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return ""
    return textwrap.dedent("".join(lines[code.co_firstlineno - 1:last_line(code)]))


_analyses: weakref.WeakKeyDictionary[types.CodeType, Analysis] = weakref.WeakKeyDictionary()


def analyse_code(code: types.CodeType) -> Analysis:
    """Digest, excerpt, free references and unresolvable constructs of a function's code (cached)."""
    a = _analyses.get(code)
    if a is None:
        cached = code_cache.get(code)  # another process's analysis of this very code (verified)
        if cached is not None:
            a = _analyses[code] = Analysis(*cached)
            return a
        refs: set[Ref] = set()
        dynamic: list[tuple[int, str, Ref | None]] = []
        _scan(code, refs, dynamic)
        a = _analyses[code] = Analysis(code_digest(code), excerpt(code), frozenset(refs), tuple(dynamic))
        code_cache.put(code, a.digest, a.source, a.refs, a.dynamic)
    return a


def clear() -> None:
    _digests.clear()
    _analyses.clear()
