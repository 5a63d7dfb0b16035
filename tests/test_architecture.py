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
- **The doc says what the folders say**: docs/architecture.md's picture and its table give each
  layer the packages and root modules ``LAYERS`` gives it, and the table names every module (a
  ``.py`` file or a package) in its layer's row and none that does not exist.
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
import functools
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


@functools.cache
def scan() -> _Scan:
    """Every module parsed once, when a test first asks (not at import: each pytest worker
    imports every test file to collect it, and only one of them runs these)."""
    return _Scan(MODULES)


def _where(mod: str, line: int) -> str:
    return f"{MODULES[mod][0].relative_to(SRC.parent)}:{line}"


def test_no_import_cycles_counting_imports_inside_functions():
    edges = {m: {t: ln for t, ln in es.items() if (m, t) not in ALLOWED_EDGES} for m, es in scan().edges.items()}
    problems = []
    for cycle in _cycles(edges):
        steps = [f"{a} -> {b} ({_where(a, edges[a][b])})" for a, b in zip(cycle, cycle[1:], strict=False)]
        problems.append("import cycle:\n    " + "\n    ".join(steps))
    assert not problems, "\n".join(problems)


def test_no_private_name_is_imported_or_read_across_modules():
    seen = {(m, src, name) for m, src, name, _ in scan().private}
    problems = [f"{_where(m, line)}: {m} uses {src}.{name}, a private name of another module"
                for m, src, name, line in scan().private if (m, src, name) not in ALLOWED_PRIVATE]
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
    up = _upward(scan(), LAYERS)
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
    gone = {(a, b) for a, b in ALLOWED_EDGES if b not in scan().edges.get(a, {})}
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


# --- docs/architecture.md held to the folders and to LAYERS ------------------------------------------------
#
# The doc's picture lists, per layer (highest first), its packages (``name/``) and root modules (``name``);
# text in parentheses there is a note. The table "Layers and what each owns" has one row per layer (lowest
# first); its modules cell names, outside any parentheses, the layer's packages and root modules, and inside
# the parentheses that follow a package ``pkg/`` its modules. In that cell a backticked lowercase name is a
# module: ``x`` is ``pkg.x`` inside ``pkg/``'s parentheses (``__init__`` the package itself), a root module
# outside them; ``a/b`` is ``memolab.a.b`` wherever it stands; ``sub/`` opens a subpackage the same way.
# Anything else in backticks (``Key``, ``open_store()``, ``memolab.memo``, ``make selftest``) is not a name.

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_NAME = r"[a-z_][a-z0-9_]*"


def _doc_picture(text: str) -> list[tuple[str, set[str], set[str]]]:
    """The picture's rows, highest layer first: (layer, {its packages and root modules}, {every module named})."""
    import re

    block = text.split("```", 2)[1]
    rows = []
    for line in block.strip("\n").splitlines():
        layer, rest = (re.split(r"\s{2,}", line.strip(), maxsplit=1) + [""])[:2]
        top: set[str] = set()
        named: set[str] = set()
        last: str | None = None  # the package just named: parentheses after it list some of its modules
        for m in re.finditer(r"\(([^()]*)\)|[^\s,()]+", rest):
            if m.group(1) is None:
                tok = m.group(0)
                assert re.fullmatch(_NAME + "/?", tok), f"picture, layer {layer!r}: {tok!r} is not a package or module"
                mod = PKG if tok == "__init__" else f"{PKG}.{tok.rstrip('/')}"
                top.add(mod)
                named.add(mod)
                last = mod if tok.endswith("/") else None
                continue
            assert last, f"picture, layer {layer!r}: ({m.group(1)}) follows no package"
            for tok in (t.strip() for t in m.group(1).split(",")):
                if tok != "…":
                    assert re.fullmatch(_NAME, tok), f"picture, layer {layer!r}: {tok!r} is not a module"
                    named.add(last if tok == "__init__" else f"{last}.{tok}")
            last = None
        rows.append((layer, top, named))
    return rows


def _doc_table(text: str) -> list[tuple[str, set[str], set[str]]]:
    """The table's rows, lowest layer first: (layer, {its packages and root modules}, {every module named})."""
    import re

    lines = text.split("## Layers and what each owns", 1)[1].strip().splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["layer", "modules", "owns"], lines[0]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"table row with {len(cells)} cells: {line[:80]}"
        layer, cell = cells[0], cells[1]
        top: set[str] = set()
        named: set[str] = set()
        scopes = [PKG]  # the package a bare name is in, one per open parenthesis
        pending: str | None = None  # a package just named: the next "(" opens it
        for m in re.finditer(r"`([^`]*)`|\(|\)", cell):
            if m.group(0) == "(":
                scopes.append(pending or scopes[-1])
                pending = None
                continue
            if m.group(0) == ")":
                scopes.pop()
                assert scopes, f"table, layer {layer!r}: unbalanced parentheses"
                pending = None
                continue
            tok = m.group(1)
            pending = None
            if not re.fullmatch(f"{_NAME}(/{_NAME})*/?", tok):
                continue  # a class, a call, a dotted public name, a command: not a module name
            path = tok.rstrip("/")
            if "/" in path:
                mod = f"{PKG}.{path.replace('/', '.')}"
            elif path == "__init__":
                mod = scopes[-1]
            else:
                mod = f"{scopes[-1]}.{path}"
            if tok.endswith("/"):
                pending = mod
            named.add(mod)
            if len(scopes) == 1:
                top.add(mod)
        assert len(scopes) == 1, f"table, layer {layer!r}: unbalanced parentheses"
        rows.append((layer, top, named))
    return rows


