"""Where the store lives and the process-wide settings.

Resolution order for the store location: ``memolab.configure(store=...)``,
then ``$MEMOLAB_STORE``, then ``<workspace>/.memolab`` where the workspace is the
nearest directory at or above the current one holding ``pyproject.toml`` or
``.git`` (else the current directory itself). An empty ``MEMOLAB_STORE`` counts
as unset (the shell convention ``MEMOLAB_STORE= cmd``). A value that looks like
a URL (``postgresql://…``, ``s3://…``) is refused with ``StoreConfigError``
naming it: no such backend ships, and a directory named ``postgresql:`` would
silently be created instead. ``file:///path`` is accepted as ``/path``.
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

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
    environ_bytes: Callable[[bytes], Optional[bytes]] = _ENV_DATA.get
else:  # pragma: no cover - not POSIX
    def environ_bytes(name: bytes) -> Optional[bytes]:
        """``$name`` as bytes, or None."""
        v = os.environ.get(name.decode("ascii"))
        return None if v is None else v.encode("utf-8", "surrogateescape")

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


@dataclass(frozen=True)
class Settings:
    store: Optional[str] = None
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
    remote: Optional[str] = None
    remote_blobs: Optional[str] = None
    #: seconds a team-store connection or request may take before we work offline
    remote_timeout: float = 3.0
    extra: dict = field(default_factory=dict)


def _from_env() -> Settings:
    """Defaults, overridden by ``MEMOLAB_*`` environment variables (handy for workers and tests)."""
    s = Settings()
    env = os.environ
    if env.get("MEMOLAB_LEASE_TTL"):
        s = replace(s, lease_ttl=float(env["MEMOLAB_LEASE_TTL"]))
    if env.get("MEMOLAB_LEASE_FREE_BELOW"):
        s = replace(s, lease_free_below=float(env["MEMOLAB_LEASE_FREE_BELOW"]))
    if env.get("MEMOLAB_HEARTBEAT"):
        s = replace(s, heartbeat=float(env["MEMOLAB_HEARTBEAT"]))
    if env.get("MEMOLAB_VERSION_SENSITIVITY"):
        vs = env["MEMOLAB_VERSION_SENSITIVITY"]
        if vs not in VERSION_SENSITIVITIES:
            raise ValueError(f"MEMOLAB_VERSION_SENSITIVITY must be one of {VERSION_SENSITIVITIES}, not {vs!r}")
        s = replace(s, version_sensitivity=vs)
    if env.get("MEMOLAB_REMOTE_TIMEOUT"):
        s = replace(s, remote_timeout=float(env["MEMOLAB_REMOTE_TIMEOUT"]))
    if env.get("MEMOLAB_STORE_SHARING"):
        s = replace(s, store_sharing=_check_sharing(env["MEMOLAB_STORE_SHARING"], "MEMOLAB_STORE_SHARING"))
    return s


STORE_SHARINGS = ("user", "group")


def _check_sharing(v: str, what: str) -> str:
    if v not in STORE_SHARINGS:
        raise ValueError(f"{what} must be one of {STORE_SHARINGS}, not {v!r}")
    return v


_settings = _from_env()
_generation = 0  # bumped on every configure() so cached stores are dropped
#: called as ``fn(old, new)`` after every ``configure()`` (the store module retires the team
#: stores a new remote replaces); registered by importers, so config imports nothing of theirs
on_configure: List[Callable[["Settings", "Settings"], None]] = []


def find_workspace(start: Optional[Path] = None) -> Path:
    # os.path, not pathlib: a third of the cost, and a script's first call runs this twice
    # (the store's location, then the team store's settings in [tool.memolab])
    here = os.path.realpath(start if start is not None else os.getcwd())
    d = here
    while True:
        if os.path.exists(os.path.join(d, "pyproject.toml")) or os.path.exists(os.path.join(d, ".git")):
            return Path(d)
        parent = os.path.dirname(d)
        if parent == d:
            return Path(here)
        d = parent


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _store_location(value: str, source: str) -> Path:
    """A configured store location as a directory path; URL-looking values are refused."""
    if _URL.match(value):
        if value.lower().startswith("file://"):
            return Path(value[len("file://"):]).expanduser()
        from .errors import StoreConfigError

        raise StoreConfigError(
            f"{source}={value!r} looks like a URL, but memolab stores are directories: no store backend "
            f"for {value.split(':', 1)[0]!r} ships with this version. Give a directory path.")
    return Path(value).expanduser()


def store_path() -> Path:
    if _settings.store:
        return _store_location(str(_settings.store), "store")
    env = os.environ.get("MEMOLAB_STORE")
    if env:
        return _store_location(env, "MEMOLAB_STORE")
    return find_workspace() / ".memolab"


_pyproject_cache: Dict[str, Tuple[int, Dict[str, Any]]] = {}


def _tool_table(workspace: Path) -> Dict[str, Any]:
    """``[tool.memolab]`` of the workspace's pyproject.toml ({} if none). tomllib is
    imported only when the file's text mentions ``tool.memolab``: a project without
    it pays a read, not a TOML parser. Cached by modification time."""
    p = workspace / "pyproject.toml"
    try:
        st = p.stat()
    except OSError:
        return {}
    hit = _pyproject_cache.get(str(p))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    table: Dict[str, Any] = {}
    try:
        text = p.read_text(encoding="utf-8")
        if "tool.memolab" in text:
            try:
                import tomllib
            except ImportError:  # Python 3.10
                tomllib = None  # type: ignore[assignment]
            if tomllib is not None:
                table = tomllib.loads(text).get("tool", {}).get("memolab", {}) or {}
    except (OSError, ValueError):
        table = {}
    _pyproject_cache[str(p)] = (st.st_mtime_ns, table)
    return table


def remote() -> Optional[Tuple[str, Optional[str]]]:
    """The configured team store: (index URL, blob store URL or None), or None.

    Each of the two is taken from ``configure()``, else ``$MEMOLAB_REMOTE`` /
    ``$MEMOLAB_REMOTE_BLOBS`` (empty counts as unset), else ``[tool.memolab]
    remote = …, remote_blobs = …`` in the workspace's pyproject.toml. Nothing here
    imports the team package: without a remote, no team code is ever loaded."""
    s = _settings
    env = os.environ
    index = s.remote or env.get("MEMOLAB_REMOTE") or None
    blobs = s.remote_blobs or env.get("MEMOLAB_REMOTE_BLOBS") or None
    if index is None or blobs is None:
        table = _tool_table(find_workspace())
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


def configure(**changes: Any) -> Settings:
    """Change process-wide settings, e.g. ``configure(store="/data/memo")``.

    Unknown names raise ``TypeError`` so a typo never silently does nothing.
    """
    global _settings, _generation
    vs = changes.get("version_sensitivity")
    if vs is not None and vs not in VERSION_SENSITIVITIES:
        raise ValueError(f"version_sensitivity must be one of {VERSION_SENSITIVITIES}, not {vs!r}")
    if changes.get("store_sharing") is not None:
        _check_sharing(changes["store_sharing"], "store_sharing")
    with _lock:
        old = _settings
        _settings = replace(_settings, **changes)
        _generation += 1
        new = _settings
    for fn in list(on_configure):
        fn(old, new)
    return new
