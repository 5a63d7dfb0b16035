"""Where the store lives and the process-wide settings.

Resolution order for the store location: ``memolab.configure(store=...)``,
then ``$MEMOLAB_STORE``, then ``<workspace>/.memolab`` where the workspace is the
nearest directory at or above the current one holding ``pyproject.toml`` or
``.git`` (else the current directory itself). An empty ``MEMOLAB_STORE`` counts
as unset (the shell convention ``MEMOLAB_STORE= cmd``). A value that looks like
a URL (``postgresql://…``, ``s3://…``) is refused with ``StoreConfigError``
naming it: no such backend ships, and a directory named ``postgresql:`` would
silently be created instead. ``file:///path`` is accepted as ``/path``.

Every other ``MEMOLAB_*`` variable with a value to check is parsed and checked here
(``ENV``, ``env_setting``, ``read_env``): a bad value is reported in one line and its
default used; docs/settings.md has the table.
"""
from __future__ import annotations

import numbers
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from ..errors import StoreConfigError, swallowed
from .files import read_fd

_lock = threading.Lock()

# ``os.environ.get`` costs about 1 µs (two Python-level layers encode the name and decode
# the value), and a hit reads several variables (the store, the team store, the HMAC key)
# to notice a change made mid-process: more than a tenth of a hit read from the store.
# On POSIX ``os.environ`` keeps the bytes in ``_data``, a plain dict that every change made
# through ``os.environ`` (``os.environ[k] = v``, ``del``, ``putenv`` via it, monkeypatch)
# writes through to; reading it directly costs 30 ns. Elsewhere (Windows keeps upper-cased
# str keys) the plain lookup.
_ENV_DATA = getattr(os.environ, "_data", None)
if os.name == "posix" and isinstance(_ENV_DATA, dict) and isinstance(next(iter(_ENV_DATA), b""), bytes):
    environ_bytes: Callable[[bytes], bytes | None] = _ENV_DATA.get

    def environ_str(name: bytes) -> str | None:
        """``os.environ.get(name)``: its bytes decoded as ``os.environ`` decodes them (the file system
        encoding, ``surrogateescape``), where ``os.environ.get`` makes three Python calls a read."""
        raw = environ_bytes(name)
        return None if raw is None else os.fsdecode(raw)
else:  # pragma: no cover - not POSIX
    def environ_bytes(name: bytes) -> bytes | None:
        """``$name`` as bytes, or None."""
        v = os.environ.get(name.decode("ascii"))
        return None if v is None else v.encode("utf-8", "surrogateescape")

    def environ_str(name: bytes) -> str | None:
        """``os.environ.get(name)``."""
        return os.environ.get(name.decode("ascii"))

# ``os.getpid()`` is a system call (glibc stopped caching it), and a hit asks twice (the
# store cache and the connection are per process). The pid changes only across a fork,
# and every fork made from Python runs ``after_in_child``; the handler is registered
# before any of our connections or stores can exist.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """This process's id, without a system call."""
    return _pid


VERSION_SENSITIVITIES = ("exact", "minor", "major", "ignore")
STORE_SHARINGS = ("user", "group")


