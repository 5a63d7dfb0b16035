"""A ratchet on memolab's catch-all exception handlers (issue 51, §3), read from the source with ``ast``.

A *broad* handler is ``except:``, ``except Exception``, ``except BaseException`` (alone or in a tuple).
One whose last statement is a bare ``raise`` catches nothing for good (clean up, then re-raise): it is
not counted. Every other broad handler

- is counted per module and compared with ``ALLOWED``: a module that gains one fails (narrow it to what
  its body can raise), a module that loses one fails until its entry is lowered, so the list only shrinks;
- carries a comment saying why it is broad (on the ``except`` line or the lines before its body's first
  statement): user code, a third-party library or plugin of unknown behaviour, an exit/thread/signal
  callback, a hook that must never break the user's call;
- leaves evidence: it logs (``errors.swallowed(...)``, a logger's or ``warnings``' call), raises, or
  hands the exception it bound on (``except Exception as e: out.append(e)``: the caller re-raises or
  reports it).
"""
from __future__ import annotations

import ast
import logging
import sqlite3
from functools import cache
from pathlib import Path

import pytest

import memolab
from memolab.calls.rows import result_token
from memolab.errors import StoreConfigError
from memolab.hashing import files
from memolab.settings import config
from memolab.store import get_store

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "memolab"

#: module -> broad handlers it may still hold (each with its reason comment); lower an entry when a
#: handler is narrowed, never raise one
ALLOWED: dict[str, int] = {
    "memolab.calls.acceptance": 1,
    "memolab.calls.call": 9,
    "memolab.cli": 1,
    "memolab.codegraph.dictversion": 1,
    "memolab.codegraph.graph": 2,
    "memolab.codegraph.origins": 3,
    "memolab.codegraph.where": 2,
    "memolab.cli.doctor": 3,
    "memolab.errors": 1,
    "memolab.inputs.globalrng": 2,
    "memolab.hashing.objects": 2,
    "memolab.hashing.results": 3,
    "memolab.settings.hooks": 1,
    "memolab.calls.lifecycle": 2,
    "memolab.calls.memo": 1,
    "memolab.inputs.mutations": 3,
    "memolab.pickling": 3,  # (loads: the plain load and the moved-paths retry both run stored classes' code)
    "memolab.pickling.locate": 1,
    "memolab.pickling.refs": 1,
    "memolab.ray": 1,
    "memolab.inputs.readcheck": 2,
    "memolab.inputs.reads": 2,
    "memolab.calls.report": 3,
    "memolab.cli.selftest": 1,
    "memolab.store": 2,
    "memolab.store.local": 1,
    "memolab.store.beats": 2,
    "memolab.store.blobs": 1,
    "memolab.store.inline": 1,
    "memolab.store.usage": 1,
    "memolab.calls.summary": 2,
    "memolab.team.blobs.common": 2,
    "memolab.team.blobs.s3": 6,
    "memolab.cli.team_commands": 1,
    "memolab.team.journal": 6,
    "memolab.team.layered": 1,
    "memolab.team.reading": 4,
    "memolab.team.link": 2,
    "memolab.settings.text": 1,
    "memolab.torch.checkpoint": 2,
    "memolab.torch.data": 1,
    "memolab.torch.distributed": 1,
    "memolab.torch.exchange": 8,
    "memolab.torch.iteration": 3,
    "memolab.torch.main_first": 1,
    "memolab.torch.numerics": 3,
    "memolab.torch.rng": 1,
    "memolab.torch.tensors": 2,
    "memolab.tracking.output": 1,
    "memolab.tracking.hparams": 1,
    "memolab.tracking.runs": 6,
    "memolab.tracking.sink": 5,
    "memolab.tracking.system": 4,
    "memolab.ui.cli": 1,
    "memolab.ui.server": 1,
    "memolab.inputs.upstream": 2,
}

#: (module, function) whose broad handler cannot log: the logger of swallowed exceptions itself
SILENT: dict[tuple[str, str], str] = {
    ("memolab.errors", "swallowed"): "it is the logging of swallowed exceptions: a program's broken "
                                     "handler leaves nothing more to say",
}

_BROAD = {"Exception", "BaseException"}
_LOGS = {"swallowed", "debug", "info", "warning", "error", "exception", "log", "warn", "_debug",
         "_log"}  # (_log: swallowed bound as a default argument, for a __del__ at interpreter shutdown)


def _is_broad(h: ast.ExceptHandler) -> bool:
    if h.type is None:
        return True
    names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
    return any(isinstance(n, ast.Name) and n.id in _BROAD for n in names)


def _reraises(h: ast.ExceptHandler) -> bool:
    last = h.body[-1]
    return isinstance(last, ast.Raise) and last.exc is None


