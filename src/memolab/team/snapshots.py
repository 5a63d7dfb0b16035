"""Files and folders by digest: ``memolab snapshot PATH`` / ``memolab.snapshot(path)`` and
``memolab restore DIGEST [PATH]`` / ``memolab.restore(digest, path)`` (HitSave's ``FileSnapshot``,
``DirectorySnapshot`` and ``restore``).

**Stored as blobs.** Every file is a blob of the store's blob folder, content-addressed like
result blobs (the same bytes are one file, whoever stored them). A snapshot is a *manifest*, one
more blob: JSON naming the files' relative paths, digests, sizes and executable bits (and a
folder's empty sub-folders). Its digest is the snapshot's. With a team store configured the
blobs are uploaded to the team's blob store too, so another machine restores them; a machine
that restored (or took) a snapshot once restores it offline from its own store.

**Kept by gc.** The index's ``snapshots`` table records each snapshot taken or restored here,
and ``snapshot_blobs`` the blobs it holds: ``gc`` never collects a blob a recorded snapshot
holds. A snapshot record goes (and then its blobs, unless something else holds them) only when
it is unnamed and was neither taken nor restored here for ``RECENT`` seconds (30 days); a named
one (``--name``) stays until ``memolab snapshot --forget DIGEST``. With a team store the snapshot
is recorded on the team index too (team schema 3, ``team.pgmarks``): team gc on any machine spares
its blobs, and lets go of the team's record by the same rule (used: taken, or restored from the
team); team gc also spares the blobs of the snapshots recorded on the machine that runs it.

**Safety.** Taking a snapshot reads only: symbolic links and special files in it are refused,
naming them (a link's target is not the folder's content, and it may point anywhere). Restoring
writes only under the path it is given: a manifest is untrusted input (it may come from the
team store), so each relative path is checked (no '..', not absolute, no empty or '.' part, no
backslash, no NUL) before anything is written, every blob is verified against its digest, and
no link on the way is followed (an existing link where a file or folder goes is refused). A
file there already with the same bytes is left alone; one with other bytes is refused unless
``overwrite``. Files are written to a temporary name beside their place and renamed onto it.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import Any

from ..hashing.files import Dir, File
from ..key import Key
from ..settings import config
from ..store import Store, get_store
from ..store.marks import SNAPSHOT_RECENT

__all__ = ["snapshot", "restore", "forget", "restore_missing", "RECENT", "SnapshotError"]

#: an unnamed snapshot neither taken nor restored here for this long is let go by gc
RECENT = SNAPSHOT_RECENT
_FORMAT = "memolab-snapshot/1"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
#: files stored or written at once (their fsyncs overlap), those under ``THREADED_MAX`` bytes (a
#: file is read whole while it is stored: larger ones go one at a time)
IO_THREADS = 8
THREADED_MAX = 32 << 20
_KEY_FN = "memolab.snapshot"  # the lease a snapshot in progress holds: gc spares its fresh blobs


class SnapshotError(ValueError):
    """A snapshot that cannot be taken or restored, saying why and naming the path."""


def _store(store: Any) -> Any:
    s = get_store(store) if store is None or isinstance(store, (str, os.PathLike)) else store
    problem = getattr(s, "problem", None)
    if isinstance(problem, BaseException):
        raise problem
    return s


def _files(root: Path) -> tuple[list[tuple[str, Path, int]], list[str]]:
    """The regular files under ``root`` (relative POSIX path, path, mode) and its empty folders;
    links and special files refused, naming them. Never follows a link."""
    files: list[tuple[str, Path, int]] = []
    empty: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        for name in sorted(dirnames + filenames):
            p = d / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                raise SnapshotError(f"{p}: a symbolic link; a snapshot holds files and folders only (copy what it "
                                    "points to into the folder, or snapshot its target)")
            if stat.S_ISREG(st.st_mode):
                files.append((rel, p, st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                if not any(os.scandir(p)):
                    empty.append(rel)
            else:
                raise SnapshotError(f"{p}: not a regular file or folder (a socket, a device, a pipe)")
        dirnames.sort()
    return files, empty


def snapshot(path: str | os.PathLike[str], *, name: str | None = None, store: Any = None) -> str:
    """Store the file or folder ``path`` in the store's blobs (and the team store's, when one is
    configured); its digest, for ``restore``. ``name``: a label that keeps it from gc."""
    src = Path(path)
    try:
        st = src.lstat()
    except FileNotFoundError:
        raise SnapshotError(f"{src}: no such file or folder") from None
    if stat.S_ISLNK(st.st_mode):
        raise SnapshotError(f"{src}: a symbolic link; snapshot what it points to ({os.readlink(src)})")
    s = _store(store)
    local: Store = getattr(s, "local", s)
    owner = f"{local.owner}:snap{uuid.uuid4().hex[:8]}"
    lease = Key(_KEY_FN, "", owner, "")
    local.index.claim(lease, owner, config.settings().lease_ttl)  # while it lives, gc spares fresh blobs
    try:
        if stat.S_ISREG(st.st_mode):
            d, n = _put_file(local, src)
            manifest: dict[str, Any] = {"format": _FORMAT, "kind": "file", "name": src.name,
                                        "files": [{"path": "", "blob": d, "size": n, "exec": _exec(st.st_mode)}]}
        elif stat.S_ISDIR(st.st_mode):
            files, empty = _files(src)
            from ..settings.progress import Bar

            sizes = [p.stat().st_size for _, p, _ in files]
            got: list[tuple[str, int]] = [("", 0)] * len(files)
            with Bar(f"snapshot {src.name}", sum(sizes), unit="B") as bar, ThreadPoolExecutor(IO_THREADS) as pool:
                # small files at once: each blob's writes are fsynced (file and folder), a wait on the
                # disk that threads overlap (the GIL is released); a large file alone (read whole)
                small = [i for i, n in enumerate(sizes) if n < THREADED_MAX]
                large = [i for i, n in enumerate(sizes) if n >= THREADED_MAX]
                put = chain(pool.map(lambda i: _put_file(local, files[i][1]), small),
                            (_put_file(local, files[i][1]) for i in large))  # (lazy: heartbeats as it goes)
                for k, (i, r) in enumerate(zip(small + large, put, strict=True)):
                    got[i] = r
                    bar.update(r[1])
                    if k % 64 == 63:
                        local.index.heartbeat([(lease, owner)])
            entries = [{"path": rel, "blob": d, "size": n, "exec": _exec(mode)}
                       for (rel, _, mode), (d, n) in zip(files, got, strict=True)]
            manifest = {"format": _FORMAT, "kind": "folder", "name": src.name, "files": entries, "folders": empty}
        else:
            raise SnapshotError(f"{src}: not a regular file or folder")
        data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        digest, size = local.blobs.put(data)
        _record(local, digest, size, manifest, name=name, source=str(src.resolve()))
    finally:
        local.index.release(lease, owner)
    _upload(s, local, digest, size, manifest, name)
    return digest


def _exec(mode: int) -> bool:
    return bool(mode & stat.S_IXUSR)


def _put_file(local: Store, p: Path) -> tuple[str, int]:
    with open(p, "rb", buffering=0) as f:
        data = f.read()
    return local.blobs.put(data)


def _record(local: Store, digest: str, size: int, manifest: dict[str, Any], name: str | None, source: str | None) -> None:
    blobs = {(f["blob"], f["size"]) for f in manifest["files"]} | {(digest, size)}
    now = time.time()
    with local.index.write() as c:  # (the lock gc deletes under: what is here now stays, recorded)
        gone = [d for d, _ in blobs if not local.blobs.path(d).is_file()]
        if gone:
            raise SnapshotError(f"snapshot {digest[:12]}: {len(gone)} of its blobs were collected by a concurrent gc "
                                "before it was recorded; take it again")
        c.execute("INSERT INTO snapshots(digest, size, kind, files, bytes, name, source, time, used) "
                  "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(digest) DO UPDATE SET used = excluded.used, "
                  "name = COALESCE(excluded.name, snapshots.name)",
                  (digest, size, manifest["kind"], len(manifest["files"]), sum(f["size"] for f in manifest["files"]),
                   name, source, now, now))
        c.executemany("INSERT OR IGNORE INTO snapshot_blobs(snapshot, digest) VALUES (?, ?)",
                      [(digest, d) for d, _ in blobs])


def _team_record(link: Any, digest: str, size: int, manifest: dict[str, Any], name: str | None) -> bool:
    """Record the snapshot on the team index (team schema 3: team gc on any machine keeps its blobs;
    a snapshot recorded already is marked used now); whether the team index holds snapshots."""
    from .keeps import of

    def work() -> bool:
        m = of(link.index)
        if not m.marks_supported:
            return False
        m.record_snapshot(digest, size, manifest["kind"], {f["blob"] for f in manifest["files"]},
                          len(manifest["files"]), sum(f["size"] for f in manifest["files"]), name)
        return True
    return bool(link.attempt(work))


def _upload(s: Any, local: Store, digest: str, size: int, manifest: dict[str, Any], name: str | None) -> None:
    link = getattr(s, "link", None)
    if link is None:
        return
    from .link import Offline

    items = [(f["blob"], local.blobs.path(f["blob"])) for f in manifest["files"]] + [(digest, local.blobs.path(digest))]
    try:
        # recorded first, then uploaded: a team gc either read the record (and keeps the blobs) or
        # finished deleting before it (and the upload puts back what is missing): team.pgmarks
        recorded = _team_record(link, digest, size, manifest, name)
        link.attempt(lambda: link.blobs.put_many(list(dict(items).items())))
        if not recorded:
            import warnings

            from ..errors import MemolabWarning

            warnings.warn(f"memolab: snapshot {digest[:12]} uploaded, but the team index predates shared snapshots "
                          "(schema < 3): a team gc run on a machine that has not taken or restored it may delete its "
                          "blobs; run `memolab remote upgrade`", MemolabWarning, stacklevel=3)
    except Offline as e:
        import warnings

        warnings.warn(f"memolab: snapshot {digest[:12]} stored here but not uploaded: the team store is unreachable "
                      f"({e}); take it again once it is back", MemolabWarning, stacklevel=3)


# -- restoring --------------------------------------------------------------------------------

def _checked(manifest: Any, digest: str) -> dict[str, Any]:
    """The manifest, if it is one this memolab wrote in every detail that restoring relies on."""
    def bad(why: str) -> SnapshotError:
        return SnapshotError(f"snapshot {digest[:12]}: its manifest is not valid ({why}); nothing restored")

    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT or manifest.get("kind") not in ("file", "folder"):
        raise bad("not a memolab snapshot")
    files, folders = manifest.get("files"), manifest.get("folders", [])
    if not isinstance(files, list) or not isinstance(folders, list):
        raise bad("no file list")
    if manifest["kind"] == "file" and (len(files) != 1 or not isinstance(files[0], dict) or files[0].get("path") != ""):
        raise bad("a file snapshot names one file")
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("blob"), str) or not _DIGEST.match(f["blob"]):
            raise bad("a file without a digest")
        if not isinstance(f.get("size"), int) or isinstance(f["size"], bool) or f["size"] < 0:
            raise bad(f"a bad size for {f.get('path')!r}")
        if manifest["kind"] == "folder":
            _safe_rel(f.get("path"), bad)
    for d in folders:
        _safe_rel(d, bad)
    return manifest


def _safe_rel(rel: Any, bad: Any) -> PurePosixPath:
    """A relative path from a manifest, refused unless it stays below the folder it is restored to."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel or rel.startswith("/"):
        raise bad(f"an unsafe path {rel!r}")
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/")):
        raise bad(f"an unsafe path {rel!r}")
    return p


