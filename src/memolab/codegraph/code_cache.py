"""Analyses of code objects kept across processes: a script's first call skips re-analysing its code.

``bytecode.analyse_code`` walks every instruction of a function (and of the
code nested in it) to get its normalised digest, free references and excerpt:
for a graph spanning a 20,000-line package that is most of a first call, and
every new process paid it again. Here analyses are kept on disk, one file per
source file, and reused by the next process.

Keyed by what the issue asks (source path, its mtime and size, the Python
version) and, because a key of the file alone is not proof, **verified** on
every use: an entry is reused only if the live code object has the same
*fingerprint* (an xxh3 of its marshalled form: instruction bytes, names,
constants, nested code, flags, line table, exception table). The analysis is a
function of those fields, so a reused entry is the analysis the code object
would get. A process still running a module's old code while the file was edited and
re-analysed by another gets a fingerprint mismatch, and analyses afresh; it can
never pick up the new code's digest. Only the excerpt (source lines shown in
diffs, never part of a key) comes from the file, which is why a changed stat
drops the file's entries.

Where: ``$MEMOLAB_CODE_CACHE`` (``off`` disables it), else
``$XDG_CACHE_HOME/memolab/code`` or ``~/.cache/memolab/code``. The file name
carries the interpreter's bytecode tag and a stamp of memolab's analysis code,
so a new Python or a changed ``bytecode.py`` starts afresh. Files are written
at exit, atomically (temporary file + rename); a missing, unreadable or
damaged file is an empty cache. The format is ``marshal`` (what Python's own
``.pyc`` files use, with the same trust in the user's own cache directory).

The same folder keeps each user module's *patch sites* (``codegraph.patches``:
where its code assigns into a library), which every new process otherwise found
by compiling the module's whole source (a 2,000-line script: 160 ms and 4,000
objects, enough to tip the first memoized call into a full garbage collection of
everything ``import torch`` made). Sites are a function of the source bytes
alone (and of the interpreter, its ``-O`` level and memolab's scanner, all in
the file's salt), so they are keyed by an xxh3-128 of the bytes themselves,
read anew by every process: a file edited with its size and modification time
unchanged (a checkout, ``cp -p``, a coarse clock) has other bytes, so another
digest, and is scanned afresh. A stat alone would not prove that.

And, in one file a virtual environment (``sys.prefix``; at most ``FOLDERS_MAX`` folders), which
entries are links in each folder a loaded module's file lies in (``origins.kinds_of``: the
stdlib's, ``lib-dynload``, each package's folder): kept with the folder's stamp (device, inode,
modification and change times, which every entry made, removed, renamed or replaced moves, and
the change time cannot be set back), and only for a folder whose last change is
``origins.SETTLED_NS`` old (a change within one tick of a coarse file-system clock cannot hide
behind an equal stamp then). A process whose folder stamp differs lists the folder afresh.

And the answers of a batch of ``origins.kinds_of`` (a fresh process's first call asks about every
top-level package loaded), one small file a batch, keyed by the batch's names and files: with the
stamps of the folders whose links placed them, and the folders above those (``origins._kept``).
"""
from __future__ import annotations

import atexit
import marshal
import os
import sys
import threading
import types
from typing import Any

import xxhash

from .._version import __version__
from ..errors import swallowed
from ..settings import config
from ..settings.files import read_bytes

_FORMAT = 2  # 2: fingerprints of marshal format 2
_lock = threading.Lock()
#: source path -> [stat key, {(qualname, firstlineno): entry}, dirty]
_files: dict[str, list] = {}
_dir: str | None = None
_salt: str | None = None
_registered = False
#: analyses reused / not found or not matching, in this process (tests count them)
stats = {"hit": 0, "miss": 0}
#: patch-site lists read from disk / scanned afresh, in this process
site_stats = {"hit": 0, "miss": 0}
#: source path -> (content digest, sites) found by this process, written at exit
_sites_new: dict[str, tuple[str, tuple]] = {}
#: folder -> (its stamp, the names of its entries that are links): read from disk once a process
#: (``folder_links``), and those this process listed, written at exit (``put_folder_links``)
_folders: dict[str, Any] | None = None
_folders_new: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {}
#: the folders this process found in the file with their stamp unchanged (kept first when it is rewritten)
_folders_used: set[str] = set()
#: the most folders a file keeps (one file an interpreter prefix, a virtual environment: a process
#: loading torch asks about 150): what this process listed first, then what it used, then the others
FOLDERS_MAX = 1024
_FOLDERS_FORMAT = ("folders", 1)
#: batch key -> (its answers, its folders) found by this process, written at exit (``keep_kinds``)
_kinds_new: dict[str, tuple[tuple[str | None, ...], tuple[Any, ...]]] = {}