def _doc_problems(text: str, modules: dict[str, tuple[Path, bool]],
                  layers: list[tuple[str, list[str]]]) -> list[str]:
    problems = []
    ranks = _ranks(layers)
    want = [(name, set(names)) for name, names in layers]
    picture = _doc_picture(text)[::-1]
    table = _doc_table(text)
    for where, rows in (("picture", [(n, top) for n, top, _ in picture]), ("table", [(n, top) for n, top, _ in table])):
        if [n for n, _ in rows] != [n for n, _ in want]:
            problems.append(f"the {where}'s layers {[n for n, _ in rows]} are not LAYERS' {[n for n, _ in want]}")
            continue
        for (name, got), (_, names) in zip(rows, want, strict=True):
            if got != names:
                problems.append(f"the {where}'s layer {name!r} has {sorted(got)}, LAYERS has {sorted(names)}")
    named_in = {name: named for name, _, named in table}
    for where, rows3 in (("picture", picture), ("table", table)):
        problems += [f"the {where}'s layer {name!r} names {m}, which does not exist"
                     for name, _, named in rows3 for m in sorted(named - set(modules))]
    for m in sorted(modules):
        r = _rank(m, ranks)
        if r is None:
            continue  # test_every_module_has_a_layer names it
        layer = layers[r][0]
        if m not in named_in.get(layer, set()):
            problems.append(f"{m} is not named in the table's row {layer!r}")
    return problems


def test_the_doc_names_every_module_in_its_layer_and_its_layers_are_layers():
    """docs/architecture.md's picture, its table and ``LAYERS`` agree, layer by layer, on which package or
    root module is where; the table names every module in its layer's row, and none that does not exist."""
    problems = _doc_problems(DOC.read_text(encoding="utf-8"), MODULES, LAYERS)
    assert not problems, "docs/architecture.md:\n  " + "\n  ".join(problems)


def test_the_doc_checker_sees_a_module_left_out_one_made_up_and_a_package_in_another_layer():
    """The check itself, on the real doc edited: each kind of disagreement is found and named."""
    text = DOC.read_text(encoding="utf-8")
    assert not _doc_problems(text, MODULES, LAYERS)
    left_out = text.replace("`argpages`: a function's runs", "a function's runs", 1)
    assert _doc_problems(left_out, MODULES, LAYERS) == ["memolab.tracking.argpages is not named in the table's row 'logs'"]
    made_up = text.replace("`codediff`:", "`codediffs`:", 1)
    assert _doc_problems(made_up, MODULES, LAYERS) == [
        "the table's layer 'logs' names memolab.tracking.codediffs, which does not exist",
        "memolab.tracking.codediff is not named in the table's row 'logs'"]
    typo = text.replace("pickling/ (moved, …)", "pickling/ (moves, …)", 1)
    assert _doc_problems(typo, MODULES, LAYERS) == [
        "the picture's layer 'results' names memolab.pickling.moves, which does not exist"]
    moved = text.replace("logs           tracking/ (runs, log, sink, query, …)\n", "logs\n", 1).replace(
        "…)   distributed\n", "…)   distributed  tracking/\n", 1)
    assert moved.count("tracking/ ") == text.count("tracking/ ") - 1
    assert _doc_problems(moved, MODULES, LAYERS)[:2] == [
        "the picture's layer 'a call' has ['memolab.calls', 'memolab.distributed', 'memolab.tracking'], "
        "LAYERS has ['memolab.calls', 'memolab.distributed']",
        "the picture's layer 'logs' has [], LAYERS has ['memolab.tracking']"]
    # LAYERS changed and the doc not: the doc's rows disagree with it
    layers = [(n, [m for m in ms if m != "memolab.workers"] + (["memolab.workers"] if n == "store" else []))
              for n, ms in LAYERS]
    problems = _doc_problems(text, MODULES, layers)
    assert "memolab.workers is not named in the table's row 'store'" in problems
    assert any(p.startswith("the table's layer 'settings' has") for p in problems)
    assert any(p.startswith("the picture's layer 'store' has") for p in problems)
