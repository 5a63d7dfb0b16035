"""Guard rails for memolab's structure (docs/architecture.md), read from the source with ``ast``.

- **No import cycles**, counting imports inside functions: a cycle hidden in a
  function still means neither module can be understood, tested or changed alone.
- **No private name across modules**: ``from .x import _name`` or ``x._name`` on an
  imported memolab module couples to what ``x`` promised nobody.
- **Each layer imports only the layers below it** (docs/architecture.md's table):
  ``LAYERS`` gives every package or module a rank; an import (inside a function
  too, counted as the cycle check counts it) from a lower rank to a higher one fails,
  naming the edge, its file and line. A lower layer that must reach a higher one asks
  by dotted path (``hooks.UPWARD``), the way the store builds a team store.
- **No module over 700 lines**: every module is under 600 by design (split along its seams,
  never trimmed to fit); the cap keeps slack for the next change.

Edges are counted as Python resolves them: ``from .pkg import sub`` where ``sub`` is a
module is an edge to ``pkg.sub``, any other name an edge to ``pkg`` (the package's
``__init__``). An integration registered by a dotted-path string resolved with
``importlib`` is not an edge: that is how integrations plug in from the outside.

``ALLOWED_*`` list what is known and not yet fixed; each entry must still occur (the
lists can only shrink), and the goal is empty lists.
"""
# relayout: leave this file alone (its layer table names the packages after the move)
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "memolab"
MAX_LINES = 700

#: (importer, imported) edges not yet cut; the cycle check runs without them
ALLOWED_EDGES: set[tuple[str, str]] = set()
#: (importer, module, name) private imports not yet made public
ALLOWED_PRIVATE: set[tuple[str, str, str]] = set()
#: modules still over MAX_LINES
ALLOWED_LONG: set[str] = set()

#: the layers of docs/architecture.md, lowest first: a module's rank is the rank of the
#: longest dotted prefix of its name listed here (a package's modules share its rank)
LAYERS: list[tuple[str, list[str]]] = [
    # the settings, the human text of values, progress bars, and hooks: the table of who handles
    # what by dotted path (the core consults it; it names no layer above); errors and workers stay
    # at the root because users import them by name (memolab.errors.NotAccepted, memolab.workers.Configure);
    # memolab.key: the key's four fields, named once for every layer that stores or shows keys
    ("settings", ["memolab.settings", "memolab._version", "memolab.errors", "memolab.key", "memolab.workers"]),
    ("code digest", ["memolab.codegraph"]),
    # (hashing.reducers: the pickler's reducers table, filled by pickling, read by hashing)
    ("argument hash", ["memolab.hashing"]),
    ("results", ["memolab.pickling"]),
    ("store", ["memolab.store"]),
    ("team store", ["memolab.team"]),
    # what a body reads besides its arguments (the key's implicit inputs) and what it changed in place
    ("key inputs", ["memolab.inputs"]),
    # memolab.distributed: the public API of collective calls (rank_local, main_first), at the root by name
    ("a call", ["memolab.calls", "memolab.distributed"]),
    ("logs", ["memolab.tracking"]),
    # Integrations depend on the core (torch's distributed driver drives calls, HF's cache
    # hook and Lightning's logger use the call and logs layers); the core reaches them only
    # by the dotted paths of hooks.LAZY_HOOKS, which are not edges. So they sit on top of
    # the core, below the faces (cli.selftest runs torch's self-tests).
    ("integrations", ["memolab.torch", "memolab.hf", "memolab.lightning", "memolab.ray", "memolab.omegaconf",
                      "memolab.transformers", "memolab.pandas", "memolab.handles", "memolab.arrow", "memolab.numpy"]),
    ("faces", ["memolab", "memolab.__main__", "memolab.cli", "memolab.ui"]),
]