@dataclass(frozen=True)
class Settings:
    store: str | None = None
    #: how much of a third-party package's version joins the code digest
    version_sensitivity: str = "minor"
    #: seconds between lease heartbeats; a lease is stale after ``lease_ttl``
    heartbeat: float = 1.0
    lease_ttl: float = 10.0
    #: a miss of a function whose every computation in this process (of its current
    #: code, in this store) took less than this many seconds takes no lease: the lease's
    #: transaction would cost more than two processes computing it at once (0: always lease)
    lease_free_below: float = 0.001
    #: warn (True) or stay silent (False) when a result cannot be stored
    warn_unstorable: bool = True
    #: who may use a store this process creates: "user" (0700/0600, the default)
    #: or "group" (group-writable with setgid directories, for a team on one machine)
    store_sharing: str = "user"
    #: the team store (docs/team.md): the team index (``postgresql://…``, or
    #: ``sqlite:///path`` for one host) and the team blob store (``s3://bucket/prefix``,
    #: ``file:///shared/dir``). None: read from ``$MEMOLAB_REMOTE``/``$MEMOLAB_REMOTE_BLOBS``,
    #: else from ``[tool.memolab]`` in the workspace's ``pyproject.toml``.
    remote: str | None = None
    remote_blobs: str | None = None
    #: seconds a team-store connection or request may take before we work offline
    remote_timeout: float = 10.0
    #: what memolab says on the ``memolab`` logger as calls run (``report``): 0 nothing, 1 what
    #: takes time (misses of functions not known to be quick, stores and loads of a second or
    #: more), 2 every call that is not a hit from this process's memory; None: 1, but 0 on a
    #: rank other than 0 of a distributed job (docs/logging.md, "What memolab says")
    verbose: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# -- MEMOLAB_* variables: every one with a value to check is parsed here, and only here -----
#
# A bad value in the environment is not the program's mistake and may reach every process
# of a job (workers inherit it): it must never crash ``import memolab``, a CLI command or a
# call after its body ran. So it is reported in one line on stderr (once per process, per
# variable and value) and the default is used. ``configure()`` is a call in the program:
# a bad value there raises ``ValueError``. docs/settings.md lists the same rules.