def _walk_body(h: ast.ExceptHandler) -> list[ast.AST]:
    """The handler's nodes, not those of functions or classes defined inside it."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(h.body)
    while todo:
        n = todo.pop()
        out.append(n)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return out


def _leaves_evidence(h: ast.ExceptHandler) -> bool:
    for n in _walk_body(h):
        if isinstance(n, ast.Raise):
            return True
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in _LOGS or (name or "").endswith("swallowed"):  # (``swallowed as _swallowed``)
                return True
        if h.name and isinstance(n, ast.Name) and n.id == h.name and isinstance(n.ctx, ast.Load):
            return True  # handed on (kept, sent, returned) for a caller to raise or report
    return False


def _comments(text: str) -> dict[int, str]:
    """line -> its comment's words: a comment line, or an inline one (the house style's two spaces
    before ``#``); tools' pragmas (noqa, type: ignore) say nothing. (Not ``tokenize``: ten times slower.)"""
    out = {}
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        words = stripped[1:] if stripped.startswith("#") else line.partition("  # ")[2]
        words = words.strip()
        while words.startswith(("noqa", "type: ignore", "pragma")):
            words = words.partition("  # ")[2].strip()  # (a pragma then a reason: ``# type: ignore[x]  # why``)
        out[i] = words
    return out


@cache
def scan(src: Path) -> dict[str, list[tuple[int, str, bool, bool]]]:
    """module -> [(line, enclosing function, has a reason comment, leaves evidence)] of its counted
    broad handlers."""
    found: dict[str, list[tuple[int, str, bool, bool]]] = {}
    for p in sorted((src / PKG).rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        text = p.read_text(encoding="utf-8")
        tree = ast.parse(text, str(p))
        comments = _comments(text)

        def visit(node: ast.AST, fn: str, mod: str = mod, comments: dict[int, str] = comments) -> None:
            for child in ast.iter_child_nodes(node):
                name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else fn
                if isinstance(child, ast.ExceptHandler) and _is_broad(child) and not _reraises(child):
                    lines = range(child.lineno, child.body[0].lineno)
                    why = any(comments.get(i) for i in lines) or (child.body[0].lineno in comments
                                                                  and bool(comments[child.body[0].lineno]))
                    found.setdefault(mod, []).append((child.lineno, name, why, _leaves_evidence(child)))
                visit(child, name)

        visit(tree, "")
    return found


def _where(mod: str, line: int) -> str:
    rel = mod.replace(".", "/")
    path = SRC / f"{rel}.py"
    if not path.exists():
        path = SRC / rel / "__init__.py"
    return f"{path.relative_to(SRC.parent)}:{line}"


def test_broad_handlers_only_shrink():
    found = scan(SRC)
    problems = []
    for mod in sorted(set(found) | set(ALLOWED)):
        n, allowed = len(found.get(mod, [])), ALLOWED.get(mod, 0)
        if n > allowed:
            where = ", ".join(_where(mod, line) for line, *_ in found[mod])
            problems.append(f"{mod}: {n} broad handlers, {allowed} allowed: narrow the new one to what its body "
                            f"can raise ({where})")
        elif n < allowed:
            problems.append(f"{mod}: {n} broad handlers, {allowed} allowed: lower its entry in ALLOWED to {n}"
                            if n else f"{mod}: no broad handler left: remove its entry from ALLOWED")
    assert not problems, "\n".join(problems)


def test_every_broad_handler_says_why_and_leaves_evidence():
    problems = []
    for mod, handlers in sorted(scan(SRC).items()):
        for line, fn, why, evidence in handlers:
            if not why:
                problems.append(f"{_where(mod, line)} ({fn}): a broad handler without a comment saying why it is broad")
            if not evidence and (mod, fn) not in SILENT:
                problems.append(f"{_where(mod, line)} ({fn}): a broad handler that neither logs "
                                "(errors.swallowed) nor raises: the evidence is lost")
    assert not problems, "\n".join(problems)


def test_the_checker_counts_what_it_should(tmp_path):
    """The checker itself: a clean-up that re-raises is not counted; a silent one, one without a reason
    and a narrow one are told apart."""
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "def f():\n"
        "    try:\n        g()\n    except BaseException:\n        close()\n        raise\n"
        "    try:\n        g()\n    except Exception:  # user code runs here\n        swallowed('g')\n"
        "    try:\n        g()\n    except:\n        pass\n"
        "    try:\n        g()\n    except (OSError, Exception) as e:\n        # handed to the caller\n"
        "        out.append(e)\n"
        "    try:\n        g()\n    except Exception:  # noqa: BLE001\n        log.debug('x')\n"
        "    try:\n        g()\n    except OSError:\n        pass\n")
    assert scan(tmp_path) == {"memolab.a": [(9, "f", True, True), (13, "f", False, False),
                                            (17, "f", True, True), (22, "f", False, True)]}


