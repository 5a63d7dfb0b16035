"""Static analysis of one piece of source: its normalised digest and its free names.

Only the syntax tree is used here, never the live objects: the result depends
on the source text alone, so it is cached per (file text, definition) and a
second call never re-parses. Resolving the names against live namespaces is
``graph``'s job.

A reference is a tuple: ``("np", "linalg", "norm")`` for an attribute chain
rooted at a free (global) name, or ``("@import", level, module, name)`` for an
``import`` statement inside the analysed code (it binds a *local* name, so the
chain rule alone would never see it).

The scope rules follow Python's own: function, lambda and comprehension bodies
are scopes; a class body is a scope that its methods do not see; ``global``
makes a name module-level, ``nonlocal`` sends it outward. When in doubt a name
is treated as free: resolving a name that turns out to be local costs at most a
needless dependency, while missing a free one would return stale results.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import xxhash

Ref = Tuple[Any, ...]

#: calls whose target cannot be known statically when an argument is computed
_DYNAMIC_CALLS = {"eval": "eval()", "exec": "exec()", "__import__": "__import__() with a computed name",
                  "globals": "globals()", "vars": "vars()"}


class _StripDocstrings(ast.NodeTransformer):
    """Docstrings do not change behaviour; comments and layout are already absent from the AST."""

    def _strip(self, node: Any) -> Any:
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Module = _strip


def normalized_dump(node: ast.AST) -> str:
    """The AST dump of ``node`` without docstrings, positions or comments.

    The tree is copied first: the cached module tree must stay intact for the
    next definition looked up in it.
    """
    import copy

    tree = _StripDocstrings().visit(copy.deepcopy(node))
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def digest_text(*parts: str) -> str:
    h = xxhash.xxh3_128()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


# -- bindings of one scope --------------------------------------------------------

def _target_names(node: ast.AST, out: Set[str]) -> None:
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Starred) and isinstance(n.value, ast.Name):
            out.add(n.value.id)


class _Binder(ast.NodeVisitor):
    """Names bound directly in one function/class/module body (nested scopes skipped)."""

    def __init__(self) -> None:
        self.bound: Set[str] = set()
        self.globals: Set[str] = set()
        self.nonlocals: Set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.bound.add(node.id)

    def _def(self, node: Any) -> None:
        self.bound.add(node.name)
        # decorators, defaults and bases run in this scope; the body does not
        for d in node.decorator_list:
            self.visit(d)
        if isinstance(node, ast.ClassDef):
            for b in node.bases + [k.value for k in node.keywords]:
                self.visit(b)
        else:
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                self.visit(d)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _def

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)

    def _comp(self, node: Any) -> None:
        # only the first iterable is evaluated here; a walrus inside binds here too
        self.visit(node.generators[0].iter)
        for n in ast.walk(node):
            if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                self.bound.add(n.target.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.bound.add(a.asname or a.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            if a.name != "*":
                self.bound.add(a.asname or a.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bound.add(node.name)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.nonlocals.update(node.names)

    def visit_MatchAs(self, node: Any) -> None:
        if node.name:
            self.bound.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: Any) -> None:
        if node.name:
            self.bound.add(node.name)

    def visit_MatchMapping(self, node: Any) -> None:
        if node.rest:
            self.bound.add(node.rest)
        self.generic_visit(node)


def _args_names(args: ast.arguments) -> Set[str]:
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    if args.vararg:
        names.add(args.vararg.arg)
    if args.kwarg:
        names.add(args.kwarg.arg)
    return names


class _Scope:
    __slots__ = ("kind", "bound", "globals", "parent")

    def __init__(self, kind: str, bound: Set[str], globals_: Set[str], parent: Optional["_Scope"]) -> None:
        self.kind = kind
        self.bound = bound - globals_
        self.globals = globals_
        self.parent = parent


def _body_scope(kind: str, body: Iterable[ast.AST], params: Set[str], parent: Optional[_Scope]) -> _Scope:
    b = _Binder()
    for stmt in body:
        b.visit(stmt)
    return _Scope(kind, (b.bound | params) - b.nonlocals, b.globals, parent)


# -- free references --------------------------------------------------------------

class _Refs(ast.NodeVisitor):
    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.refs: Set[Ref] = set()
        #: (line, what) of constructs whose targets cannot be known statically
        self.dynamic: List[Tuple[int, str]] = []

    def is_free(self, name: str) -> bool:
        s: Optional[_Scope] = self.scope
        first = True
        while s is not None:
            if name in s.globals:
                return True
            # a class body's names are invisible to the functions nested in it
            if name in s.bound and (first or s.kind != "class"):
                return s.kind == "module_open"
            first = False
            s = s.parent
        return True

    def push(self, scope: _Scope) -> None:
        self.scope = scope

    # names and attribute chains
    def visit_Name(self, node: ast.Name) -> None:
        if self.is_free(node.id):
            self.refs.add((node.id,))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = [node.attr]
        base: ast.AST = node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name):
            if self.is_free(base.id):
                self.refs.add((base.id, *reversed(chain)))
            return
        self.visit(base)

    # scopes
    def _function(self, node: Any) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self._defaults(node.args)
        outer = self.scope
        self.push(_body_scope("function", node.body, _args_names(node.args), outer))
        for stmt in node.body:
            self.visit(stmt)
        self.push(outer)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _defaults(self, args: ast.arguments) -> None:
        # annotations are left out on purpose: they do not change what code does
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(d)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._defaults(node.args)
        outer = self.scope
        self.push(_Scope("function", _args_names(node.args), set(), outer))
        self.visit(node.body)
        self.push(outer)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for b in node.bases:
            self.visit(b)
        for k in node.keywords:
            self.visit(k.value)
        outer = self.scope
        self.push(_body_scope("class", node.body, set(), outer))
        for stmt in node.body:
            self.visit(stmt)
        self.push(outer)

    def _comp(self, node: Any) -> None:
        gens = node.generators
        self.visit(gens[0].iter)
        outer = self.scope
        bound: Set[str] = set()
        for g in gens:
            _target_names(g.target, bound)
        self.push(_Scope("function", bound, set(), outer))
        for i, g in enumerate(gens):
            if i:
                self.visit(g.iter)
            for c in g.ifs:
                self.visit(c)
        for part in ("elt", "key", "value"):
            sub = getattr(node, part, None)
            if sub is not None:
                self.visit(sub)
        self.push(outer)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp

    # annotations never affect behaviour
    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        pass

    # imports inside the analysed code bind local names: record what they import
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.refs.add(("@import", 0, a.name, None))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            self.refs.add(("@import", node.level, node.module or "", None if a.name == "*" else a.name))

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and self.is_free(f.id):
            name = f.id
            if name == "getattr" and len(node.args) >= 2:
                obj, attr = node.args[0], node.args[1]
                if isinstance(attr, ast.Constant) and isinstance(attr.value, str) and isinstance(obj, ast.Name) \
                        and self.is_free(obj.id):
                    self.refs.add((obj.id, attr.value))
                elif not isinstance(attr, ast.Constant):
                    self.dynamic.append((node.lineno, "getattr() with a computed name"))
            elif name in _DYNAMIC_CALLS:
                if name != "__import__" or not (node.args and isinstance(node.args[0], ast.Constant)):
                    self.dynamic.append((node.lineno, _DYNAMIC_CALLS[name]))
        elif isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args:
            a0 = node.args[0]
            if isinstance(a0, ast.Constant) and isinstance(a0.value, str):
                self.refs.add(("@import", 0, a0.value, None))
            else:
                self.dynamic.append((node.lineno, "import_module() with a computed name"))
        self.generic_visit(node)


class Analysis:
    """What one definition's source says: normalised digest, excerpt, free references."""

    __slots__ = ("digest", "source", "refs", "dynamic")

    def __init__(self, digest: str, source: str, refs: FrozenSet[Ref], dynamic: Tuple[Tuple[int, str], ...]) -> None:
        self.digest = digest
        self.source = source
        self.refs = refs
        self.dynamic = dynamic


