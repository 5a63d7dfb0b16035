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
one above its real path; a folder on an ext4 or XFS disk is known as such without it
(``on_local_disk``: three system calls, where a process's first read of the table costs
~0.1 ms). Elsewhere nothing is said.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

from ..errors import MemolabWarning, swallowed
from ..settings.files import read_bytes
from .perms import ABSENT_ERRNOS

__all__ = ["Mount", "NETWORK_FILESYSTEMS", "located", "mount_table", "parse_mountinfo", "mount_of", "network_mount",
           "on_local_disk", "warn_if_network"]

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


#: a descriptor that only names a file (no read, no write, no permission needed beyond the search of its
#: folders, as for ``stat``): Linux's ``O_PATH``, following links as ``stat`` does
_NAME_FLAGS = getattr(os, "O_PATH", 0) | getattr(os, "O_CLOEXEC", 0) if sys.platform.startswith("linux") else 0


def located(path: str) -> tuple[str, os.stat_result] | None:
    """(``os.path.realpath(path)``, ``os.stat(path)``) where ``path`` exists; None where
    ``Path(path).exists()`` is False; what it raises otherwise (a folder on the way that cannot be
    searched). Asked of one descriptor on Linux: ``open(O_PATH)`` resolves the path as ``stat``
    does (every link followed), ``/proc/self/fd/N`` is the kernel's name of what it reached (its
    path from the root through the folders and mounts walked, every link resolved: what ``realpath``
    spells by an ``lstat`` and a ``readlink`` a component), and ``fstat`` its stat: four system
    calls and no Python loop, where ``stat`` and ``realpath`` took six in a 4-folder path (a store's
    opening asks once). The kernel's name is taken only where it is a plain path of a file not
    removed (``st_nlink``, read after the name: a removed file's name ends in `` (deleted)``);
    anywhere else (no ``/proc``, no ``O_PATH``, a name outside this process's root, an error but
    "not there") the answer is ``stat`` and ``realpath``'s, as before."""
    if _NAME_FLAGS:
        try:
            fd = os.open(path, _NAME_FLAGS)
        except (OSError, ValueError):
            pass  # (asked below, where ``stat`` says what ``Path.exists`` would)
        else:
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
                st = os.fstat(fd)
            except OSError:
                real = ""
            finally:
                os.close(fd)
            if real[:1] == "/" and st.st_nlink:
                return real, st
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno in ABSENT_ERRNOS:
            return None
        raise
    except ValueError:  # (a NUL in the path: pathlib answers "not there")
        return None
    return os.path.realpath(path), st


def mount_table() -> str | None:
    """This process's mount table (``/proc/self/mountinfo``), or None where there is none. Read
    with ``os.read`` into bytes, decoded once: a text file object's set-up cost more than the
    read (every process that opens a store reads it, on its first call)."""
    try:
        return read_bytes("/proc/self/mountinfo").decode("utf-8", "surrogateescape")
    except OSError:
        return None


_READ_TABLE = mount_table

#: the file systems of a block device that ``on_local_disk`` knows by their own sysfs folder, one a
#: mounted device: none is a network file system (``NETWORK_FILESYSTEMS``)
LOCAL_BLOCK_FILESYSTEMS = ("ext4", "xfs")


def on_local_disk(real: str, dev: int | None = None) -> bool:
    """Is the folder at real path ``real`` on an ext4 or XFS file system (Linux)? Asked without the
    mount table, whose first read in a process costs ~0.1 ms: the folder's device (``stat``), the
    block device of that number (``/sys/dev/block/MAJ:MIN``), and the file system's folder of that
    device (``/sys/fs/ext4/vda``), which exists while that device is mounted with it. A device holds
    one file system at a time, and its mounts share it, so the folder is on ext4 or XFS, neither of
    them a network file system. Anything else is asked of the table: an anonymous device (major 0:
    NFS, Lustre, FUSE, tmpfs, overlay, btrfs), a cluster file system on a shared disk (ocfs2, gfs2),
    a device whose name is not found. False where it cannot tell. ``dev``: the folder's ``st_dev``
    where the caller has its stat (``located``), else it is asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        if dev is None:
            dev = os.stat(real).st_dev
        if os.major(dev) == 0:
            return False
        name = os.readlink(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").rpartition("/")[2]
        return bool(name) and any(os.path.isdir(f"/sys/fs/{fs}/{name}") for fs in LOCAL_BLOCK_FILESYSTEMS)
    except (OSError, ValueError):
        return False


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # the kernel writes a space, tab, newline or backslash in a path as \040, \011, \012, \134
    if "\\" not in field:  # (most fields: nothing to replace, no substitution run)
        return field
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, above: str | None = None) -> list[Mount]:
    """The mounts of a ``/proc/PID/mountinfo`` text (``proc(5)``): ``ID PARENT MAJ:MIN ROOT POINT
    OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS``; a line that does not parse is skipped.
    ``above``: a real path, of whose mount points only those at or above it are parsed further
    (a line's first five fields split off first: a fresh process's network check reads this
    machine's 20 mounts for the one or two holding its store)."""
    out = []
    for line in text.splitlines():
        head = line.split(None, 5)
        if len(head) < 6:
            continue
        point = _unescape(head[4])
        if above is not None and not _holds(point, above):
            continue
        fields = head[:5] + head[5].split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        out.append(Mount(point, fields[sep + 1], _unescape(fields[sep + 2])))
    return out


def _holds(point: str, real: str) -> bool:
    """Is the real path ``real`` at or under mount point ``point``?"""
    p = point.rstrip("/") or "/"
    return real == p or real.startswith(p if p == "/" else p + "/")


def mount_of(path: os.PathLike[str], mounts: list[Mount], real: str | None = None) -> Mount | None:
    """The mount holding ``path`` (its real path): the last-mounted of the longest mount points above it."""
    real = os.path.realpath(os.fspath(path)) if real is None else real
    best: Mount | None = None
    for m in mounts:
        if _holds(m.point, real) and (best is None or len(m.point.rstrip("/") or "/") >= len(best.point.rstrip("/") or "/")):
            best = m
    return best


def network_mount(path: os.PathLike[str], real: str | None = None, dev: int | None = None) -> Mount | None:
    """The network-filesystem mount holding ``path``, or None (a local disk, or no mount table).
    ``real``: ``path``'s real path where the caller has resolved it already (its ``lstat``s once);
    ``dev``: its ``st_dev``, where the caller has its stat (``located``)."""
    if real is None:
        real, dev = os.path.realpath(os.fspath(path)), None
    if mount_table is _READ_TABLE and on_local_disk(real, dev):
        return None  # (what the table says: an ext4 or XFS mount. A faked table, the tests', is asked)
    text = mount_table()
    if text is None:
        return None
    m = mount_of(path, parse_mountinfo(text, real), real)  # (only the mounts above it parsed)
    return m if m is not None and m.fstype in NETWORK_FILESYSTEMS else None


_warned: set[str] = set()
_lock = threading.Lock()


def warn_if_network(root: Path, real: str | None = None, dev: int | None = None) -> None:
    """Warn, once per process and store, that the store at ``root`` is on a network filesystem.
    ``real``, ``dev``: its real path and ``st_dev`` where the caller has them (``located``)."""
    key = os.fspath(root)
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    try:
        m = network_mount(root, real, dev)
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