_OFF_WORDS = ("0", "off", "no", "false")
_ON_WORDS = ("1", "on", "yes", "true")


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class Number:
    """A number of ``unit`` from ``lo`` to ``hi`` (both included); ``integer``: whole numbers only."""
    lo: float
    hi: float
    unit: str
    integer: bool = False

    def _kind(self) -> str:
        return f"{'a whole number' if self.integer else 'a number'} of {self.unit}"

    def accepted(self) -> str:
        return f"{self._kind()} from {_num(self.lo)} to {_num(self.hi)}"

    def parse(self, raw: str) -> Any:
        try:
            v: Any = int(raw) if self.integer else float(raw)
        except ValueError:
            raise ValueError(f"is not {self._kind()}") from None
        # written so that NaN fails too (every comparison with it is False)
        if not self.lo <= v <= self.hi:
            raise ValueError("is out of range")
        return v

    def check(self, v: Any) -> Any:
        # bool is an int to Python, never a number of seconds to a person
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or (
                self.integer and not isinstance(v, numbers.Integral)):
            raise ValueError(f"is not {self._kind()}")
        # compared before float(): an int too large for a float must be refused, not overflow
        if not self.lo <= v <= self.hi:  # type: ignore[operator]  # numbers.Real/Integral: mypy has no arithmetic for the numbers ABCs
            raise ValueError("is out of range")
        return int(v) if self.integer else float(v)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (in the environment: any case, spaces around ignored)."""
    options: tuple[str, ...]

    def accepted(self) -> str:
        return "one of " + ", ".join(self.options)

    def parse(self, raw: str) -> str:
        return self.check(raw.lower())

    def check(self, v: Any) -> str:
        if v not in self.options:
            raise ValueError("is not an accepted value")
        return cast(str, v)  # one of the options


@dataclass(frozen=True)
class Switch:
    """On (True), off (False) or ``auto`` (None)."""

    def accepted(self) -> str:
        return f"{'/'.join(_ON_WORDS)} (on), {'/'.join(_OFF_WORDS)} (off) or auto"

    def parse(self, raw: str) -> bool | None:
        v = raw.lower()
        if v in _ON_WORDS:
            return True
        if v in _OFF_WORDS:
            return False
        if v == "auto":
            return None
        raise ValueError("is not on, off or auto")


@dataclass(frozen=True)
class Level:
    """A verbosity: 0 (off), 1 (on) or 2 (every call); ``configure()`` also takes True and False."""

    def accepted(self) -> str:
        return f"0, 1 or 2; {'/'.join(_OFF_WORDS[1:])} (0), {'/'.join(_ON_WORDS[1:])} (1)"

    def parse(self, raw: str) -> int:
        v = raw.lower()
        if v in ("0", "1", "2"):
            return int(v)
        if v in _OFF_WORDS:
            return 0
        if v in _ON_WORDS:
            return 1
        raise ValueError("is not a verbosity")

    def check(self, v: Any) -> int | None:
        if v is None:
            return None  # back to the default
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, numbers.Integral) and 0 <= v <= 2:  # type: ignore[operator]  # numbers.Real/Integral: mypy has no arithmetic for the numbers ABCs
            return int(v)
        raise ValueError("is not a verbosity")


@dataclass(frozen=True)
class Folder:
    """A directory (made absolute when read), an off word ("": disabled) or an on word (None: the default place)."""

    def accepted(self) -> str:
        return f"a directory, {'/'.join(_OFF_WORDS)} (off) or {'/'.join(_ON_WORDS)} (the default directory)"

    def parse(self, raw: str) -> str | None:
        v = raw.lower()
        if v in _OFF_WORDS:
            return ""
        if v in _ON_WORDS:
            return None
        return os.path.abspath(os.path.expanduser(raw))


@dataclass(frozen=True)
class EnvVar:
    name: str
    rule: Any  # Number, Choice, Switch or Folder: ``parse(raw)`` raises ValueError(why) for a bad value
    default: Any  # in effect when unset, empty or bad
    #: how messages and docs say the default (when its value alone does not say it)
    default_text: str | None = None
    #: the ``Settings`` field it sets (read once, at import), if any
    setting: str | None = None

    def describe_default(self, default: Any = None) -> str:
        d = self.default if default is None else default
        return self.default_text or _num(d)


@dataclass(frozen=True)
class SecondsOrOff:
    """A number of seconds from 0 to ``hi`` (0: off), or an off word (0)."""
    hi: float

    def accepted(self) -> str:
        return f"a number of seconds from 0 (off) to {_num(self.hi)}, or {'/'.join(_OFF_WORDS[1:])} (off)"

    def parse(self, raw: str) -> float:
        if raw.lower() in _OFF_WORDS:
            return 0.0
        return float(Number(0, self.hi, "seconds").parse(raw))


SECONDS_TTL = Number(0.01, 86400, "seconds")
SECONDS_HEARTBEAT = Number(0.001, 3600, "seconds")
SECONDS_LEASE_FREE = Number(0, 60, "seconds")
SECONDS_REMOTE = Number(0.1, 600, "seconds")
SECONDS_DRAIN = Number(0, 3600, "seconds")

ENV: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar("MEMOLAB_LEASE_TTL", SECONDS_TTL, 10.0, setting="lease_ttl"),
    # the default depends on the lease's TTL: see ``read_env``
    EnvVar("MEMOLAB_HEARTBEAT", SECONDS_HEARTBEAT, 1.0, setting="heartbeat"),
    EnvVar("MEMOLAB_LEASE_FREE_BELOW", SECONDS_LEASE_FREE, 0.001, setting="lease_free_below"),
    EnvVar("MEMOLAB_REMOTE_TIMEOUT", SECONDS_REMOTE, 10.0, setting="remote_timeout"),
    EnvVar("MEMOLAB_VERSION_SENSITIVITY", Choice(VERSION_SENSITIVITIES), "minor", setting="version_sensitivity"),
    EnvVar("MEMOLAB_STORE_SHARING", Choice(STORE_SHARINGS), "user", setting="store_sharing"),
    EnvVar("MEMOLAB_REMOTE_DRAIN", SECONDS_DRAIN, 10.0),
    EnvVar("MEMOLAB_REMOTE_CONCURRENCY", Number(1, 256, "requests", integer=True), 16),
    EnvVar("MEMOLAB_REMOTE_RANGED_GETS", Switch(), None, default_text="auto"),
    # a row over 16 MiB is 8 times SQLite's whole default page cache (2 MiB), which every lookup
    # walks through; results that big want memory maps and deduplication, which only blobs give
    EnvVar("MEMOLAB_INLINE_MAX", Number(0, 16 << 20, "bytes", integer=True), 32 << 10),
    EnvVar("MEMOLAB_HASH_THREADS", Number(1, 256, "threads", integer=True), None,
           default_text="automatic (the idle cores, at most 8)"),
    # None: 30 lease TTLs (300 s by default), a tenth of torch's own 30-minute collective timeout
    EnvVar("MEMOLAB_DIST_TIMEOUT", Number(1, 86400, "seconds"), None,
           default_text="30 × MEMOLAB_LEASE_TTL (300 s)"),
    EnvVar("MEMOLAB_CODE_CACHE", Folder(), None, default_text="$XDG_CACHE_HOME/memolab/code (~/.cache/memolab/code)"),
    EnvVar("MEMOLAB_VERBOSE", Level(), None, setting="verbose",
           default_text="1 (0 on ranks other than 0 of a distributed job)"),
    # auto: bars on a terminal (and in a Jupyter kernel) only; on: on any stderr; off: never
    EnvVar("MEMOLAB_PROGRESS", Switch(), None, default_text="auto"),
    EnvVar("MEMOLAB_PROGRESS_DELAY", Number(0, 3600, "seconds"), 2.0),
    # system metrics (CPU, memory, GPU) sampled during a memoized computation (tracking/system.py)
    EnvVar("MEMOLAB_SYSTEM_METRICS", SecondsOrOff(3600), 10.0),
)}

#: the checks ``configure()`` applies, by keyword
_CHECKS: dict[str, Any] = {v.setting: v.rule for v in ENV.values() if v.setting}

_BAD = object()
#: (variable, raw value) -> its value, or _BAD: a value is parsed (and reported) once
_parsed: dict[tuple[str, str], Any] = {}
_reported: set[tuple[str, ...]] = set()


def _report(key: tuple[str, ...], line: str) -> None:
    """``line`` on stderr, once per process for ``key``. Not ``warnings.warn``: that prints
    the file and source line of whoever imported memolab, two lines about the wrong place."""
    with _lock:
        if key in _reported:
            return
        _reported.add(key)
    err = sys.stderr
    if err is not None:  # pythonw, a daemon: nowhere to report
        try:
            err.write(line + "\n")
            err.flush()
        except (OSError, ValueError):
            swallowed("config: _report")


def _value(var: EnvVar, raw: str | None, default: Any) -> Any:
    if raw is None or not raw.strip():  # empty counts as unset (the shell's ``VAR= cmd``)
        return default
    v = _parsed.get((var.name, raw), None)
    if v is None:
        try:
            v = var.rule.parse(raw.strip())
        except ValueError as e:
            v = _BAD
            _report((var.name, raw), f"memolab: {var.name}={raw!r} {e}; accepted: {var.rule.accepted()}; "
                                     f"using the default {var.describe_default(default)}")
        if v is not None:  # None is a value (auto, the default place), too cheap to cache
            _parsed[(var.name, raw)] = v
    return default if v is _BAD else v


def env_setting(name: str) -> Any:
    """``$name`` as the rules above read it: its value, or its default when unset, empty or
    bad (a bad one reported on stderr once). Reads the environment afresh on every call:
    for settings used off the hit path (a connection's timeout, a large buffer's threads)."""
    var = ENV[name]
    return _value(var, os.environ.get(name), var.default)


def read_env() -> Settings:
    """The defaults, overridden by ``MEMOLAB_*`` variables (handy for workers and tests).

    The heartbeat's default is a tenth of the lease's TTL, at most 1 s; an explicit one
    not below the TTL would let a live lease go stale between two beats: reported, and
    the default used. (``configure()`` takes the two as given: a test may want stale leases.)"""
    changes = {v.setting: env_setting(v.name) for v in ENV.values() if v.setting and v.name != "MEMOLAB_HEARTBEAT"}
    ttl = changes["lease_ttl"]
    beat_default = min(1.0, ttl / 10)
    hb = ENV["MEMOLAB_HEARTBEAT"]
    raw = os.environ.get(hb.name)
    beat = _value(hb, raw, beat_default)
    if beat >= ttl:
        _report((hb.name, str(raw), str(ttl)),
                f"memolab: {hb.name}={raw!r} is not below the lease time-to-live ({_num(ttl)} s, MEMOLAB_LEASE_TTL): "
                f"a live lease would go stale between two heartbeats; accepted: {hb.rule.accepted()}, below "
                f"MEMOLAB_LEASE_TTL; using the default {_num(beat_default)}")
        beat = beat_default
    return replace(Settings(), heartbeat=beat, **changes)


_settings = read_env()
_generation = 0  # bumped on every configure() so cached stores are dropped
#: called as ``fn(old, new)`` after every ``configure()`` (the store module retires the team
#: stores a new remote replaces); registered by importers, so config imports nothing of theirs
on_configure: list[Callable[[Settings, Settings], None]] = []


#: Linux's ``getcwd`` is the path of the working folder's own entries, up to the root: no link
#: on it (a link is an entry of its own, never a folder's parent), absolute and normal, so
#: ``os.path.realpath`` of it is itself (an unreachable or removed folder raises instead)
_CWD_IS_REAL = sys.platform.startswith("linux")


#: what marks a workspace folder, asked in this order
_MARKERS = ("pyproject.toml", ".git")


def find_workspace(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (the working folder) holding a ``pyproject.toml`` or a
    ``.git``, else ``start`` itself: its real path."""
    return Path(workspace_dir(start))


