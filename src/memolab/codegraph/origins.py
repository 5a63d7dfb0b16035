"""Where a module comes from: the user's code, a third-party distribution, or the stdlib.

User code is hashed by its source; a distribution by its name and version (from
``importlib.metadata``); the standard library by the Python version. The rule
is by file location, not by name: a module whose file lies in a
``site-packages``/``dist-packages`` folder belongs to a distribution; the stdlib
is what ``sys.stdlib_module_names`` names *and* lives in the interpreter's own
library folder (so a user's ``code.py`` is still user code); everything else
(the workspace, ``PYTHONPATH`` folders, editable installs whose files live in
the source tree) is user code. memolab itself is left out: its key schema says
when its own changes matter.
"""
from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

from ..errors import swallowed

USER, PACKAGE, STDLIB, SKIP = "user", "pkg", "stdlib", "skip"

Origin = tuple[str, str, str]  # (kind, dependency symbol, full version)

_STDLIB_DIRS = tuple({os.path.realpath(p) + os.sep for p in (sysconfig.get_paths().get("stdlib"),
                                                             sysconfig.get_paths().get("platstdlib")) if p})
_SITE_PARTS = ("site-packages", "dist-packages")
PYTHON_VERSION = "{}.{}.{}".format(*sys.version_info[:3])

_cache: dict[tuple[str, str | None], Origin] = {}
_dists: Mapping[str, list[str]] | None = None
_versions: dict[str, tuple[str, str]] = {}


#: What multiprocessing's ``spawn``/``forkserver`` children call the parent's main
#: script (or ``-m`` module): they re-run it under this name (so its
#: ``if __name__ == "__main__":`` block is skipped) and alias ``sys.modules["__main__"]`` to it.
MP_MAIN = "__mp_main__"


def key_module(name: str) -> str:
    """The module name that joins keys: ``__mp_main__`` counts as ``__main__``.

    A spawned child runs the very same script as the parent, only under another
    module name; keying it apart would make a parent and its children never share
    a result. What the script's code *reads* is still compared by value (a global
    bound only under the ``__main__`` guard is unbound in the child, so its key
    differs), so the alias never makes a stale hit.
    """
    return "__main__" if name == MP_MAIN else name


def module_origin(name: str | None, filename: str | None) -> Origin:
    """Classify module ``name`` whose code lives in ``filename`` (cached per pair)."""
    key = (name or "", filename)
    hit = _cache.get(key)
    if hit is None:
        hit = _cache[key] = _classify(name or "", filename)
    return hit


def kind_of(name: str, filename: str | None) -> str:
    """``_classify``'s kind alone (``USER``, ``PACKAGE``, ``STDLIB``, ``SKIP``), without finding the
    distribution (its metadata costs milliseconds a package)."""
    top = name.split(".", 1)[0]
    if top == "memolab":
        return SKIP
    if top in ("__main__", "__mp_main__"):
        return USER
    if filename and not filename.startswith("<"):
        real = realpath(filename)
        if real.startswith(_STDLIB_DIRS) and not _in_site(real):
            return STDLIB  # the interpreter's own folder (``_sysconfigdata_*`` is no listed module)
        return PACKAGE if _in_site(real) else USER
    hit = _cache.get((name, filename))
    return hit[0] if hit is not None else _classify(name, filename)[0]


def origin_of_name(top: str) -> str:
    """The kind (``USER``, ``PACKAGE``, ``STDLIB``) of top-level module ``top``, found without
    importing it (``find_spec`` reads the import path only). A module that cannot be found is a
    library by its name: whether it is installed must not change what it counts as."""
    hit = _name_kinds.get(top)
    if hit is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError, AttributeError):
            spec = None
        if spec is None:
            hit = PACKAGE
        elif spec.origin in ("built-in", "frozen"):
            hit = STDLIB
        else:
            where = spec.origin if spec.origin not in (None, "namespace") else \
                next(iter(spec.submodule_search_locations or ()), None)
            hit = _classify(top, where)[0]
        _name_kinds[top] = hit
    return hit


_name_kinds: dict[str, str] = {}