#: (importer, imported) upward edges not yet cut, each with why; the list can only shrink
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("memolab.calls.call", "memolab.tracking.runs"):
        "a computation opens, ends and rides its run (the logs of the body): the miss path writes them",
    ("memolab.team.logs", "memolab.tracking.runs"):
        "a team row carries its run's logs: pulling it writes them into the local runs tables",
    ("memolab.team.logs", "memolab.tracking.schema"):
        "a team row carries its run's logs: pulling it reads which run columns the local index has",
}


def _modules(src: Path) -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in sorted((src / PKG).rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


MODULES = _modules(SRC)


def _absolute(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


class _Scan:
    """Edges (with their line), private imports and private attribute reads of every module."""

    def __init__(self, modules: dict[str, tuple[Path, bool]]) -> None:
        self.edges: dict[str, dict[str, int]] = {}
        self.private: list[tuple[str, str, str, int]] = []
        for mod, (path, is_pkg) in modules.items():
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            edges: dict[str, int] = {}
            aliases: dict[str, str] = {}  # local name -> memolab module it is bound to

            def edge(target: str, line: int, mod: str = mod, edges: dict[str, int] = edges) -> None:
                if target != mod and target in modules:
                    edges.setdefault(target, line)

            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name == PKG or a.name.startswith(PKG + "."):
                            edge(a.name, node.lineno)
                            if a.asname:
                                aliases[a.asname] = a.name
                elif isinstance(node, ast.ImportFrom):
                    src = _absolute(mod, is_pkg, node.level, node.module)
                    if not (src == PKG or src.startswith(PKG + ".")):
                        continue
                    for a in node.names:
                        sub = f"{src}.{a.name}"
                        if sub in modules:
                            edge(sub, node.lineno)
                            aliases[a.asname or a.name] = sub
                        else:
                            edge(src, node.lineno)
                            if _private(a.name) and src != mod:
                                self.private.append((mod, src, a.name, node.lineno))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != mod:
                    self.private.append((mod, aliases[node.value.id], node.attr, node.lineno))
            self.edges[mod] = edges


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (as a list of modules, first repeated last) per strongly connected group."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    out = []
    for group in groups:
        members = set(group)
        start = group[0]
        # shortest way back to the start inside the group: the cycle to show
        prev: dict[str, str] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(edges[v]):
                    if w not in members:
                        continue
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        out.append([start] + path[::-1][1:] + [start] if len(path) > 1 else [start, found, start])
    return out


SCAN = _Scan(MODULES)


def _where(mod: str, line: int) -> str:
    return f"{MODULES[mod][0].relative_to(SRC.parent)}:{line}"


def test_no_import_cycles_counting_imports_inside_functions():
    edges = {m: {t: ln for t, ln in es.items() if (m, t) not in ALLOWED_EDGES} for m, es in SCAN.edges.items()}
    problems = []
    for cycle in _cycles(edges):
        steps = [f"{a} -> {b} ({_where(a, edges[a][b])})" for a, b in zip(cycle, cycle[1:], strict=False)]
        problems.append("import cycle:\n    " + "\n    ".join(steps))
    assert not problems, "\n".join(problems)


def test_no_private_name_is_imported_or_read_across_modules():
    seen = {(m, src, name) for m, src, name, _ in SCAN.private}
    problems = [f"{_where(m, line)}: {m} uses {src}.{name}, a private name of another module"
                for m, src, name, line in SCAN.private if (m, src, name) not in ALLOWED_PRIVATE]
    assert not problems, "\n".join(problems)
    assert not ALLOWED_PRIVATE - seen, f"fixed, remove from ALLOWED_PRIVATE: {sorted(ALLOWED_PRIVATE - seen)}"


def test_no_module_is_over_700_lines():
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, (p, _) in MODULES.items()}
    long = {m for m, n in sizes.items() if n > MAX_LINES}
    problems = [f"{MODULES[m][0].relative_to(SRC.parent)}: {sizes[m]} lines (at most {MAX_LINES}: split it "
                "along its seams)" for m in sorted(long - ALLOWED_LONG)]
    assert not problems, "\n".join(problems)
    assert not ALLOWED_LONG - long, f"fixed, remove from ALLOWED_LONG: {sorted(ALLOWED_LONG - long)}"


def _rank(mod: str, ranks: dict[str, int]) -> int | None:
    parts = mod.split(".")
    for n in range(len(parts), 0, -1):
        if n == 1 and len(parts) > 1:
            break  # "memolab" ranks the package's __init__ only: a new module needs a layer of its own
        r = ranks.get(".".join(parts[:n]))
        if r is not None:
            return r
    return None


def _ranks(layers: list[tuple[str, list[str]]]) -> dict[str, int]:
    return {name: i for i, (_, names) in enumerate(layers) for name in names}


def _upward(scan: _Scan, layers: list[tuple[str, list[str]]]) -> list[tuple[str, str, int]]:
    """Every edge from a lower layer to a higher one: (importer, imported, line)."""
    ranks = _ranks(layers)
    out = []
    for mod, edges in sorted(scan.edges.items()):
        for target, line in sorted(edges.items()):
            if _rank(target, ranks) > _rank(mod, ranks):  # type: ignore[operator]
                out.append((mod, target, line))
    return out


def _layer(mod: str) -> str:
    return LAYERS[_rank(mod, _ranks(LAYERS))][0]  # type: ignore[index]


def test_every_module_has_a_layer():
    ranks = _ranks(LAYERS)
    assert not [m for m in MODULES if _rank(m, ranks) is None], "give these a layer in LAYERS"
    assert not [n for n in ranks if not any(m == n or m.startswith(n + ".") for m in MODULES)], \
        "LAYERS names a module that is gone"


def test_each_layer_imports_only_the_layers_below():
    up = _upward(SCAN, LAYERS)
    problems = [f"{_where(a, line)}: {a} ({_layer(a)}) imports {b} ({_layer(b)}), a layer above it"
                for a, b, line in up if (a, b) not in ALLOWED_UPWARD]
    assert not problems, "\n".join(problems)
    gone = sorted(set(ALLOWED_UPWARD) - {(a, b) for a, b, _ in up})
    assert not gone, f"no longer an upward edge, remove from ALLOWED_UPWARD: {gone}"


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path):
    pkg = tmp_path / PKG
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from ..high import g\n    return g\n")
    (pkg / "high.py").write_text("from .low import a\ng = a\n")
    layers = [("low", ["memolab.low"]), ("high", ["memolab", "memolab.high"])]
    assert _upward(_Scan(_modules(tmp_path)), layers) == [("memolab.low.a", "memolab.high", 2)]