def _manifest(s: Any, local: Store, digest: str) -> tuple[dict[str, Any], int, bool]:
    """(manifest, its size, whether it came from the team store)."""
    p = local.blobs.path(digest)
    try:
        size = p.lstat().st_size if stat.S_ISREG(p.lstat().st_mode) else -1
    except FileNotFoundError:
        size = -1
    from_team = False
    if size < 0:
        link = getattr(s, "link", None)
        if link is None:
            raise SnapshotError(f"snapshot {digest[:12]} is not in the store {local.root} (and no team store is "
                                "configured)")
        from .link import Offline

        try:
            n = link.attempt(lambda: link.blobs.size(digest))
            if n is None:
                raise SnapshotError(f"snapshot {digest[:12]} is neither in the store {local.root} nor in the team store")
            _fetch(s, [(digest, n)])
        except Offline as e:
            raise SnapshotError(f"snapshot {digest[:12]} is not in the store {local.root} and the team store is "
                                f"unreachable ({e})") from None
        size, from_team = n, True
    data = local.blobs.get(digest, size, verify="always")
    try:
        manifest = json.loads(bytes(data))
    except ValueError:
        raise SnapshotError(f"{digest[:12]} is a stored blob, not a snapshot") from None
    return _checked(manifest, digest), size, from_team


