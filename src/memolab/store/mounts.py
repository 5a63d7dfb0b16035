"""Is a store on a network filesystem? (Then say so, once: SQLite is not safe there.)

The local store is a SQLite index beside a folder of blobs. SQLite relies on POSIX file
locks and, in WAL mode, on a memory-mapped ``-shm`` file shared by every process that opens
the index; on NFS, SMB/CIFS, Lustre, GPFS and their kin, locks are emulated, partial or
off, and a mapped file is not coherent between machines. Jobs on several nodes sharing such
a store (a Slurm array writing to ``$HOME/.memolab``) can then read a half-written index or
corrupt it (https://www.sqlite.org/wal.html, "WAL does not work over a network filesystem").
Across machines, share a team store (PostgreSQL + S3) and give each node a local store
(docs/team.md, "Slurm").

Linux only: the filesystem of the store's folder is read from ``/proc/self/mountinfo``
(``mount_table``, the seam tests fake), the mount point that holds it being the longest
one above its real path. Elsewhere nothing is said.
"""
from __future__ import annotations

import os
import re
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

from ..errors import MemolabWarning, swallowed

__all__ = ["Mount", "NETWORK_FILESYSTEMS", "mount_table", "parse_mountinfo", "mount_of", "network_mount",
           "warn_if_network"]

#: filesystem types (as ``/proc/self/mountinfo`` names them) whose locks or shared mappings SQLite
#: cannot trust across machines
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p",
    "lustre", "gpfs", "beegfs", "panfs", "wekafs", "pvfs2", "orangefs", "ceph", "glusterfs", "ocfs2", "gfs2",
    "fuse.ceph-fuse", "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
    "fuse.beegfs", "fuse.rclone", "davfs", "fuse.davfs2",
})


class Mount(NamedTuple):
    point: str
    fstype: str
    source: str


def mount_table() -> str | None:
    """This process's mount table (``/proc/self/mountinfo``), or None where there is none. Read
    with ``os.read`` into bytes, decoded once: a text file object's set-up cost more than the
    read (every process that opens a store reads it, on its first call)."""
    try:
        fd = os.open("/proc/self/mountinfo", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        while True:  # (a proc file is read to its end: its size says 0)
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # the kernel writes a space, tab, newline or backslash in a path as \040, \011, \012, \134
    if "\\" not in field:  # (most fields: nothing to replace, no substitution run)
        return field
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/PID/mountinfo`` text (``proc(5)``): ``ID PARENT MAJ:MIN ROOT POINT
    OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS``; a line that does not parse is skipped."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        out.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(fields[sep + 2])))
    return out


def mount_of(path: os.PathLike[str], mounts: list[Mount], real: str | None = None) -> Mount | None:
    """The mount holding ``path`` (its real path): the last-mounted of the longest mount points above it."""
    real = os.path.realpath(os.fspath(path)) if real is None else real
    best: Mount | None = None
    for m in mounts:
        point = m.point.rstrip("/") or "/"
        if real == point or real.startswith(point if point == "/" else point + "/"):
            if best is None or len(point) >= len(best.point.rstrip("/") or "/"):
                best = m
    return best


def network_mount(path: os.PathLike[str], real: str | None = None) -> Mount | None:
    """The network-filesystem mount holding ``path``, or None (a local disk, or no mount table).
    ``real``: ``path``'s real path where the caller has resolved it already (its ``lstat``s once)."""
    text = mount_table()
    if text is None:
        return None
    # ``mount_of(path, parse_mountinfo(text), real)``, with only the mount points above the path
    # parsed further (a line's first five fields split off, the rest only for those; one ``Mount``
    # made): the whole table parsed cost a fresh process's first call 0.28 M instructions for this
    # machine's 20 mounts
    real = os.path.realpath(os.fspath(path)) if real is None else real
    best: tuple[int, str, list[str], int] | None = None
    for line in text.splitlines():
        fields = line.split(None, 5)  # (the rest split only for a mount point above the path)
        if len(fields) < 6:
            continue
        point = _unescape(fields[4])
        stripped = point.rstrip("/") or "/"
        if not (real == stripped or real.startswith(stripped if stripped == "/" else stripped + "/")):
            continue
        if best is not None and len(stripped) < best[0]:
            continue
        fields = fields[:5] + fields[5].split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) >= sep + 3:
            best = (len(stripped), point, fields, sep)
    if best is None or best[2][best[3] + 1] not in NETWORK_FILESYSTEMS:
        return None
    _, point, fields, sep = best
    return Mount(point, fields[sep + 1], _unescape(fields[sep + 2]))


_warned: set[str] = set()
_lock = threading.Lock()


def warn_if_network(root: Path, real: str | None = None) -> None:
    """Warn, once per process and store, that the store at ``root`` is on a network filesystem."""
    key = os.fspath(root)
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    try:
        m = network_mount(root, real)
    except OSError:  # (realpath) a check that fails says nothing: it must never cost a call
        swallowed("store.mounts: warn_if_network")
        return
    if m is None:
        return

    warnings.warn(
        f"memolab: the store {root} is on a network filesystem ({m.fstype} {m.source} mounted at {m.point}). "
        "SQLite's locks and shared memory are not reliable there: jobs on several machines sharing this store can "
        "read a half-written index or damage it. Give each machine a store on a local disk (MEMOLAB_STORE=/tmp/... or "
        "node-local scratch) and share results through a team store (MEMOLAB_REMOTE, MEMOLAB_REMOTE_BLOBS; "
        "docs/team.md, 'Slurm')", MemolabWarning, stacklevel=4)
