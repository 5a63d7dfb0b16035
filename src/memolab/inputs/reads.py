"""What a memoized body consumed besides its arguments: files it read by path, and the
evaluations of other memoized functions it used (docs/cache-rules.md, "Files read by path").

A body that opens ``"data/rows.csv"`` by path is keyed by the path string, not by the rows:
without more, the file's next version would be answered with the old result. So while a
body runs, the files it reads are recorded, stamped (size, mtime_ns, inode; a content digest
where cheap) and stored with its evaluation (``snapshot["reads"]``); a hit first checks the
stamps, and a changed, deleted or newly created file makes it a miss that recomputes and
replaces the row (``why`` says "data/rows.csv changed ...").

**How reads are seen.** One process-wide ``sys.addaudithook`` (an audit hook can never be
removed, so it is installed once, lazily, when the first memoized body starts) watches the
``open`` event (``open``, ``io.open``, ``os.open``, and everything built on them: numpy,
pandas, ``torch.load``, pickle, PIL, json, yaml ...), the ``os.listdir``/``os.scandir`` events
(a dataset folder whose listing changes: ``glob``, ``os.walk``, ``Path.iterdir``) and the
events of the calls that change files (``os.remove``, ``os.rename``, ``os.mkdir``,
``os.rmdir``, ``os.truncate``). Its first test is whether any body is running in this
process (a dict's truthiness): the cost with none running is one Python call per audit event.

**Whose read it is.** The evaluation computing in the current context (a ``ContextVar``:
an asyncio task's body owns its reads); a read from a context with none (a thread the body
started, a thread pool) is recorded for every body running in the process at that moment:
too much at worst (a spurious miss later), never too little.

**What is not a read.** Files the body opened for writing, created, renamed or removed
(its own outputs), the interpreter's and installed packages' files, the source and bytecode
of modules it imported (the code digest covers code), ``/proc``, ``/sys``, ``/dev``, and
memolab's own store files.

**Nested calls.** A memoized call made inside a body hands its own record (and itself: its
function, code digest with ``version``, start time) to the body that made it, hit or miss, so
a caller's record holds everything it consumed, transitively; a caller's hit checks each
file stamp and each evaluation it used (the inner function's current code and ``version``,
its ``max_age``/``validate``) in O(items), one ``stat`` per file.

**Stamps across machines.** A path inside the workspace is recorded relative to it, and a
relative path as given (it is resolved against the working directory at the hit, as the body
would); anything else is absolute. A stamp whose ``stat`` differs (another machine, a
``git checkout``) is settled by the content digest, recorded for files up to
``DIGEST_MAX`` bytes; a larger file whose stamp differs is a miss.

The hit's side (``stale``: the record judged, the current definition of each memoized function
``register``-ed) is ``memolab.inputs.readcheck``.

Not seen: reads in other processes (``DataLoader`` workers, ``multiprocessing``), files
opened by C/C++ code that bypasses Python's ``open`` (``pyarrow`` memory maps, OpenCV,
``sqlite3``, ``h5py``'s own driver), and anything read over the network. Pass such inputs
as ``memolab.File``/``memolab.Dir`` arguments: that is the way to say "by content".
"""
from __future__ import annotations

import contextvars
import functools
import json
import os
import sys
import threading
import time
from typing import Any

from ..hashing import files
from . import expiry
from .readcheck import RACY_NS, live, names_digest, parse, record_text, register, stale

__all__ = ["Recorder", "begin", "end", "register", "consumed", "stale", "record_text", "active", "RECORDING", "note",
           "DIGEST_MAX", "MAX_ITEMS"]



def _debug(msg: str, *args: Any) -> None:
    """A swallowed exception, said at DEBUG (``logging`` imported only then: ``import memolab`` stays lean)."""
    import logging

    logging.getLogger("memolab").debug(msg, *args, exc_info=True)


#: files up to this size get a content digest (their stamp then survives another machine, a copy)
DIGEST_MAX = 16 << 20
#: a record of more files, folders and evaluations than this is not kept: the result is not stored
MAX_ITEMS = 20_000

