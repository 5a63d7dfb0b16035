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
import stat
import sys
import sysconfig
import threading
import time
from collections.abc import Mapping
from itertools import chain
from typing import Any

from ..errors import swallowed
from . import code_cache

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
        return _file_kind(realpath(filename))
    hit = _cache.get((name, filename))
    return hit[0] if hit is not None else _classify(name, filename)[0]


def _file_kind(real: str) -> str:
    """The kind of a module whose file's real path is ``real``: a library folder's, the interpreter's
    own folder (``_sysconfigdata_*`` is no listed module), or else the user's."""
    if _in_site(real):
        return PACKAGE
    return STDLIB if real.startswith(_STDLIB_DIRS) else USER


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
#: folder (its real path) -> (the names in it, those of them that are links): read with one
#: listing for one batch of ``kinds_of`` (a folder many of its modules lie in: the stdlib's)
_listed: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
#: a folder is listed when at least this many of a batch's files lie in it: the listing costs
#: about what this many ``lstat`` calls do for a folder of a few hundred entries
LIST_MIN = 16


def _plain(path: str) -> bool:
    """Is ``path`` absolute and normal (``os.path.normpath(path) == path``, with no ``//``)? Decided
    on the string: a path this refuses takes ``os.path.realpath``'s general route."""
    return path[:1] == "/" and "//" not in path and "/./" not in path and "/../" not in path \
        and not path.endswith(("/", "/.", "/.."))


def realpath(path: str) -> str:
    """``os.path.realpath``, each folder resolved once per process: classifying the ~150 packages
    a torch program loads took an lstat of every component of every path (5 ms of the first
    memoized call). realpath(d/name) is realpath(realpath(d)/name), so only the last component
    is new, and whether it is a link is one ``lstat`` (or the folder's listing, within
    ``kinds_of``); a path that is not absolute and normal takes the general route."""
    if os.sep != "/" or not _plain(path):
        return os.path.realpath(path)
    head, _, tail = path.rpartition("/")
    return _resolve(head or "/", tail, path)


def _real_dir(d: str) -> str:
    real = _real_dirs.get(d)
    if real is None:
        head, _, tail = d.rpartition("/")
        real = _real_dirs[d] = _resolve(head or "/", tail, d)
    return real


def _resolve(head: str, tail: str, path: str) -> str:
    """realpath of ``path``, which is ``head/tail`` (absolute and normal)."""
    real_head = _real_dir(head)
    joined = path if real_head == head else (real_head + tail if real_head == "/" else f"{real_head}/{tail}")
    listing = _listed.get(real_head)
    if listing is not None and tail in listing[0]:
        link = tail in listing[1]
    else:  # (os.path.islink: an lstat, and no answer is "not a link")
        try:
            link = stat.S_ISLNK(os.lstat(joined).st_mode)
        except (OSError, ValueError):
            link = False
    return os.path.realpath(joined) if link else joined


#: a folder's links are kept across processes (``code_cache.folder_links``) once its last change
#: is this old (nanoseconds): the stdlib's folders are; a folder just changed is listed afresh
SETTLED_NS = 3600 * 10 ** 9


def _list(real_dir: str) -> None:
    """Read which entries of folder ``real_dir`` are links, in one listing (``d_type``: no
    ``lstat`` an entry, except on a file system that does not say; an entry that cannot be told
    is left out of the names, and is asked with its own ``lstat``), for one batch."""
    names, links = set(), set()
    try:
        with os.scandir(real_dir) as it:
            for e in it:
                try:
                    if e.is_symlink():
                        links.add(e.name)
                except OSError:
                    continue
                names.add(e.name)
    except OSError:
        return  # (gone, or not readable: each file is asked with its own lstat)
    _listed[real_dir] = (frozenset(names), frozenset(links))