def _debug(msg: str, *args: Any) -> None:
    # logging imported only here, when there is something to say: a quiet script never loads it
    import logging

    logging.getLogger("memolab.codegraph").debug(msg, *args)


def _cache_dir() -> str | None:
    global _dir
    if _dir is None:
        env = config.environ_str(b"MEMOLAB_CODE_CACHE")  # (os.environ.get's answer, without its Python calls)
        # (unset: the setting's default, None, with nothing to parse)
        where = None if env is None else config.env_setting("MEMOLAB_CODE_CACHE")
        # set but empty turns it off here (an empty directory name is no place to write)
        if where == "" or (env is not None and not env.strip()):
            _dir = ""
        elif where:
            _dir = where
        else:
            base = config.environ_str(b"XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            _dir = os.path.join(base, "memolab", "code")
    return _dir or None


#: the scanners whose files stamp the salt, by path, not by importing them (bytecode imports this
#: module: no cycle); placed once, at import, where this module's own file was found (a later change of
#: the working folder cannot move a relative ``__file__`` off them)
_SCANNERS = tuple(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
                  for name in ("bytecode.py", "patches.py", "origins.py"))
#: what the salt holds besides the scanners' stamps: the format, the interpreter, memolab's version
_SALT_HEAD = f"{_FORMAT}|{sys.implementation.cache_tag or sys.version}|{sys.version}|{__version__}|"


def _analysis_salt() -> str:
    """Changes whenever the analysis could: the interpreter's bytecode, memolab's version, the
    scanners themselves (bytecode.py; patches.py for the sites; origins.py for the kept kinds)."""
    global _salt
    if _salt is None:
        mine = []
        for path in _SCANNERS:
            try:
                st = os.stat(path)
                mine.append(f"{st.st_size}.{st.st_mtime_ns}")
            except (OSError, TypeError):
                mine.append("?")
        _salt = xxhash.xxh3_64_hexdigest(f"{_SALT_HEAD}{'|'.join(mine)}".encode())
    return _salt


def _stat_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


#: (the code cache's folder, its ``os.path.join(folder, "")``): a file's path is that and its name
_prefix = ("", "")


def _in_cache(name: str) -> str:
    """``os.path.join(_cache_dir() or "", name)`` for a relative ``name``: the folder joined once a process."""
    global _prefix
    d = _cache_dir() or ""
    if _prefix[0] != d:
        _prefix = (d, os.path.join(d, ""))
    return _prefix[1] + name


def _file_of(path: str, kind: str = "") -> str:
    name = xxhash.xxh3_64_hexdigest(path.encode("utf-8", "surrogatepass"))
    return _in_cache(f"{name}.{_analysis_salt()}{kind}.marshal")


def source_digest(source: bytes) -> str:
    """What the patch sites of ``source`` are keyed by: its bytes, and the ``-O`` level its code
    is compiled at (``if __debug__:`` blocks are dropped under ``-O``)."""
    return f"{xxhash.xxh3_128_hexdigest(source)}.O{sys.flags.optimize}"


def get_sites(path: str, digest: str) -> list[tuple[tuple[str, ...], str | None]] | None:
    """The patch sites some process found in ``path`` when its bytes had ``digest``, or None."""
    if _cache_dir() is None:
        return None
    try:
        data = marshal.loads(read_bytes(_file_of(path, ".sites")))
        if type(data) is tuple and len(data) == 4 and data[0] == _FORMAT and data[1] == path \
                and data[2] == digest and type(data[3]) is tuple:
            out = [(chain, attr) for chain, attr in data[3]]
            if all(type(c) is tuple and all(type(n) is str for n in c) and c
                   and (a is None or type(a) is str) for c, a in out):
                site_stats["hit"] += 1
                return out
    except FileNotFoundError:
        pass  # never scanned here (or the cache was cleared)
    except (OSError, EOFError, ValueError, TypeError) as e:  # unreadable, damaged (marshal) or another format: scan again
        _debug("code cache: patch sites of %s unreadable: %r", path, e)
    site_stats["miss"] += 1
    return None


def put_sites(path: str, digest: str, sites: list[tuple[tuple[str, ...], str | None]]) -> None:
    """Remember the patch sites found in ``path`` with bytes of ``digest``; written at exit."""
    global _registered
    if _cache_dir() is None:
        return
    with _lock:
        _sites_new[path] = (digest, tuple(sites))
        if not _registered:
            _registered = True
            atexit.register(flush)


def _folders_file() -> str:
    # (one file a virtual environment: each one's processes read only the folders theirs load)
    return _file_of(f"folders:{sys.prefix}:{sys.exec_prefix}", ".folders")


def _read_folders() -> dict[str, Any]:
    try:
        data = marshal.loads(read_bytes(_folders_file()))
        if type(data) is tuple and len(data) == 2 and data[0] == _FOLDERS_FORMAT and type(data[1]) is dict:
            return data[1]
    except FileNotFoundError:
        pass  # no folder listed here yet (or the cache was cleared)
    except (OSError, EOFError, ValueError, TypeError) as e:  # unreadable, damaged (marshal) or another format
        _debug("code cache: folders unreadable: %r", e)
    return {}


def folder_links(folder: str, stamp: tuple[int, ...]) -> frozenset[str] | None:
    """The names of the entries of ``folder`` that are links, as some process listed them when the
    folder's stamp (device, inode, modification and change times) was ``stamp``; or None. A
    folder's times change whenever an entry is made, removed, renamed or replaced (a file swapped
    for a link too), and its change time cannot be set back: the same stamp is the same entries.
    All folders are in one file, read once a process (a fresh process's first call asks about
    20: one read, not 20)."""
    global _folders
    if _cache_dir() is None:
        return None
    with _lock:
        if _folders is None:
            _folders = _read_folders()
        kept = _folders.get(folder)
    if type(kept) is tuple and len(kept) == 2 and kept[0] == stamp and type(kept[1]) is tuple \
            and all(type(n) is str for n in kept[1]):
        _folders_used.add(folder)
        return frozenset(kept[1])
    return None


def put_folder_links(folder: str, stamp: tuple[int, ...], links: frozenset[str]) -> None:
    """Remember which entries of ``folder`` are links at ``stamp`` (``folder_links``); written at exit."""
    global _registered
    if _cache_dir() is None:
        return
    with _lock:
        _folders_new[folder] = entry = (tuple(stamp), tuple(sorted(links)))
        if _folders is not None:
            _folders[folder] = entry
        if not _registered:
            _registered = True
            atexit.register(flush)


#: the kinds ``origins.kinds_of`` may answer, and None (asked afresh)
_KINDS = frozenset(("user", "pkg", "stdlib", "skip", None))


def text_digest(text: str) -> str:
    """An xxh3-128 of ``text`` (what a batch of ``origins.kinds_of`` is keyed by)."""
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))