_rec: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("memolab_reads", default=None)
#: the same variable by a public name: a repeat hit asks ``RECORDING.get() is not None`` (``active``)
#: without a call (``calls/fasthits``)
RECORDING = _rec
#: every recorder whose body runs now, in any thread: id -> recorder
_active: dict[int, Recorder] = {}
_lock = threading.Lock()
_hooked = False
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_CHANGES = frozenset(("os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.truncate"))
_EVENTS = frozenset(("open", "os.listdir", "os.scandir")) | _CHANGES
#: memolab's own layers: what they open inside a body (a nested call's lookup, load and store,
#: its code digest, the settings) is memolab's, not the body's. Whole packages and single modules
#: by their exact dotted names, matched at a dot (``is_own``): a bare prefix test let
#: ``memolab.call`` claim ``memolab.calls.lifecycle``, the driver that runs the body, so a body's
#: own reads went unrecorded after the package's modules moved (a stale hit on a changed file).
#: The driver (``calls.lifecycle``), the decorator's call path into the body and the integrations
#: running the body's objects are the body's. ``tests/test_reads.py`` checks every name here names
#: a module that exists.
OWN = ("memolab.settings", "memolab.store", "memolab.team", "memolab.hashing", "memolab.codegraph",
       "memolab.pickling", "memolab.tracking", "memolab.calls.call", "memolab.calls.rows", "memolab.calls.memo",
       "memolab.calls.explain", "memolab.calls.report", "memolab.calls.summary", "memolab.calls.acceptance",
       "memolab.inputs.upstream", "memolab.inputs.implicit", "memolab.inputs.globalrng", "memolab.inputs.rngwrap",
       "memolab.inputs.rnglibs", "memolab.inputs.threadframes", "memolab.inputs.readcheck", "memolab.ui.runs")
_OWN_PREFIXES = tuple(m + "." for m in OWN)
_OWN_NAMES = frozenset(OWN)


def is_own(module: str) -> bool:
    """Is ``module`` (a dotted name) one of memolab's own layers (``OWN``)?"""
    return module in _OWN_NAMES or module.startswith(_OWN_PREFIXES)


#: modules of the import system: what they open and list is looking for modules
_IMPORT_SYSTEM = frozenset(("importlib._bootstrap_external", "importlib._bootstrap", "zipimport", "pkgutil",
                            "importlib.metadata", "importlib.resources._common", "linecache"))
_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd")


class Recorder:
    """What one running body consumed (files by path, folders listed, evaluations used)."""

    __slots__ = ("files", "absent", "dirs", "written", "made", "calls", "merged", "started", "keyed",
                 "__weakref__")

    def __init__(self) -> None:
        #: abspath -> (path as given, stat key, when stamped ns), stamped at the first open
        self.files: dict[str, tuple[str, tuple[int, int, int, int] | None, int]] = {}
        #: abspath -> path as given: opened for reading and did not exist
        self.absent: dict[str, str] = {}
        #: abspath -> (path as given, names digest, mtime_ns, ino, when stamped ns)
        self.dirs: dict[str, tuple[str, str, int, int, int]] = {}
        #: what the body opened for writing, created, renamed or removed (and their folders)
        self.written: set[str] = set()
        #: the folders it created (its own: their listing is no input)
        self.made: set[str] = set()
        #: (fn, code, started) -> [fn, code, started, finished, max_age, id]
        self.calls: dict[tuple[Any, ...], list[Any]] = {}
        #: finished records of nested calls (stored form), merged at the end
        self.merged: list[dict[str, Any]] = []
        self.started = expiry.now()
        #: its call's own ``File`` arguments (and ``Dir`` folders, ending in a separator): keyed by content
        self.keyed: tuple[str, ...] = ()


# -- the audit hook ------------------------------------------------------------------------

def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _active and event in _EVENTS:  # (nothing running: one dict test per event)
        try:
            _seen(event, args)
        except Exception:  # an audit hook that raises fails the operation it audits: never
            _debug("memolab.inputs.reads: audit event %s not recorded", event)


# What is installed is not ``_hook`` itself but a ``functools.partial`` whose function is swapped
# (``__setstate__``, under ``_lock``): ``_hook`` while a body runs, and while none does a C
# function that takes the two arguments and runs no Python (``dict.get``: it returns ``args``,
# and a hook's return is ignored). An audit hook cannot be removed, and a Python one costs a
# Python call on every audited event of the process (each ``open``, import, ``__code__`` read:
# a repeat hit reads one), for nothing while no body is recording; the gate costs a C call.
_IDLE: Any = {}.get
_gate: Any = functools.partial(_IDLE)  # (``__setstate__``: a method typeshed does not list)


def _install() -> None:
    global _hooked
    with _lock:
        if not _hooked:
            sys.addaudithook(_gate)
            _hooked = True