def _fetch(s: Any, blobs: list[tuple[str, int]]) -> None:
    """Download ``blobs`` from the team store into the local folder, verified (``fetch_blobs``)."""
    if blobs:
        s.fetch_blobs([{"payload": blobs[0][0], "payload_size": blobs[0][1], "inline": None,
                        "buffers": json.dumps(blobs[1:])}])


def restore(digest: str, path: str | os.PathLike[str] | None = None, *, overwrite: bool = False,
            store: Any = None, kind: str | None = None) -> Path:
    """Give snapshot ``digest`` back at ``path`` (default: its original name in the working
    directory), verified: from the local store, else from the team store. The path written.
    ``kind`` ('file', 'folder'): refused, writing nothing, if the snapshot is of another kind."""
    digest = str(digest).strip().lower()
    if not _DIGEST.match(digest):
        raise SnapshotError(f"{digest!r} is not a snapshot digest (64 hexadecimal digits, as `memolab snapshot` prints)")
    s = _store(store)
    local: Store = getattr(s, "local", s)
    manifest, size, from_team = _manifest(s, local, digest)
    if kind is not None and manifest["kind"] != kind:
        raise SnapshotError(f"snapshot {digest[:12]} is a {manifest['kind']}, not a {kind}; nothing restored"
                            + (" (a folder's snapshot goes with memolab.Dir)" if kind == "file" else ""))
    files = manifest["files"]
    missing = []
    for f in files:
        p = local.blobs.path(f["blob"])
        try:
            if p.lstat().st_size == f["size"] and stat.S_ISREG(p.lstat().st_mode):
                continue
        except FileNotFoundError:
            pass
        missing.append((f["blob"], f["size"]))
    if missing:
        if getattr(s, "link", None) is None:
            raise SnapshotError(f"snapshot {digest[:12]}: {len(missing)} of its files are not in the store {local.root}")
        from .link import Offline

        try:
            for i in range(0, len(missing), 256):
                _fetch(s, missing[i:i + 256])
        except Offline as e:
            raise SnapshotError(f"snapshot {digest[:12]}: {len(missing)} of its files are not here and the team store "
                                f"is unreachable ({e})") from None
    name = manifest.get("name") if isinstance(manifest.get("name"), str) else None
    if path is None:
        if not name or "/" in name or name in (".", ".."):
            raise SnapshotError(f"snapshot {digest[:12]}: give the path to restore it to")
        path = Path.cwd() / name
    dest = Path(path)
    from ..settings.progress import Bar

    if manifest["kind"] == "file":
        if not dest.parent.exists():
            dest.parent.mkdir(parents=True)
        _write(local, files[0], dest, overwrite)
    else:
        _folder(dest)
        for rel in manifest.get("folders", []):
            _folder_below(dest, PurePosixPath(rel))
        made: set[PurePosixPath] = set()
        for f in files:  # the folders first, one by one (each checked: a link is never followed)
            rel = PurePosixPath(f["path"])
            if len(rel.parts) > 1 and rel.parent not in made:
                _folder_below(dest, rel.parent)
                made.add(rel.parent)
        with Bar(f"restore {dest.name}", sum(f["size"] for f in files), unit="B") as bar, \
                ThreadPoolExecutor(IO_THREADS) as pool:
            def one(f: dict[str, Any]) -> int:
                _write(local, f, dest.joinpath(*PurePosixPath(f["path"]).parts), overwrite)
                return int(f["size"])
            small = [f for f in files if f["size"] < THREADED_MAX]
            for n in chain(pool.map(one, small), (one(f) for f in files if f["size"] >= THREADED_MAX)):
                bar.update(n)
    try:
        _record(local, digest, size, manifest, name=None, source=None)  # here now: offline next time, kept by gc
    except (sqlite3.Error, OSError, SnapshotError) as e:  # a read-only store, a concurrent gc: restored all the same
        import logging

        logging.getLogger("memolab").debug("snapshot %s not recorded: %r", digest[:12], e)
    if from_team:
        _touch_team(s, digest)
    return dest