def test_allowed_edges_still_exist():
    gone = {(a, b) for a, b in ALLOWED_EDGES if b not in SCAN.edges.get(a, {})}
    assert not gone, f"cut, remove from ALLOWED_EDGES: {sorted(gone)}"


def test_the_checker_sees_a_cycle_through_a_function_local_import_and_a_private_name(tmp_path):
    """The checker itself: a cycle made only by an import inside a function is found and
    named, and so are ``from .a import _x`` and ``a._x``."""
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n_x = 1\n")
    (pkg / "b.py").write_text("def f():\n    from .a import _x\n    return _x\n")
    (pkg / "c.py").write_text("from . import a\n\ndef g():\n    return a._x\n")
    scan = _Scan(_modules(tmp_path))
    assert _cycles(scan.edges) == [["memolab.a", "memolab.b", "memolab.a"]]
    assert sorted((m, s, n) for m, s, n, _ in scan.private) == [("memolab.b", "memolab.a", "_x"),
                                                               ("memolab.c", "memolab.a", "_x")]


def test_every_upward_call_by_dotted_path_resolves():
    """``hooks.UPWARD`` names what a lower layer calls in a higher one: each must import."""
    from memolab.settings import hooks

    for name, target in hooks.UPWARD.items():
        assert callable(hooks.resolve(target)), name