def _gate_to(fn: Any) -> None:
    """Point the installed hook at ``fn`` (called under ``_lock``, as ``_active`` changes)."""
    _gate.__setstate__((fn, (), None, None))


def _text(p: Any) -> str | None:
    if isinstance(p, str):
        return p
    if isinstance(p, bytes):
        return os.fsdecode(p)
    if isinstance(p, os.PathLike):
        q = os.fspath(p)
        return q if isinstance(q, str) else os.fsdecode(q)
    return None  # a file descriptor: its open was seen, or it is not a file by path


def _seen(event: str, args: tuple[Any, ...], own: bool = True) -> None:
    """``own``: reads memolab makes for itself are told from the body's (``_by_memolab``)."""
    rec = _rec.get()
    targets = (rec,) if rec is not None else tuple(_active.values())  # another thread: every body
    if event == "open":
        given = _text(args[0])
        if given is None:
            return
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 else None
        writes = bool(flags & _WRITE_FLAGS) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
        where = os.path.abspath(given)
        if _ignored(where) or (own and _by_memolab()):
            return
        if writes:
            for r in targets:
                r.written.add(where)
            return
        stamp: tuple[int, int, int, int] | None
        try:
            st = os.stat(where)
            stamp = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        except FileNotFoundError:
            stamp = None
        except OSError:
            return  # not a file the body can read either
        now = time.time_ns()
        for r in targets:
            if where in r.files or where in r.absent:
                continue
            if stamp is None:
                r.absent[where] = given
            elif os.path.isdir(where):
                continue
            else:
                r.files[where] = (given, stamp, now)
        return
    if event in _CHANGES:
        paths = [_text(a) for a in args[:2] if not isinstance(a, int)] if event == "os.rename" else [_text(args[0])]
        for p in paths:
            if p is None:
                continue
            where = os.path.abspath(p)
            for r in targets:
                r.written.add(where)
                r.written.add(os.path.dirname(where))  # its folder's listing is the body's doing too
                if event == "os.mkdir":
                    r.made.add(where)
        return
    # os.listdir / os.scandir: a folder's listing
    given = _text(args[0]) if args and args[0] is not None else "."
    if given is None:
        return
    where = os.path.abspath(given)
    if _ignored(where) or all(where in r.dirs for r in targets) or (own and _by_memolab()):
        return
    for r in targets:
        r.dirs.setdefault(where, (given, "", 0, 0, 0))  # (placeholder: the listing below is audited too)
    stamp2 = _dir_stamp(where)
    if stamp2 is None:
        gone = not os.path.lexists(where)  # (a file listed as a folder: the body's error, not an input)
        for r in targets:
            if where in r.dirs and r.dirs[where][1] == "":
                del r.dirs[where]
                if gone:
                    r.absent.setdefault(where, given)
        return
    for r in targets:
        if r.dirs.get(where, ("", ""))[1] == "":
            r.dirs[where] = (given, *stamp2)


def _by_memolab() -> bool:
    """Is this memolab's own work (a nested call's store reads, its code digest, a checkpoint)
    rather than the body's? The nearest memolab frame above the event says: one of memolab's
    own layers (``OWN``) is memolab's; the driver that called the body (``lifecycle``) or an
    integration running the body's objects (a loader, a dataset) is the body's."""
    try:
        f: Any = sys._getframe(3)  # (above _by_memolab, _seen, _hook)
    except ValueError:
        return False
    while f is not None:
        name = f.f_globals.get("__name__")
        if name in _IMPORT_SYSTEM:
            return True  # the import system looking for a module (its code is in the code digest)
        if type(name) is str and name.startswith("memolab") and name != "memolab.inputs.reads":
            return is_own(name)
        f = f.f_back
    return False


def note(path: Any) -> None:
    """``path`` is an input of the memoized bodies running now (in this context, else all):
    for integrations that see a library decide from a file's metadata alone whether to read it
    (HF ``datasets`` reuses its cache of a local data file by its mtime, ``memolab.hf.cache``)."""
    if _active:
        given = _text(path)
        if given is not None:
            _seen("open", (given, "r", os.O_RDONLY), own=False)


def _file_argument(path: str, folder: bool) -> None:
    """A ``memolab.File``/``Dir`` argument was hashed: a running body making that call consumed
    it (a file; a folder's listing)."""
    if _rec.get() is not None:
        _seen("os.listdir" if folder else "open", (path, "r", os.O_RDONLY), own=False)


files.on_file = _file_argument