def workspace_dir(start: Path | None = None) -> str:
    """``find_workspace``'s folder as a string (the team store's settings read from it: no Path made)."""
    # os.path, not pathlib: a third of the cost, and a script's first call runs this twice
    # (the store's location, then the team store's settings in [tool.memolab])
    cwd = os.getcwd() if start is None else ""
    # (Linux's working folder is its real path: no ``lstat`` a folder to resolve it)
    here = cwd if _CWD_IS_REAL and cwd[:1] == "/" else os.path.realpath(start if start is not None else cwd)
    if os.sep != "/" or here[:1] != "/" or here[:2] == "//":  # (POSIX keeps a leading ``//`` as it is)
        return workspace_walk(here)
    # A POSIX path, absolute and normal (``getcwd``'s or ``realpath``'s: no ``//``, no trailing ``/``):
    # ``os.path.join(d, name)`` is ``d + "/" + name`` (``d + name`` at the root) and ``os.path.dirname(d)``
    # is ``d`` up to its last ``/`` (the root's is itself), and ``os.path.exists`` a ``stat``: the same
    # folders asked in the same order, without a Python call each (a fresh process walks up to ``/``)
    d = here
    while True:
        head = d if d == "/" else d + "/"
        for marker in _MARKERS:
            try:
                os.stat(head + marker)
            except (OSError, ValueError):
                continue
            return d
        if d == "/":
            return here
        d = d[:d.rindex("/")] or "/"