Stamp = tuple[int, int, int, int]
#: for one batch of ``kinds_of``: folder -> its stamp when neither it nor a folder above it is a
#: link (its real path is itself), else None
_chain: dict[str, Stamp | None] = {}
#: for one batch: folder -> the names of its entries that are links (None: not known)
_links: dict[str, frozenset[str] | None] = {}


def _stamp_of(d: str) -> Stamp | None:
    """The stamp (device, inode, modification and change times) of folder ``d`` (absolute and
    normal) when no component of ``d`` is a link, by one ``lstat`` a folder of the chain (each
    asked once a batch): an ``lstat`` says both whether the entry is a link and, for a folder,
    its stamp. None when one is a link, is no folder, or cannot be read."""
    if d in _chain:
        return _chain[d]
    out: Stamp | None = None
    if d == "/" or _stamp_of(d.rpartition("/")[0] or "/") is not None:
        try:
            st = os.lstat(d)
        except (OSError, ValueError):
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            out = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            _real_dirs[d] = d  # (no component is a link: its real path is itself)
    _chain[d] = out
    return out


def _links_in(d: str) -> frozenset[str] | None:
    """The names of the entries of folder ``d`` that are links, when ``d``'s real path is itself
    and ``d`` is settled (its last change ``SETTLED_NS`` old): from the code cache while ``d``'s
    stamp is the one it was listed at, else listed and kept. None otherwise."""
    if d in _links:
        return _links[d]
    links: frozenset[str] | None = None
    st = _stamp_of(d) if _plain(d) else None
    if st is not None:
        links = code_cache.folder_links(d, st)
        # (stamped before the listing: a change while listing moves the folder's times past this
        # stamp, so what is kept under it is never read back)
        if links is None and time.time_ns() - max(st[2], st[3]) > SETTLED_NS:
            links = _scan_links(d)
            if links is not None:
                code_cache.put_folder_links(d, st, links)
    _links[d] = links
    return links


def _scan_links(d: str) -> frozenset[str] | None:
    """The names of the entries of ``d`` that are links, in one listing (``d_type``: an ``lstat``
    an entry only on a file system that does not say); None if one cannot be told."""
    found = set()
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.is_symlink():
                    found.add(e.name)
    except OSError:
        return None  # (gone, not readable, or an entry gone before its type was told)
    return frozenset(found)


#: the last components of a file that ``kinds_of`` leaves to ``kind_of``: no file's name (the path is
#: then not normal), or a library folder's name (a file's kind is then not its folder's)
_NOT_NAMES = frozenset(("", ".", "..", *_SITE_PARTS))


#: the top-level names whose kind their name alone decides (``kind_of``): memolab's own, the script's
_BY_NAME = ("memolab", "__main__", "__mp_main__")
#: a batch of at least this many modules has its answers kept in the code cache (a fresh process's
#: first call asks about every top-level package loaded: 80 for a small script, 150 with torch)
KEEP_MIN = 8


def kinds_of(modules: list[tuple[str, str | None]]) -> list[str]:
    """``kind_of`` of each (name, file) of ``modules``, with fewer system calls and less work a
    module. A file whose folder ``d`` is settled and whose real path is itself (``_links_in``) is
    placed by ``d``'s links: no link named like it, its real path is its own, and its kind is
    ``d``'s (``_batch_kind``): the folders' ``lstat``s, and one read of the code cache, answer
    every module of them. The others: each folder that ``LIST_MIN`` or more of them (or package
    folders) lie in is read with one listing, whose entry types answer which are links, instead
    of an ``lstat`` each. What is known of folders is dropped when the batch is done: a file made
    or replaced later is asked afresh. Each answer equals ``kind_of``'s, and ``realpath``'s
    equals ``os.path.realpath``'s (tests/test_codegraph.py, tests/test_first_call.py).

    A batch asked before (the same names and files: a script run again) is answered as it was
    then, when each folder its answers were placed by has the stamp it had then (``_kept``):
    the folders' ``lstat``s again, without the work of a module. Only answers placed by a
    folder's links are kept (or decided by a name alone); the others are asked afresh.

    One batch at a time in a process (``_batch_lock``): what a batch learns of folders (``_chain``,
    ``_links``, ``_listed``) is its own and dropped when it is done; threads whose first calls ran
    at once each dropped the other's mid-batch (a ``KeyError`` out of the memoized call)."""
    with _batch_lock:
        return _kinds_of(modules)