def _dir_stamp(where: str) -> tuple[str, int, int, int] | None:
    """(digest of the sorted names, mtime_ns, ino, when) of a folder, or None if it is not one."""
    try:
        st = os.stat(where)
        names = sorted(os.listdir(where))
    except OSError:
        return None
    return names_digest(names), st.st_mtime_ns, st.st_ino, time.time_ns()


_skip: tuple[str, ...] | None = None
_roots: set[str] = set()


def _skipped() -> tuple[str, ...]:
    """Prefixes never recorded: the interpreter's and installed packages' files, kernel files,
    memolab's stores."""
    global _skip
    if _skip is None:
        import site
        import sysconfig

        out = {"/proc/", "/sys/", "/dev/"}
        paths = sysconfig.get_paths()
        for name in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude"):
            if paths.get(name):
                out.add(os.path.join(os.path.abspath(paths[name]), ""))
        try:
            extra = [*site.getsitepackages(), site.getusersitepackages()]
        except AttributeError:  # (some embedded interpreters lack them)
            _debug("memolab.inputs.reads: no site-packages list")
            extra = []
        for p in extra:
            out.add(os.path.join(os.path.abspath(p), ""))
        out.discard(os.sep)
        _skip = tuple(sorted(out))
    return _skip


def exclude(root: Any) -> None:
    """Nothing below ``root`` is a read of a body: a store's folder (memolab's own files), a
    library's cache of what it derives from inputs it reports (``note``)."""
    global _skip
    p = os.path.join(os.path.abspath(os.fspath(root)), "")
    if p not in _roots:
        _roots.add(p)
        _roots.add(os.path.join(os.path.realpath(p), ""))
        _skip = tuple(sorted(set(_skipped()) | _roots))


def _ignored(where: str) -> bool:
    return where.startswith(_skipped())


# -- a body's record -----------------------------------------------------------------------

def active() -> bool:
    """Is a body recording in this context (a nested call then hands it what it consumed)?"""
    return _rec.get() is not None


def begin(store_root: Any = None, keyed: Any = ()) -> tuple[Recorder, contextvars.Token[Recorder | None]]:
    """A body starts: its reads are recorded until ``end``. ``keyed``: the absolute paths of its
    call's ``File`` arguments, and of its ``Dir`` arguments' folders (ending in a separator): the
    key holds their content, so they are no reads to check (``files.encoded_since``)."""
    if not _hooked:
        _install()
    if store_root is not None:
        exclude(store_root)
    rec = Recorder()
    rec.keyed = tuple(keyed)
    token = _rec.set(rec)
    with _lock:
        if not _active:
            _gate_to(_hook)  # (before the body runs: its first read is seen)
        _active[id(rec)] = rec
    return rec, token


def end(rec: Recorder, token: contextvars.Token[Recorder | None]) -> tuple[dict[str, Any] | None, str | None]:
    """The body ended: (its record in stored form, or None when it consumed nothing; why it must
    not be stored, or None). A file it read that changed while it ran, or a record too large to
    keep, is a reason not to store the result (it belongs to no one version of its inputs)."""
    with _lock:
        _active.pop(id(rec), None)
        if not _active:
            _gate_to(_IDLE)
    try:
        _rec.reset(token)
    except ValueError:  # (a token of another context: the value it replaced is set back)
        _rec.set(None if token.old_value is contextvars.Token.MISSING else token.old_value)
    if not (rec.files or rec.absent or rec.dirs or rec.calls or rec.merged):
        return None, None
    try:
        return _finish(rec)
    except Exception as e:  # what it read cannot be told: its result must not be kept
        _debug("memolab.inputs.reads: the record of a body failed")
        return None, f"what it read by path could not be recorded ({type(e).__name__}: {e})"