def analyse(node: ast.AST, source: str) -> Analysis:
    """Analyse a def, class, lambda or module node (nested defs included)."""
    if isinstance(node, ast.Module):
        # every module-level name is global, so it is a reference to resolve
        scope = _Scope("module_open", set(), set(), None)
    else:
        scope = _Scope("module", set(), set(), None)
    v = _Refs(scope)
    if isinstance(node, ast.Module):
        for stmt in node.body:
            v.visit(stmt)
    else:
        v.visit(node)
    return Analysis(digest_text(normalized_dump(node)), source, frozenset(v.refs), tuple(v.dynamic))


# -- locating definitions in a parsed file ---------------------------------------

class FileIndex:
    """One parsed source file (or notebook cell) with its definitions indexed."""

    __slots__ = ("tree", "lines", "by_line", "by_qualname", "assigns", "cache")

    def __init__(self, text: str) -> None:
        self.tree = ast.parse(text)
        self.lines = text.splitlines(True)
        #: (name, line of ``def``/``lambda`` or of any decorator) -> node
        self.by_line: Dict[Tuple[str, int], List[ast.AST]] = {}
        self.by_qualname: Dict[str, List[ast.AST]] = {}
        #: top-level name -> statements that bind it (namedtuple(...), type(...) classes)
        self.assigns: Dict[str, List[ast.AST]] = {}
        self.cache: Dict[int, Analysis] = {}
        self._index(self.tree, [])
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                names: Set[str] = set()
                for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                    _target_names(t, names)
                for n in names:
                    self.assigns.setdefault(n, []).append(stmt)

    def _index(self, node: ast.AST, qual: List[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = qual + [child.name]
                self.by_qualname.setdefault(".".join(q), []).append(child)
                for line in [child.lineno] + [d.lineno for d in child.decorator_list]:
                    self.by_line.setdefault((child.name, line), []).append(child)
                self._index(child, q + (["<locals>"] if not isinstance(child, ast.ClassDef) else []))
            else:
                if isinstance(child, ast.Lambda):
                    self.by_line.setdefault(("<lambda>", child.lineno), []).append(child)
                self._index(child, qual)

    def excerpt(self, node: ast.AST) -> str:
        import textwrap

        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        end = getattr(node, "end_lineno", None) or start
        return textwrap.dedent("".join(self.lines[start - 1:end]))

    def analysis(self, nodes: List[ast.AST]) -> Analysis:
        """Analysis of one node, or of several taken together (ambiguous lambdas, repeated assignments)."""
        key = id(nodes[0]) if len(nodes) == 1 else hash(tuple(id(n) for n in nodes))
        a = self.cache.get(key)
        if a is None:
            if len(nodes) == 1:
                a = analyse(nodes[0], self.excerpt(nodes[0]))
            else:
                parts = [analyse(n, self.excerpt(n)) for n in nodes]
                a = Analysis(digest_text(*(p.digest for p in parts)), "".join(p.source for p in parts),
                             frozenset().union(*(p.refs for p in parts)), tuple(d for p in parts for d in p.dynamic))
            self.cache[key] = a
        return a