def _touch_team(s: Any, digest: str) -> None:
    """A snapshot restored from the team is used: team gc lets go only unnamed ones unused for RECENT."""
    from .keeps import of
    from .link import Offline

    link = s.link
    try:
        link.attempt(lambda: of(link.index).touch_snapshot(digest) if of(link.index).marks_supported else False)
    except Offline as e:
        import logging

        logging.getLogger("memolab").debug("snapshot %s: team record not marked used: %r", digest[:12], e)


def forget(digest: str, *, store: Any = None) -> dict[str, Any]:
    """Let snapshot ``digest`` go here and on the team index (``memolab snapshot --forget``): gc, and
    team gc, may then collect its blobs (those nothing else holds). ``{"here": bool, "team": bool or
    None (no team store) or "unreachable"}``."""
    digest = str(digest).strip().lower()
    s = _store(store)
    local: Store = getattr(s, "local", s)
    with local.index.write() as c:
        here = c.execute("DELETE FROM snapshots WHERE digest=?", (digest,)).rowcount > 0
        c.execute("DELETE FROM snapshot_blobs WHERE snapshot=?", (digest,))
    team: Any = None
    link = getattr(s, "link", None)
    if link is not None:
        from .keeps import of
        from .link import Offline

        try:
            team = bool(link.attempt(lambda: of(link.index).forget_snapshot(digest)))
        except Offline:
            team = "unreachable"
    return {"here": here, "team": team}