def _kinds_file(key: str) -> str:
    return _in_cache(f"{key}.{_analysis_salt()}.kinds.marshal")


def kept_kinds(key: str) -> tuple[tuple[str | None, ...], tuple[Any, ...]] | None:
    """(the answers, the folders with the stamps that placed them) of the batch of ``origins.kinds_of``
    keyed ``key``, as some process kept them (``keep_kinds``), or None. One small file a batch (a
    script's set of packages): a process reads the one it asks about, and no folder's file when
    every answer is kept."""
    if _cache_dir() is None:
        return None
    try:
        data = marshal.loads(read_bytes(_kinds_file(key)))
        # (the folders' shape is the caller's to check: it asks each, and a damaged one is a miss)
        if type(data) is tuple and len(data) == 4 and data[0] == _FORMAT and data[1] == key \
                and type(data[2]) is tuple and type(data[3]) is tuple and set(data[2]) <= _KINDS:
            return data[2], data[3]
    except FileNotFoundError:
        pass  # never asked here (or the cache was cleared)
    except (OSError, EOFError, ValueError, TypeError) as e:  # unreadable, damaged (marshal) or another format
        _debug("code cache: kinds %s unreadable: %r", key, e)
    return None


def keep_kinds(key: str, kinds: tuple[str | None, ...], proof: tuple[tuple[str, Any], ...]) -> None:
    """Keep the answers of a batch of ``origins.kinds_of`` (``kept_kinds``); written at exit."""
    global _registered
    if _cache_dir() is None:
        return
    with _lock:
        _kinds_new[key] = (tuple(kinds), tuple(proof))
        if not _registered:
            _registered = True
            atexit.register(flush)


def _entries(path: str) -> list | None:
    """The in-process record of ``path``'s cached analyses, read from disk on first use."""
    rec = _files.get(path)
    if rec is not None:
        return rec
    key = _stat_key(path)
    if key is None:
        return None  # no file to key by (exec, a deleted module): not cached
    entries: dict[Any, Any] = {}
    try:
        data = marshal.loads(read_bytes(_file_of(path)))
        if type(data) is tuple and len(data) == 4 and data[0] == _FORMAT and data[1] == path \
                and tuple(data[2]) == key and type(data[3]) is dict:
            entries = data[3]
    except FileNotFoundError:  # not analysed yet: start empty
        pass
    except (OSError, EOFError, ValueError, TypeError):  # unreadable, damaged (marshal) or another format: start empty
        swallowed("codegraph.code_cache: _entries")
    rec = _files[path] = [key, entries, False]
    return rec


