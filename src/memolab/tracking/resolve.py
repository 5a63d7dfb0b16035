"""One resolver for the names people give functions: the CLI and ``memolab.runs`` both use it.

A function is printed one way everywhere (``tracking.names.function_label``): its symbol
``pkg.mod:train``, except a script's function, which is ``a.py:train`` (every script's functions
share the symbol ``__main__:train``). Every form memolab ever printed is taken back:

- a label ``a.py:train`` (or more of the script's path, ``exp1/a.py:train``): that script's share;
- a full symbol ``pkg.mod:train`` or ``__main__:train``: the whole symbol (every script's share);
- a suffix ``train``, ``mod:train``, ``mod.train`` (``pkg.mod.train`` as Python names it): the one
  label it names; several -> ambiguous,
  the candidates listed as they are printed;
- ``run.py``: the process runs of ``run.py`` (``<process:run.py>``).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from . import names, query


class FunctionNotFound(LookupError):
    """No function of the store answers to the name."""


class AmbiguousFunction(LookupError):
    """Several functions answer to the name; ``candidates`` holds their printed names."""

    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.candidates = candidates


@dataclass(frozen=True)
class Resolved:
    fn: str  #: the symbol (``__main__:train``)
    script: str | None  #: a script's absolute path when the name picked one script's share
    label: str  #: the printed name (``a.py:train``)


def known_functions(index: Any) -> list[str]:
    """Every symbol the store knows: stored evaluations, logged runs (process runs too) and
    functions that only ever missed."""
    c = query.ready(index)
    names = {f["fn"] for f in index.functions()}
    for table in ("runs", "misses"):  # one seek per name past the last (their fn-first indexes), not every row
        names.update(r[0] for r in c.execute(
            f"WITH RECURSIVE s(x) AS (SELECT MIN(fn) FROM {table} UNION ALL "
            f"SELECT (SELECT MIN(fn) FROM {table} WHERE fn > s.x) FROM s WHERE s.x IS NOT NULL) "
            "SELECT x FROM s WHERE x IS NOT NULL"))
    return sorted(names)


def short_name(fn: str) -> str:
    """``pkg.mod:train`` -> ``train``; ``<process:run.py>`` -> ``run.py``."""
    if fn.startswith("<process:") and fn.endswith(">"):
        return fn[len("<process:"):-1]
    return fn.split(":")[-1].split(".")[-1] if ":" in fn else fn


def _entries(index: Any) -> list[Resolved]:
    """Every printed name: one per symbol, a script's function once per script that ran it."""
    out = [Resolved(e["fn"], e["script"], e["label"]) for e in query.function_entries(index)]
    have = {e.fn for e in out}
    out += [Resolved(f, None, f) for f in known_functions(index) if f not in have]
    return out


def _suffix_of(entry: Resolved, name: str) -> bool:
    fn, label = entry.fn, entry.label
    return (fn.endswith(":" + name) or fn.endswith("." + name) or short_name(fn) == name
            or fn.split(":")[-1] == name or label.endswith("/" + name))


def resolve(index: Any, name: str, who: str = "memolab") -> Resolved:
    """The function ``name`` means (see the module's docstring); ``FunctionNotFound`` or
    ``AmbiguousFunction`` (its message lists the candidates as they are printed) otherwise."""
    entries = _entries(index)
    for e in entries:
        if e.label == name:
            return e
    symbols = {e.fn for e in entries}
    if ":" not in name and "." in name:  # pkg.prep.load, as Python names it: pkg.prep:load
        dotted = name.rpartition(".")
        if f"{dotted[0]}:{dotted[2]}" in symbols:
            name = f"{dotted[0]}:{dotted[2]}"
    if name in symbols:  # a full symbol: the whole of it, whichever scripts ran it
        scripts = [e for e in entries if e.fn == name]
        return scripts[0] if len(scripts) == 1 else Resolved(name, None, name)
    head, sep, tail = name.rpartition(":")
    if sep and head.endswith((".py", ".ipynb")) and not head.startswith("<"):  # more of a script's path than printed
        found = [e for e in entries if e.script and e.fn == f"__main__:{tail}"
                 and (e.script == head or e.script.endswith("/" + head.lstrip("./")))]
        if len(found) == 1:
            return found[0]
        if found:
            raise AmbiguousFunction(f"{who}: {name!r} names several scripts' {tail}: "
                                    f"{', '.join(e.label for e in found)}; give one of them",
                                    [e.label for e in found])
    matches = [e for e in entries if _suffix_of(e, name)]
    if len(matches) == 1:
        return matches[0]
    if len({e.fn for e in matches}) == 1 and len({e.script for e in matches if e.script}) <= 1:
        # one script's share and evaluations no run of a known script made (an older store): one
        # function, the whole symbol; two scripts' shares stay ambiguous
        return Resolved(matches[0].fn, None, matches[0].fn)
    labels = sorted(e.label for e in entries)
    if not matches:
        raise FunctionNotFound(f"{who}: no function matches {name!r} in {index.path.parent}" + _suggest(name, labels))
    shown = sorted(e.label for e in matches)
    raise AmbiguousFunction(f"{who}: {name!r} is ambiguous: it matches {', '.join(shown)}; give one of them", shown)


def _suggest(name: str, labels: list[str]) -> str:
    """Close printed names, each once (two functions' ``train`` are listed by their labels)."""
    by_short: dict[str, list[str]] = {}
    for f in labels:
        by_short.setdefault(short_name(f) if not f.startswith("<") else f, []).append(f)
    close: list[str] = []
    for c in difflib.get_close_matches(name, list(by_short) + labels, n=5):
        for full in by_short.get(c, [c]):
            shown = c if len(by_short.get(c, [])) == 1 and c == full else full
            if shown not in close:
                close.append(shown)
    return f" (did you mean {', '.join(close[:3])}?)" if close else ""


def label_of(index: Any, fn: str, script: str | None = None) -> str:
    """How ``fn`` is printed: ``a.py:train`` when it is a script's function and ``script`` (or
    the only script that ran it) says which, else its symbol."""
    if not fn.startswith("__main__:"):
        return fn
    c = query.ready(index)
    paths = query.scripts_of(c, fn)
    if script is None and len(paths) == 1:
        script = paths[0]
    label = names.script_labels(paths).get(script) if script is not None else None
    return names.function_label(fn, label) if label else fn


def evaluation_label(index: Any, fn: str, eval_id: int) -> str:
    """How the function of evaluation ``eval_id`` is printed (``a.py:train``: the script that stored it)."""
    if not fn.startswith("__main__:"):
        return fn
    r = query.ready(index).execute("SELECT script FROM runs WHERE eval_id=? AND script IS NOT NULL LIMIT 1",
                                   (eval_id,)).fetchone()
    return label_of(index, fn, r[0] if r else None)