def _folder(p: Path) -> None:
    """``p`` as a real folder (made if missing); a link there is refused, never followed."""
    try:
        st = p.lstat()
    except FileNotFoundError:
        p.mkdir(parents=True)
        return
    if not stat.S_ISDIR(st.st_mode):
        raise SnapshotError(f"{p}: exists and is not a folder ({'a link' if stat.S_ISLNK(st.st_mode) else 'a file'}); "
                            "nothing written there")


def _folder_below(dest: Path, rel: PurePosixPath) -> None:
    cur = dest
    for part in rel.parts:
        cur = cur / part
        _folder(cur)


def _write(local: Store, f: dict[str, Any], target: Path, overwrite: bool) -> None:
    data = local.blobs.get(f["blob"], f["size"], verify="always")
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError(f"{target}: exists and is not a file ({'a link' if stat.S_ISLNK(st.st_mode) else 'a folder'}); "
                                "nothing written there")
        if st.st_size == f["size"] and target.read_bytes() == bytes(data):
            return  # the same bytes already
        if not overwrite:
            raise SnapshotError(f"{target}: exists with other content; pass overwrite=True (--overwrite) to replace it")
    tmp = target.with_name(f".{target.name}.memolab-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o777 if f.get("exec") else 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if st is None and not overwrite:
            _place_new(tmp, target, data)
        else:
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _place_new(tmp: Path, target: Path, data: Any) -> None:
    """``tmp`` onto ``target``, which was missing: a hard link fails where a file appeared since
    (the user's, written meanwhile, is never replaced); a file system without hard links gets a
    rename after one more look."""
    try:
        os.link(tmp, target, follow_symlinks=False)
    except FileExistsError:
        if target.is_symlink() or not target.is_file() or target.read_bytes() != bytes(data):
            raise SnapshotError(f"{target}: appeared with other content while it was restored; nothing written "
                                "there") from None
    except OSError:  # no hard links here (FAT, some network file systems)
        if os.path.lexists(target):
            raise SnapshotError(f"{target}: appeared while it was restored; nothing written there") from None
        os.replace(tmp, target)
        return
    tmp.unlink()


_KINDS = {File: "file", Dir: "folder"}


def restore_missing(arg: File | Dir, overwrite: bool = False, keying: bool = False) -> None:
    """``File.restore``/``Dir.restore``, and what keying a ``File(path, snapshot=D)`` whose path is
    missing calls (``keying``: a failure is the argument's ``HashError``, naming it)."""
    try:
        if not arg.snapshot:
            raise SnapshotError(f"{arg!r} names no snapshot (snapshot=DIGEST, as `memolab snapshot` prints)")
        restore(arg.snapshot, arg.path, overwrite=overwrite, kind=_KINDS[type(arg)])
    except SnapshotError as e:
        if not keying:
            raise
        from ..errors import HashError

        raise HashError(f"{arg!r}: {arg.path} does not exist and could not be restored from its snapshot: {e}",
                        "", arg) from None


# -- gc ---------------------------------------------------------------------------------------

def drop_stale(index: Any, now: float | None = None, dry_run: bool = False) -> list[str]:
    """The unnamed snapshots neither taken nor restored here for ``RECENT`` seconds: let go (their
    records; ``collect_garbage`` then takes the blobs nothing else holds)."""
    c = index.conn()
    if c.execute("SELECT 1 FROM sqlite_master WHERE name='snapshots'").fetchone() is None:
        return []
    cutoff = (time.time() if now is None else now) - RECENT
    gone = [d for (d,) in c.execute("SELECT digest FROM snapshots WHERE name IS NULL AND used < ?", (cutoff,))]
    if gone and not dry_run:
        with index.write() as w:
            w.executemany("DELETE FROM snapshot_blobs WHERE snapshot=?", [(d,) for d in gone])
            w.executemany("DELETE FROM snapshots WHERE digest=?", [(d,) for d in gone])
    return gone