#: held by the batch ``kinds_of`` is asking (re-entrant: a batch never asks another, but must not hang if it did)
_batch_lock = threading.RLock()


def _kinds_of(modules: list[tuple[str, str | None]]) -> list[str]:
    key = _batch_key(modules) if len(modules) >= KEEP_MIN else None
    if key is not None:
        kept = _kept(key, len(modules))
        if kept is not None:
            if None in kept:
                fresh = [i for i, k in enumerate(kept) if k is None]
                for i, kind in zip(fresh, _kinds_fresh([modules[i] for i in fresh])[0], strict=True):
                    kept[i] = kind
            return kept  # type: ignore[return-value]
    out, proof, unproven = _kinds_fresh(modules)
    if key is not None and proof:
        code_cache.keep_kinds(key, tuple(None if i in unproven else k for i, k in enumerate(out)), _chained(proof))
    return out


def _batch_key(modules: list[tuple[str, str | None]]) -> str | None:
    """What a batch's kept answers are keyed by: its names and files, and the interpreter's own
    folders (``_STDLIB_DIRS``). None unless each is a string with no NUL (joined by NULs: a batch
    whose names and files join alike is the same batch)."""
    flat: list[Any] = list(chain.from_iterable(modules))
    if set(map(type, flat)) != {str}:
        return None
    text = "\0".join([os.sep, *sorted(_STDLIB_DIRS), *flat])
    if text.count("\0") != len(flat) + len(_STDLIB_DIRS):
        return None
    return code_cache.text_digest(text)


def _chained(leaves: dict[str, Stamp]) -> tuple[tuple[str, Stamp | None], ...]:
    """The folders ``_kept`` asks: each of ``leaves`` with its stamp, and each folder above one with
    None (it must be a folder, not a link), above ones first."""
    out: dict[str, Stamp | None] = {}
    for d in sorted(leaves):
        up = d
        above = []
        while up != "/":
            up = up.rpartition("/")[0] or "/"
            above.append(up)
        for a in reversed(above):
            out.setdefault(a, None)
        out[d] = leaves[d]
    return tuple(out.items())


def _kept(key: str, n: int) -> list[str | None] | None:
    """The kept answers of batch ``key`` (None: to be asked afresh), when every folder they were
    placed by still has the stamp it had then, and every folder above one is still a folder, not a
    link (its ``lstat``): else None. A folder's stamp moves with every entry made, removed, renamed
    or replaced, and it was settled then (``_links_in``): the same stamp is the same links, and a
    file's kind is then its folder's, decided by the folder's real path: itself."""
    kept = code_cache.kept_kinds(key)
    if kept is None or len(kept[0]) != n:
        return None
    try:
        # (each absolute and normal, as ``_chained`` wrote them: the code cache's files are trusted as
        # Python's own ``.pyc`` files are, in the user's own cache folder; a file of another shape raises)
        for d, st in kept[1]:
            now = os.lstat(d)
            if not stat.S_ISDIR(now.st_mode) or (
                    st is not None and (now.st_dev, now.st_ino, now.st_mtime_ns, now.st_ctime_ns) != st):
                return None
    except OSError:  # (a folder gone since: asked afresh)
        return None
    except (ValueError, TypeError):  # a damaged entry: asked afresh
        swallowed("codegraph.origins: _kept")
        return None
    return list(kept[0])