def _finish(rec: Recorder) -> tuple[dict[str, Any] | None, str | None]:
    written = set(rec.written)
    place = _Places()
    out: dict[str, list[Any]] = {"files": [], "absent": [], "dirs": [], "calls": []}
    unstable: str | None = None
    modules = None
    pending: list[Any] = []
    # (copies: a thread the body started may still be reading, and the dicts are shared with it)
    keyed = rec.keyed
    for where, (given, stamp, at) in list(rec.files.items()):
        if where in written or stamp is None or (keyed and _keyed(where, keyed)):
            continue
        if where.endswith(_CODE_SUFFIXES):
            if modules is None:
                modules = _module_files()
            if where in modules or "__pycache__" in where:
                continue  # an import: its code is in the code digest
        size, mtime, ino, ctime = stamp
        digest = None
        try:
            st = os.stat(where)
            if (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) == stamp and (
                    size <= DIGEST_MAX or max(mtime, ctime) + RACY_NS > at):
                d = files.cached_digest(where, st)  # (an unchanged file: from the stat cache)
                if d is None:
                    d = files.file_digest(where, pending)
                    st = os.stat(where)  # (read now: still the file the body read?)
                digest = d.hex()
        except OSError:
            unstable = unstable or f"{given} was removed while the function ran"
            continue
        if (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) != stamp:
            unstable = unstable or f"{given} changed while the function ran"
            continue
        out["files"].append([given, place.of(given, where), size, mtime, ino, ctime, at, digest])
    if pending:
        files.remember_digests(pending)
    for where, given in list(rec.absent.items()):
        if where in written or _ignored(where) or (keyed and _keyed(where, keyed)):
            continue
        if os.path.lexists(where):
            unstable = unstable or f"{given} appeared while the function ran"
            continue
        out["absent"].append([given, place.of(given, where)])
    for where, (given, names, mtime, ino, at) in list(rec.dirs.items()):
        if not names or where in rec.made or (keyed and _keyed(os.path.join(where, ""), keyed)):
            continue
        if where in written:
            now = _dir_stamp(where)  # the body changed this folder: what it left is the stamp
            if now is None:
                continue
            names, mtime, ino, at = now
        else:
            now = _dir_stamp(where)
            if now is None or now[0] != names:
                unstable = unstable or f"the listing of {given} changed while the function ran"
                continue
        out["dirs"].append([given, place.of(given, where), names, mtime, ino, at])
    out["calls"] = list(rec.calls.values())
    for m in list(rec.merged):
        _merge(out, m)
    kept = {k: _unique(v) for k, v in out.items() if v}
    if sum(len(v) for v in kept.values()) > MAX_ITEMS:
        return None, (f"it read {sum(len(v) for v in kept.values()):,} files, folders and evaluations by path "
                      f"(more than {MAX_ITEMS:,} are not recorded); pass its data as memolab.Dir/File arguments")
    return kept or None, unstable


def _keyed(where: str, keyed: tuple[str, ...]) -> bool:
    """Is ``where`` one of the call's own ``File`` arguments, or inside one of its ``Dir`` folders?"""
    return where in keyed or where.startswith(tuple(k for k in keyed if k.endswith(os.sep)))


def _unique(items: list[list[Any]]) -> list[list[Any]]:
    seen: set[Any] = set()
    out = []
    for it in items:
        try:
            k: Any = tuple(it)
            hash(k)
        except TypeError:  # (a record another memolab wrote, holding lists)
            k = json.dumps(it, default=str)
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def _merge(out: dict[str, list[Any]], rec: dict[str, Any]) -> None:
    for k in ("files", "absent", "dirs", "calls"):
        got = rec.get(k)
        if isinstance(got, list):
            out[k].extend(x for x in got if isinstance(x, list))


def _module_files() -> set[str]:
    out = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str):
            out.add(os.path.abspath(f))
    return out


class _Places:
    """How a path is recorded: relative as given (the hit resolves it against its working
    directory, as the body would), inside the workspace relative to it (``ws:``), else absolute."""

    def __init__(self) -> None:
        self.ws: str | None = None

    def of(self, given: str, where: str) -> str:
        if not os.path.isabs(given):
            return given
        if self.ws is None:
            from ..settings.config import find_workspace

            self.ws = os.path.join(str(find_workspace()), "")
        if where.startswith(self.ws):  # (the workspace is a real path: a path through a link stays absolute)
            return "ws:" + where[len(self.ws):]
        return where


# -- nested calls --------------------------------------------------------------------------

def consumed(key: Any, started: Any, finished: Any, rid: Any, record: Any) -> None:
    """The evaluation of ``key`` (computed, loaded or served from memory) was used by the body
    running in this context, with what it consumed (``record``: stored form, text or None)."""
    rec = _rec.get()
    if rec is None:
        return
    fn, code = key[0], key[1]
    m = live(fn)
    max_age = getattr(m, "max_age", None)
    k = (fn, code, started)
    if k not in rec.calls:
        rec.calls[k] = [fn, code, started, finished, max_age, rid]
    if isinstance(record, str):
        record = parse(record)
    if isinstance(record, dict):
        rec.merged.append(record)