def workspace_walk(here: str) -> str:
    """``workspace_dir``'s search from real path ``here``, for any path (``os.path``: a Python call a
    name and a folder): what ``workspace_dir``'s walk of a POSIX path answers, asking the same names
    in the same order (tests/test_store_opening_paths.py compares them)."""
    d = here
    while True:
        if any(os.path.exists(os.path.join(d, marker)) for marker in _MARKERS):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return here
        d = parent


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _store_location(value: str, source: str) -> Path:
    """A configured store location as a directory path; URL-looking values are refused."""
    if _URL.match(value):
        if value.lower().startswith("file://"):
            return Path(value[len("file://"):]).expanduser()

        raise StoreConfigError(
            f"{source}={value!r} looks like a URL, but memolab stores are directories: no store backend "
            f"for {value.split(':', 1)[0]!r} ships with this version. Give a directory path.")
    return Path(value).expanduser()


def store_path(workspace: Callable[[], str] | None = None) -> Path:
    """The configured store's location, else ``.memolab`` in the workspace (``workspace``: what finds
    it, ``workspace_dir`` unless the caller shares one search with ``remote``)."""
    if _settings.store:
        return _store_location(str(_settings.store), "store")
    env = os.environ.get("MEMOLAB_STORE")
    if env:
        return _store_location(env, "MEMOLAB_STORE")
    return Path((workspace or workspace_dir)()) / ".memolab"