def _kinds_fresh(modules: list[tuple[str, str | None]]) -> tuple[list[str], dict[str, Stamp], set[int]]:
    """(the kinds of ``modules``, the stamps of the folders whose links placed them, the indexes of
    those placed otherwise: not by their folder's links, nor by their name alone)."""
    out: list[str | None] = []
    rest: list[tuple[int, str, str | None]] = []
    proof: dict[str, Stamp] = {}
    unproven: set[int] = set()
    posix = os.sep == "/"  # (elsewhere every module takes ``_kinds_listed``'s route)
    try:
        for name, f in modules:
            by_name = name.partition(".")[0] in _BY_NAME
            if posix and f and f[:1] == "/" and not by_name:
                head, _, tail = f.rpartition("/")
                # (``f`` is absolute and normal exactly when ``head`` is, ``_links_in`` asks it once a
                # folder, and ``tail`` is a name: not empty, ``.`` or ``..``)
                links = _links_in(head) if head and tail not in _NOT_NAMES else None
                if links is not None and tail not in links:
                    kind = _dir_kinds.get(head)
                    if kind is None:
                        kind = _dir_kinds[head] = _file_kind(f)
                    proof[head] = _chain[head]  # type: ignore[assignment]  # (not None: ``_links_in`` found links)
                    out.append(kind)
                    continue
            if not by_name:
                unproven.add(len(out))
            rest.append((len(out), name, f))
            out.append(None)
    finally:
        _chain.clear()
        _links.clear()
    if rest:
        for i, kind in zip((i for i, _, _ in rest), _kinds_listed([(n, f) for _, n, f in rest]), strict=True):
            out[i] = kind
    return out, proof, unproven  # type: ignore[return-value]


def _kinds_listed(modules: list[tuple[str, str | None]]) -> list[str]:
    if os.sep == "/":
        counts: dict[str, int] = {}
        for _, f in modules:
            if f and _plain(f):
                head, _, tail = f.rpartition("/")
                head = head or "/"
                counts[head] = counts.get(head, 0) + 1
                if tail.startswith("__init__."):  # a package: its own folder lies in the folder above
                    up = head.rpartition("/")[0] or "/"
                    counts[up] = counts.get(up, 0) + 1
        for d, n in counts.items():
            if n >= LIST_MIN and d not in _listed:
                _list(_real_dir(d))
    try:
        return [_batch_kind(name, f) for name, f in modules]
    finally:
        _listed.clear()


#: real folder -> the kind of every file in it that is no link and not named like a library folder
#: (``_file_kind`` of ``folder/name`` depends on the folder alone then: see ``_batch_kind``)
_dir_kinds: dict[str, str] = {}


def _batch_kind(name: str, f: str | None) -> str:
    """``kind_of(name, f)``; for a file of a listed folder that is no link, by its folder's kind:
    its real path is then ``realpath(folder)/name``, whose library-folder components are the
    folder's (``name`` is none: checked), and which starts with a stdlib folder (each ends with a
    separator) exactly when ``realpath(folder)/`` does."""
    top = name.partition(".")[0]
    if not f or top in ("memolab", "__main__", "__mp_main__") or not _plain(f):
        return kind_of(name, f)
    head, _, tail = f.rpartition("/")
    real_head = _real_dirs.get(head) or _real_dir(head or "/")
    listing = _listed.get(real_head)
    if listing is None or tail not in listing[0] or tail in listing[1] or tail in _SITE_PARTS or real_head == "/":
        return kind_of(name, f)
    kind = _dir_kinds.get(real_head)
    if kind is None:
        kind = _dir_kinds[real_head] = _file_kind(f"{real_head}/{tail}")
    return kind


def _in_site(path: str) -> bool:
    """Is a component of ``path`` a ``site-packages`` or ``dist-packages`` folder?"""
    wrapped = f"{os.sep}{path}{os.sep}"
    return any(f"{os.sep}{p}{os.sep}" in wrapped for p in _SITE_PARTS)


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
    _listed.clear()
    _dir_kinds.clear()
    _chain.clear()
    _links.clear()
    _dists = None