# -- what narrowing changed, and what it kept -------------------------------------------------------

class Log(list):
    """What the bodies computed: a side channel, left out of keys (closure cells are keyed by value)."""


memolab.register_opaque(Log)

def _debug_records(caplog, what: str) -> list:
    return [r for r in caplog.records if r.name == "memolab" and r.levelno == logging.DEBUG
            and r.getMessage().startswith(what) and r.exc_info is not None]


def test_a_store_that_refuses_the_result_still_returns_it_unstored_with_the_traceback_at_debug(tmp_store, caplog):
    """Storing stays a boundary (the value's own pickling code, a store of any backend): a store that
    refuses the result (a trigger raising, as a full or damaged disk would) costs the storing, never the
    call; the fault is on the ``memolab`` logger at DEBUG with its traceback, and the next call computes
    again (nothing was stored). Once the store takes it again, the result is stored and hit."""
    calls = Log()

    @memolab.memo
    def double(x):
        calls.append(x)
        return 2 * x

    assert double(1) == 2  # the store and its tables exist
    with sqlite3.connect(tmp_store / "index.sqlite") as c:
        for op in ("INSERT", "UPDATE"):
            c.execute(f"CREATE TRIGGER refuse_{op.lower()} BEFORE {op} ON evaluations WHEN NEW.status = 'done' "
                      "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    caplog.set_level(logging.DEBUG, logger="memolab")
    with pytest.warns(memolab.MemolabWarning, match="result not stored"):
        assert double(2) == 4
    found = _debug_records(caplog, "call: storing the result failed")
    assert found and "disk says no" in str(found[0].exc_info[1]), [r.getMessage() for r in caplog.records]
    with pytest.warns(memolab.MemolabWarning, match="result not stored"):
        assert double(2) == 4
    assert calls == [1, 2, 2]
    with sqlite3.connect(tmp_store / "index.sqlite") as c:
        c.execute("DROP TRIGGER refuse_insert")
        c.execute("DROP TRIGGER refuse_update")
    assert double(2) == 4 and double(2) == 4
    assert calls == [1, 2, 2, 2]


def test_hit_counts_a_locked_or_refusing_index_drops_are_logged_and_a_bug_is_not_swallowed(tmp_store, caplog,
                                                                                          monkeypatch):
    """``Store.flush_hits`` now catches the local index's errors only (sqlite3.Error, OSError): the
    counts are advisory, so a refusing index is logged at DEBUG and the flush goes on; a programming
    error in memolab's own code surfaces instead of vanishing with the counts."""
    @memolab.memo
    def inc(x):
        return x + 1

    inc(1)
    inc(1)  # a hit: a count to flush
    store = get_store()
    with sqlite3.connect(tmp_store / "index.sqlite") as c:
        c.execute("CREATE TRIGGER refuse_hits BEFORE UPDATE OF hits ON evaluations "
                  "BEGIN SELECT RAISE(ABORT, 'index says no'); END")
    caplog.set_level(logging.DEBUG, logger="memolab")
    store.flush_hits()  # no exception
    assert _debug_records(caplog, "store: Store.flush_hits failed")
    inc(1)

    def bug(*a, **k):
        raise TypeError("a bug in memolab's own code")

    monkeypatch.setattr(store.index, "add_hits", bug)
    with pytest.raises(TypeError, match="a bug"):
        store.flush_hits()


def test_a_damaged_snapshot_costs_the_rehash_and_nothing_else():
    """``rows.result_token`` catches what a damaged snapshot raises (not JSON, not a list of hex
    digests, a JSON object of another shape), not everything."""
    for row in ({"result_token": "{not json"}, {"result_token": '["zz"]'}, {"result_token": "[1]"},
                {"snapshot": "[1, 2]"}, {"snapshot": '{"result_digest": 7}'}):
        assert result_token(row) is None, row
    assert result_token({"result_token": '["ab"]'}) == ["ab"]


def test_the_file_stat_cache_degrades_on_a_bad_location_but_a_bug_surfaces(tmp_store, monkeypatch):
    """``files._StatCache.db``: a store location that cannot be one (StoreConfigError, a ValueError)
    or cannot be read (OSError) leaves the in-memory cache working; anything else is memolab's bug."""
    cache = files._StatCache()
    for err in (StoreConfigError("s3://x: not a store"), PermissionError("no")):
        def refuse(err=err):
            raise err
        monkeypatch.setattr(config, "store_path", refuse)
        assert cache.db() is None

    def bug():
        raise TypeError("a bug in memolab's own code")

    monkeypatch.setattr(config, "store_path", bug)
    with pytest.raises(TypeError, match="a bug"):
        cache.db()
