"""What a store directory holds, and the refusal of one prepared to reach outside itself.

memolab touches only files it made, inside its store. A store is often not made by the
person who uses it: a repository can commit a ``.memolab/`` folder, a colleague can hand
one over. Such a folder could hold a link where memolab keeps its own folders
(``tmp -> ~/Documents``, ``blobs/ab -> ~/.ssh``): following it, ``gc`` and ``doctor``
would delete or move the user's files. So:

* ``check`` refuses a store whose own folders (``blobs``, ``tmp``, ``quarantine``, every
  ``blobs/xx``) or own files (the index and its ``-wal``/``-shm``, ``leases.lock``) are
  symbolic links, with one line naming the link. The store's root may be a link (a user's
  ``~/.memolab -> /data/memolab`` is their own choice); nothing below it may.
* What deletes or moves goes through ``open_dir``: each folder below the root is opened
  with ``O_NOFOLLOW`` and the entry is removed relative to that descriptor, so a folder
  swapped for a link after ``check`` is refused too, never followed.
* Names taken from the index become paths only when they are digests (``is_digest``: hex of
  the fixed length); anything else is a damaged row, never a path.
* Hard links: removing or moving a directory entry never changes the file's bytes, so a blob
  name hard-linked to a file elsewhere loses only the store's name (the other name keeps the
  file, whole). memolab never writes into an existing file (a blob is written to a new
  temporary file and renamed over its name) and does not touch one whose link count says
  another name holds it (``BlobFolder._intact`` rewrites its own copy instead of refreshing
  that file's time).
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable

__all__ = ["OWN_DIRS", "OWN_FILES", "is_digest", "check", "open_dir", "linked"]

#: the folders of a store (``blobs/xx`` are checked as well)
OWN_DIRS = ("blobs", "tmp", "quarantine")
#: the files of a store's root
OWN_FILES = ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm", "leases.lock")

_OWN = frozenset(OWN_DIRS + OWN_FILES)

#: a blob's name: the hex BLAKE3 digest of its bytes (``blobs.digest_bytes``)
DIGEST_LENGTH = 64
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")
_FAN_OUT = re.compile(r"[0-9a-f]{2}\Z")


def is_digest(name: object) -> bool:
    """Is ``name`` a blob digest (64 lowercase hex characters)? Names read from an index row
    are paths only then: ``../../Documents/thesis.tex`` is a damaged row."""
    return type(name) is str and _DIGEST.match(name) is not None


def is_fan_out(name: str) -> bool:
    """Is ``name`` one of the 256 ``blobs/xx`` folders?"""
    return _FAN_OUT.match(name) is not None


def linked(root: Path, rel: str) -> StoreUnavailable:
    """The refusal of a store whose ``rel`` is a symbolic link."""
    p = Path(root) / rel
    try:
        target = f" (to {os.readlink(p)})"
    except OSError:
        target = ""
    return StoreUnavailable(
        "linked", f"the store {root} is refused: {rel} is a symbolic link{target}, and memolab never follows a "
        f"link out of its store (a store made elsewhere could point its folders at your files); results are "
        f"computed but not stored. Remove the link ({p}) if you trust the rest of the store, or use another store")


def _is_link(path: str) -> bool | None:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def check(root: Path) -> None:
    """Raise ``StoreUnavailable('linked')`` if one of the store's own folders or files is a
    symbolic link. One listing of the root (its entries' types: an ``lstat`` each only on a file
    system that does not say, as ``_is_link`` would ask) and one of ``blobs/``, once per store a
    process opens: 8 system calls where an ``lstat`` of each of the 7 names took 7 and the
    listing of ``blobs/`` 4."""
    base = os.fspath(root)
    try:
        with os.scandir(base) as it:
            found = [e.name for e in it if e.name in _OWN and e.is_symlink()]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        found = [name for name in OWN_DIRS + OWN_FILES if _is_link(os.path.join(base, name))]
    for name in OWN_DIRS + OWN_FILES:  # (the first in this order, as one ``lstat`` a name found it)
        if name in found:
            raise linked(Path(root), name)
    try:
        with os.scandir(os.path.join(base, "blobs")) as it:
            for e in it:
                if e.is_symlink() and is_fan_out(e.name):
                    raise linked(Path(root), f"blobs/{e.name}")
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        pass


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def open_dir(root: Path, *parts: str) -> Iterator[int]:
    """A descriptor of ``root/parts…``, each part below the root opened without following a
    link (``StoreUnavailable('linked')`` if one is a link; ``FileNotFoundError`` if one is
    missing). Delete and move relative to it (``dir_fd=``): whatever happens to the path
    meanwhile, nothing outside the store is reached."""
    fd = os.open(os.fspath(root), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        done: list[Any] = []
        for part in parts:
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if isinstance(e, FileNotFoundError):
                    raise
                try:
                    is_link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
                except OSError:
                    is_link = False
                if is_link:
                    raise linked(Path(root), "/".join([*done, part])) from None
                raise
            os.close(fd)
            fd = sub
            done.append(part)
        yield fd
    finally:
        os.close(fd)


def regular_file(name: str, dir_fd: int) -> os.stat_result | None:
    """The stat of ``name`` in ``dir_fd`` if it is a regular file (a link, a folder: None)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None
