"""``memolab snapshot PATH`` and ``memolab restore DIGEST [PATH]``: files and folders by digest
(``memolab.team.snapshots``: how they are stored, kept by gc, and restored safely)."""
from __future__ import annotations

import argparse
import time

from .common import OK, PROBLEM, CliError, command, emit_json, human_bytes, json_option, open_store, options, store_root


def _snapshot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", metavar="PATH", help="a file or a folder")
    p.add_argument("--name", help="a label: a named snapshot is never let go by gc (until --forget)")
    p.add_argument("--forget", metavar="DIGEST", help="let snapshot DIGEST go: gc may collect its blobs")
    p.add_argument("--list", action="store_true", help="list the snapshots recorded in this store")
    json_option(p)


@command("snapshot", "store a file or folder by content (and in the team store); print its digest")
@options(_snapshot_options)
def cmd_snapshot(args: argparse.Namespace) -> int:
    from ..team import snapshots

    if args.list or args.forget:
        if args.forget:
            got = snapshots.forget(args.forget, store=store_root(args))
            if not got["here"] and got["team"] is not True:
                raise CliError(PROBLEM, f"no snapshot {args.forget} recorded in {store_root(args)}"
                                        + ("" if got["team"] is None else f" nor on the team index ({got['team']})"))
            team = {None: "", True: "; let go on the team index too", False: "",
                    "unreachable": "; the team index is unreachable: it still keeps it"}[got["team"]]
            print(f"snapshot {args.forget[:12]} let go: gc may collect its blobs{team}")
            return OK
        store = open_store(args, write=False)
        c = store.index.conn()
        has = c.execute("SELECT 1 FROM sqlite_master WHERE name='snapshots'").fetchone()
        rows = c.execute("SELECT digest, kind, files, bytes, name, source, used FROM snapshots ORDER BY used DESC"
                         ).fetchall() if has else []
        if args.json:
            emit_json({"snapshots": [dict(zip(("digest", "kind", "files", "bytes", "name", "source", "used"), r,
                                              strict=False)) for r in rows]})
            return OK
        for d, kind, files, size, name, source, used in rows:
            print(f"{d}  {kind} {files} file(s) {human_bytes(size)}  {name or ''}  {source or ''}  "
                  f"(used {time.strftime('%Y-%m-%d', time.localtime(used))})")
        return OK
    if not args.path:
        raise CliError(PROBLEM, "snapshot: give a PATH (a file or a folder)")
    try:
        digest = snapshots.snapshot(args.path, name=args.name, store=store_root(args))
    except snapshots.SnapshotError as e:
        raise CliError(PROBLEM, str(e)) from None
    if args.json:
        emit_json({"digest": digest, "path": args.path, "name": args.name})
    else:
        print(digest)
    return OK


def _restore_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("digest", metavar="DIGEST", help="what `memolab snapshot` printed")
    p.add_argument("path", nargs="?", metavar="PATH", help="where to put it (default: its name, here)")
    p.add_argument("--overwrite", action="store_true", help="replace files there whose content differs")
    json_option(p)


@command("restore", "give a snapshot back at PATH, verified: from this store, else from the team store")
@options(_restore_options)
def cmd_restore(args: argparse.Namespace) -> int:
    from ..team import snapshots

    try:
        where = snapshots.restore(args.digest, args.path, overwrite=args.overwrite, store=store_root(args))
    except snapshots.SnapshotError as e:
        raise CliError(PROBLEM, str(e)) from None
    if args.json:
        emit_json({"digest": args.digest, "path": str(where)})
    else:
        print(f"restored {args.digest[:12]} to {where}")
    return OK