_pyproject_cache: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}


def _tool_table(workspace: str | Path) -> dict[str, Any]:
    """``[tool.memolab]`` of the workspace's pyproject.toml ({} if none). tomllib is
    imported only when the file's text mentions ``tool.memolab``: a project without
    it pays a read, not a TOML parser. Cached by the file's stamp. Read through one
    descriptor (its ``fstat`` stamps what is read): a ``stat`` and a text file object
    cost ten system calls where this takes five (every fresh process asks, on its first call)."""
    p = os.path.join(workspace, "pyproject.toml")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return {}
    table: dict[str, Any] = {}
    stamp = None
    try:
        st = os.fstat(fd)
        # (the change time too: a rewrite within one tick of a coarse clock may keep the modification time)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = _pyproject_cache.get(p)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        text = read_fd(fd).decode("utf-8")
        if "tool.memolab" in text:
            if "\r" in text:  # (as a text file reads it: universal newlines)
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            if sys.version_info >= (3, 11):  # (no tomllib in Python 3.10)
                import tomllib

                table = tomllib.loads(text).get("tool", {}).get("memolab", {}) or {}
    except (OSError, ValueError):  # (UnicodeDecodeError and TOMLDecodeError are ValueErrors)
        table = {}
    finally:
        os.close(fd)
    if stamp is not None:
        _pyproject_cache[p] = (stamp, table)
    return table


def remote(workspace: Callable[[], str] | None = None) -> tuple[str, str | None] | None:
    """The configured team store: (index URL, blob store URL or None), or None.

    Each of the two is taken from ``configure()``, else ``$MEMOLAB_REMOTE`` /
    ``$MEMOLAB_REMOTE_BLOBS`` (empty counts as unset), else ``[tool.memolab]
    remote = …, remote_blobs = …`` in the workspace's pyproject.toml. Nothing here
    imports the team package: without a remote, no team code is ever loaded."""
    s = _settings
    index = s.remote or environ_str(b"MEMOLAB_REMOTE") or None
    blobs = s.remote_blobs or environ_str(b"MEMOLAB_REMOTE_BLOBS") or None
    if index is None or blobs is None:
        table = _tool_table((workspace or workspace_dir)())
        index = index or table.get("remote") or None
        blobs = blobs or table.get("remote_blobs") or None
    if index is None and blobs is None:
        return None
    if index is None:
        return None if blobs is None else ("", str(blobs))
    return str(index), None if blobs is None else str(blobs)


def settings() -> Settings:
    return _settings


def generation() -> int:
    return _generation


def store_where() -> tuple[Any, ...]:
    """What the default store depends on now: the settings' generation, the store variables,
    the working directory and the pid (a forked child must not share our connections). The
    cache key of ``MemoFunction.store``, asked again by a repeat hit (``calls/fasthits``): one
    call for all of it, the working directory being the one system call."""
    env = environ_bytes
    return (_generation, env(b"MEMOLAB_STORE"), env(b"MEMOLAB_REMOTE"), env(b"MEMOLAB_REMOTE_BLOBS"), os.getcwd(),
            _pid)


def configure(**changes: Any) -> Settings:
    """Change process-wide settings, e.g. ``configure(store="/data/memo")``.

    Unknown names raise ``TypeError`` so a typo never silently does nothing; a value
    outside its range (docs/settings.md) raises ``ValueError`` naming the setting, and
    then nothing changes.
    """
    global _settings, _generation
    for k, v in changes.items():
        rule = _CHECKS.get(k)
        if rule is not None:
            try:
                changes[k] = rule.check(v)
            except ValueError as e:
                raise ValueError(f"configure({k}={v!r}): the value {e}; accepted: {rule.accepted()}") from None
    with _lock:
        old = _settings
        _settings = replace(_settings, **changes)
        _generation += 1
        new = _settings
    for fn in list(on_configure):
        fn(old, new)
    return new
