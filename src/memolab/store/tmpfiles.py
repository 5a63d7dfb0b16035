"""Temporary files of blob writers, and which of them are litter.

A blob is written to ``tmp/`` first, fsynced, then renamed into ``blobs/``. A
writer killed in between leaves its temporary file behind (a SIGKILL runs no
clean-up). The name says who wrote it, as lease owners do: pid, the pid's start
time and a tag of the process table (host, pid namespace, boot). A file whose
writer is provably gone (same process table, and that pid is not running or
started at another time) is reclaimable at once; one whose writer cannot be
judged from here (another host or container, an older name without a tag) only
after ``older_than`` seconds without a write.

Name: ``<label>.<pid>-<start>-<table>.<random>``; ``<label>`` is the digest
prefix, ``pending`` (hashed while written) or ``download`` (a team store's download).
Only names of that shape that are regular files are ever judged (or removed): a store
made elsewhere may hold anything in ``tmp/``, and memolab deletes only what it writes
(``is_tmp_name``), never through a link (``layout.open_dir``).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import swallowed
from . import layout

_TAG: list[str] = []


def writer_tag() -> str:
    """``pid-start-table`` of this process (computed once per process)."""
    pid = os.getpid()
    if not _TAG or not _TAG[0].startswith(f"{pid}-"):
        from .process import host_name, process_table, start_time

        table = hashlib.blake2b(f"{host_name()}/{process_table()}".encode(), digest_size=4).hexdigest()
        _TAG[:] = [f"{pid}-{start_time(pid) or 'x'}-{table}"]
    return _TAG[0]


def tmp_name(label: str) -> str:
    return f"{label}.{writer_tag()}.{uuid.uuid4().hex[:8]}"


#: the names ``tmp_name`` makes (and the older ``label.pid.random``), nothing else; labels are
#: a digest's prefix or a word (``pending``, ``download``)
_OURS = re.compile(r"[0-9a-z]{1,32}\.\d+(?:-(?:\d+|x)-[0-9a-f]{8})?\.[0-9a-f]{8}\Z")


def is_tmp_name(name: str) -> bool:
    """Is ``name`` one memolab gives its temporary files?"""
    return _OURS.match(name) is not None


def writer_alive(name: str) -> bool | None:
    """Is the writer of temporary file ``name`` still running? None where we cannot tell."""
    parts = name.split(".")
    if len(parts) < 3:
        return None
    tag = parts[-2].split("-")
    if len(tag) != 3:
        return None  # an older name (``label.pid.random``): no process table to ask
    pid_s, start, table = tag
    mine = writer_tag().split("-")
    if table != mine[2] or start == "x":
        return None  # written on another host, container or boot
    from .process import start_time

    try:
        pid = int(pid_s)
    except ValueError:
        return None
    if pid == os.getpid():
        return True
    return start_time(pid) == start


class TmpFile(NamedTuple):
    path: Path
    size: int
    age: float
    #: True running, False dead, None cannot tell
    alive: bool | None


def scan(tmp_dir: Path, now: float | None = None) -> Iterator[TmpFile]:
    """memolab's temporary files in ``tmp_dir``: regular files with names it gives (a link, a
    folder or a file of another name is not ours, and is never listed)."""
    now = time.time() if now is None else now
    try:
        if stat.S_ISLNK(os.lstat(tmp_dir).st_mode):
            return  # (``layout.check`` refuses such a store; never listed through the link)
        entries = list(os.scandir(tmp_dir))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for e in entries:
        if not is_tmp_name(e.name):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # published or removed meanwhile
        if stat.S_ISREG(st.st_mode):
            yield TmpFile(Path(e.path), st.st_size, now - st.st_mtime, writer_alive(e.name))


def reclaim(tmp_dir: Path, older_than: float = 3600.0) -> list[TmpFile]:
    """Remove the temporary files of dead writers, and any not written for ``older_than`` s
    (only memolab's: ``scan``), relative to the folder opened without following a link."""
    gone: list[Any] = []
    doomed = [t for t in scan(tmp_dir) if t.alive is False or (t.alive is None and t.age > older_than)]
    if not doomed:
        return gone
    tmp_dir = Path(tmp_dir)
    try:
        with layout.open_dir(tmp_dir.parent, tmp_dir.name) as fd:
            for t in doomed:
                try:
                    if layout.regular_file(t.path.name, fd) is not None:
                        os.unlink(t.path.name, dir_fd=fd)
                        gone.append(t)
                except FileNotFoundError:
                    pass
                except OSError:
                    swallowed("store.tmpfiles: reclaim")  # a read-only store: reported by doctor, removed by whoever can write
    except FileNotFoundError:
        pass
    return gone
