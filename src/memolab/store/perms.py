"""Who may read and write a store: user-only by default, group-shared on request.

A store holds results, argument reprs and source code, and an unsigned store
runs code from whoever can write it (a payload is a pickle). So a store this
process *creates* is private: directories 0700, the index 0600 (SQLite gives
its ``-wal``/``-shm`` files the index's mode), blobs read-only to their owner
behind the private root. ``configure(store_sharing="group")`` (or
``MEMOLAB_STORE_SHARING=group``) creates a store for a team on one machine
instead: directories group-writable with the setgid bit (new files inherit
the directory's group), the index 0660. Existing stores keep their modes: they
are not ours to change; ``writable_by_others`` finds the risky ones so the
caller can warn when no ``MEMOLAB_HMAC_KEY`` protects them.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import swallowed
from ..settings import config

_DIR_MODE = {"user": 0o700, "group": 0o2770}
_FILE_MODE = {"user": 0o600, "group": 0o660}
INDEX = "index.sqlite"


def _mkdir(path: Path, mode: int) -> bool:
    """Create ``path`` with exactly ``mode`` (the umask is bypassed with a chmod); True if created."""
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        return False
    _chmod(path, mode)
    return True


def _chmod(path: str | os.PathLike[str], mode: int) -> None:
    try:
        os.chmod(path, mode)
    except OSError:
        swallowed("store.perms: _chmod")  # a file system without modes (some network or FUSE mounts): the store still works


def prepare_root(root: Path) -> None:
    """Create the store directory (and its index file) with the configured sharing if missing.

    Parents are created with the process's ordinary mode, like ``mkdir -p``.
    """
    sharing = config.settings().store_sharing
    dmode, fmode = _DIR_MODE[sharing], _FILE_MODE[sharing]
    base = os.fspath(root)  # (strings: an open store's root and index are two ``stat``s, no Path made)
    if not exists(base):
        root = Path(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        created = _mkdir(root, dmode)
    else:
        created = False
    if created and sharing == "group":
        # Subfolders made later with the default umask would not be group-writable:
        # make every one a writer can ever need now (256 blob fan-out folders too).
        for sub in ("blobs", "tmp", "quarantine"):
            _mkdir(root / sub, dmode)
        for i in range(256):
            _mkdir(root / "blobs" / f"{i:02x}", dmode)
    index = os.path.join(base, INDEX)
    if created or (not exists(index) and os.path.isdir(base) and _owned(Path(root))):
        try:
            fd = os.open(index, os.O_WRONLY | os.O_CREAT | os.O_EXCL, fmode)
        except FileExistsError:
            return
        os.close(fd)
        _chmod(index, fmode)


#: the errors for which ``Path.exists`` answers False rather than raising (pathlib's own list)
ABSENT_ERRNOS = frozenset((errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP))


def exists(path: str) -> bool:
    """``Path(path).exists()``, without making the Path: False where it is not there, and where
    ``stat`` fails as pathlib calls "not there"; any other error raised."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno in ABSENT_ERRNOS:
            return False
        raise
    except ValueError:
        return False
    return True


def _owned(path: Path) -> bool:
    try:
        return path.stat().st_uid == os.getuid()
    except OSError:
        return False


def _group_shared(st: os.stat_result) -> bool:
    """Does the file's group hold anyone but its owner? (A user's private group does not count.)"""
    try:
        import grp
        import pwd

        g = grp.getgrgid(st.st_gid)
        owner = pwd.getpwuid(st.st_uid)
    except (ImportError, KeyError):
        return True  # cannot tell: assume it is shared
    if set(g.gr_mem) - {owner.pw_name}:
        return True
    if owner.pw_gid != st.st_gid:
        return True  # some other group: its members are others
    try:
        return any(p.pw_gid == st.st_gid and p.pw_uid != st.st_uid for p in pwd.getpwall())
    except OSError:
        swallowed("store.perms: _group_shared")
        return True


def writable_by_others(root: Path, rst: os.stat_result | None = None) -> list[str]:
    """The parts of a store that users other than its owner can write (empty when private).

    A private root directory protects everything under it, whatever their modes. ``rst``: the
    root's stat where the caller took it while opening the store (``get_store``), else it is asked."""
    out: list[str] = []
    if rst is None:
        try:
            rst = root.stat()
        except OSError:
            return out
    if not (rst.st_mode & (stat.S_IWOTH | stat.S_IWGRP)) and rst.st_mode & 0o077 == 0:
        return out  # 0700: nobody else can even reach what is inside
    for rel in (".", "blobs", INDEX):
        try:
            st = (root / rel).stat()
        except OSError:
            continue
        if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and _group_shared(st)):
            out.append(f"{'the store directory' if rel == '.' else rel} ({stat.filemode(st.st_mode)})")
    return out


def mode_of(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