def _classify(name: str, filename: str | None) -> Origin:
    top = name.split(".", 1)[0]
    if top == "memolab":
        return (SKIP, "", "")
    if top in ("__main__", "__mp_main__"):
        return (USER, "", "")
    if filename and not filename.startswith("<"):
        real = realpath(filename)
        if top in sys.stdlib_module_names and real.startswith(_STDLIB_DIRS) and not _in_site(real):
            return (STDLIB, "python:stdlib", PYTHON_VERSION)
        if _in_site(real):
            dist, version = distribution_of(top)
            return (PACKAGE, f"pkg:{dist}", version)
        return (USER, "", "")
    if not top and filename == "<string>":
        # code compiled from a string, under compile()'s own file name, in globals of no module
        # (``exec(src, {})``): code to hash. Libraries that generate code name its file
        # ("<attrs generated hash ...>") and may put per-process values in it: not this.
        return (USER, "", "")
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top in ("builtins", ""):
        return (STDLIB, "python:stdlib", PYTHON_VERSION)
    if filename and filename.startswith("<"):
        # code compiled from a string by a user module (exec, IPython cells, python -c)
        return (USER, "", "")
    dist, version = distribution_of(top)
    return (PACKAGE, f"pkg:{dist}", version)


_real_dirs: dict[str, str] = {os.sep: os.sep}


def realpath(path: str) -> str:
    """``os.path.realpath``, each folder resolved once per process: classifying the ~150 packages
    a torch program loads took an lstat of every component of every path (5 ms of the first
    memoized call). realpath(d/name) is realpath(realpath(d)/name), so only the last component
    is new; a path that is not absolute and normal takes the general route."""
    if os.name != "posix" or not os.path.isabs(path) or os.path.normpath(path) != path:
        return os.path.realpath(path)
    head, tail = os.path.split(path)
    if not tail:
        return os.path.realpath(path)
    real_head = _real_dirs.get(head)
    if real_head is None:
        real_head = _real_dirs[head] = realpath(head)
    joined = os.path.join(real_head, tail)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def _in_site(path: str) -> bool:
    parts = path.split(os.sep)
    return any(p in _SITE_PARTS for p in parts)


def distribution_of(top: str) -> tuple[str, str]:
    """(distribution name, version) that provides top-level import name ``top``."""
    hit = _versions.get(top)
    if hit is not None:
        return hit
    from importlib import metadata

    dist_name, version = top, "unknown"
    try:
        # fast path: most distributions are named like their import package
        dist_name, version = _name_version(metadata.distribution(top), top)
    except Exception as e:  # importlib.metadata asks every finder on sys.meta_path (third parties), reads any metadata
        if not isinstance(e, metadata.PackageNotFoundError):  # (that one is common: an import name unlike its dist's)
            swallowed("codegraph.origins: distribution_of")
        global _dists
        if _dists is None:
            try:
                _dists = metadata.packages_distributions()
            except Exception:  # reads every installed distribution's metadata files, of any shape
                swallowed("codegraph.origins: distribution_of")
                _dists = {}
        names = sorted(_dists.get(top, []))
        if names:
            dist_name = names[0]
            try:
                version = metadata.version(dist_name)
            except Exception:  # importlib.metadata: finders of third parties, metadata files of any shape
                swallowed("codegraph.origins: distribution_of")
        else:
            mod = sys.modules.get(top)
            version = str(getattr(mod, "__version__", "unknown"))
    hit = _versions[top] = (dist_name, version)
    return hit


_HEADER = re.compile(r"^(Name|Version):[ \t]*([^\r\n]*)\r?$", re.MULTILINE)


def _name_version(d: Any, top: str) -> tuple[str, str]:
    """(Name, Version) from a distribution's metadata headers: the lines before the first blank
    one. ``d.metadata`` parses the whole file with the email parser, and ``d.version`` parses it
    again (torch's: 2 ms each, on the first memoized call of a process); a file whose headers this
    cannot read takes that route."""
    text = d.read_text("METADATA") or d.read_text("PKG-INFO") or ""
    found = dict(_HEADER.findall(re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]))
    if "Name" in found and "Version" in found:
        return found["Name"] or top, found["Version"]
    md = d.metadata
    return md["Name"] or top, md["Version"]


_VERSION = re.compile(r"(\d+)(?:\.(\d+))?")


def truncate(version: str, sensitivity: str) -> str:
    """The part of ``version`` that joins a key under ``sensitivity`` (exact|minor|major|ignore)."""
    if sensitivity == "exact":
        return version
    if sensitivity == "ignore":
        return "*"
    m = _VERSION.match(version)
    if not m:
        return version
    if sensitivity == "major":
        return m.group(1)
    return f"{m.group(1)}.{m.group(2) or 0}"


def clear() -> None:
    """Forget cached classifications and versions (tests install fake distributions)."""
    global _dists
    _cache.clear()
    _versions.clear()
    _real_dirs.clear()
    _real_dirs[os.sep] = os.sep
    _dists = None