def fingerprint(code: types.CodeType) -> str:
    """xxh3 of ``marshal.dumps(code, 2)``: every field of the code object and of
    the code nested in it (instructions, names, constants, flags, line and
    exception tables), serialised in C. Format 2, because from format 3 on marshal
    writes a back-reference for any object whose reference count is above one, so
    the same code serialised differently in a long-lived process that happened to
    share a constant (a test run's worker missed the cache that way). A frozenset's
    order still follows salted string hashes: that is a cache miss, never a wrong
    hit, since different code never serialises alike."""
    return xxhash.xxh3_128_hexdigest(marshal.dumps(code, 2))


def get(code: types.CodeType) -> tuple[str, str, frozenset, tuple] | None:
    """(digest, excerpt, refs, dynamic) analysed by some process for this very code, or None."""
    if _cache_dir() is None:
        return None
    path = code.co_filename
    with _lock:
        rec = _entries(path)
        if rec is None:
            return None
        e = rec[1].get((getattr(code, "co_qualname", code.co_name), code.co_firstlineno))
    if e is None or e[0] != fingerprint(code):
        stats["miss"] += 1
        return None
    try:
        out = e[1], e[2], frozenset(e[3]), tuple(e[4])
    except (IndexError, TypeError):  # an entry of another shape (a damaged or older file)
        swallowed("codegraph.code_cache: get")
        stats["miss"] += 1
        return None
    stats["hit"] += 1
    return out


def put(code: types.CodeType, digest: str, source: str, refs: frozenset, dynamic: tuple) -> None:
    """Remember an analysis; written to disk at exit."""
    global _registered
    if _cache_dir() is None:
        return
    path = code.co_filename
    with _lock:
        rec = _entries(path)
        if rec is None or _stat_key(path) != rec[0]:
            return  # the file changed since this process keyed it: its excerpt may not match
        rec[1][(getattr(code, "co_qualname", code.co_name), code.co_firstlineno)] = \
            (fingerprint(code), digest, source, tuple(refs), tuple(dynamic))
        rec[2] = True
        if not _registered:
            _registered = True
            atexit.register(flush)


def flush() -> None:
    """Write the files that gained entries (at exit; best effort, never raises)."""
    if _cache_dir() is None:
        return
    with _lock:
        dirty = [(p, rec) for p, rec in _files.items() if rec[2]]
        for _, rec in dirty:
            rec[2] = False
        sites = list(_sites_new.items())
        _sites_new.clear()
        batches = list(_kinds_new.items())
        _kinds_new.clear()
        folders = dict(_folders_new)
        _folders_new.clear()
        used = sorted(_folders_used)
    for path, (digest, found) in sites:
        _write(_file_of(path, ".sites"), (_FORMAT, path, digest, found))
    for key, (kinds, proof) in batches:
        _write(_kinds_file(key), (_FORMAT, key, kinds, proof))
    if folders:  # (merged into what other processes wrote meanwhile: this process's own first)
        kept = _read_folders()
        for folder in [*(f for f in used if f in kept), *kept]:
            if len(folders) >= FOLDERS_MAX:
                break
            folders.setdefault(folder, kept[folder])
        _write(_folders_file(), (_FOLDERS_FORMAT, dict(list(folders.items())[:FOLDERS_MAX])))
    for path, (key, entries, _) in dirty:
        _write(_file_of(path), (_FORMAT, path, key, dict(entries)))


def _write(final: str, data: tuple) -> None:
    """``data`` into ``final`` atomically (temporary file + rename); best effort, never raises."""
    tmp = f"{final}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(final), exist_ok=True)
        with open(tmp, "wb") as f:
            marshal.dump(data, f)
        os.replace(tmp, final)
    except (OSError, ValueError) as e:  # (ValueError: marshal refuses a value)
        _debug("code cache: could not write %s: %s", final, e)
        try:
            os.unlink(tmp)
        except OSError:  # (never made, or gone)
            swallowed("codegraph.code_cache: _write")


def clear() -> None:
    """Forget what this process read (tests); files on disk stay."""
    with _lock:
        _files.clear()
        _sites_new.clear()
        _kinds_new.clear()
        _folders_new.clear()
        _folders_used.clear()
    stats.update(hit=0, miss=0)
    site_stats.update(hit=0, miss=0)
    global _dir, _salt, _folders
    _dir = None
    _salt = None
    _folders = None
