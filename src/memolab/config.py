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
from typing import Any, Optional

_lock = threading.Lock()

VERSION_SENSITIVITIES = ("exact", "minor", "major", "ignore")


@dataclass(frozen=True)
class Settings:
    store: Optional[str] = None
    #: how much of a third-party package's version joins the code digest
    version_sensitivity: str = "minor"
    #: seconds between lease heartbeats; a lease is stale after ``lease_ttl``
    heartbeat: float = 1.0
    lease_ttl: float = 10.0
    #: warn (True) or stay silent (False) when a result cannot be stored
    warn_unstorable: bool = True
    #: who may use a store this process creates: "user" (0700/0600, the default)
    #: or "group" (group-writable with setgid directories, for a team on one machine)
    store_sharing: str = "user"
    extra: dict = field(default_factory=dict)


def _from_env() -> Settings:
    """Defaults, overridden by ``MEMOLAB_*`` environment variables (handy for workers and tests)."""
    s = Settings()
    env = os.environ
    if env.get("MEMOLAB_LEASE_TTL"):
        s = replace(s, lease_ttl=float(env["MEMOLAB_LEASE_TTL"]))
    if env.get("MEMOLAB_HEARTBEAT"):
        s = replace(s, heartbeat=float(env["MEMOLAB_HEARTBEAT"]))
    if env.get("MEMOLAB_VERSION_SENSITIVITY"):
        vs = env["MEMOLAB_VERSION_SENSITIVITY"]
        if vs not in VERSION_SENSITIVITIES:
            raise ValueError(f"MEMOLAB_VERSION_SENSITIVITY must be one of {VERSION_SENSITIVITIES}, not {vs!r}")
        s = replace(s, version_sensitivity=vs)
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


def find_workspace(start: Optional[Path] = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").exists() or (d / ".git").exists():
            return d
    return here


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
        _settings = replace(_settings, **changes)
        _generation += 1
    return _settings
