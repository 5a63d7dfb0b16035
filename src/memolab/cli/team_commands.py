"""``memolab remote status|upgrade``, ``memolab sync``, ``memolab pull``: the team store from the shell.

Registered into ``memolab.cli``'s command table by ``build_parser``; nothing
here runs at ``import memolab``. Same conventions as every command
(docs/cli.md): ``--json``, exit 0 ok, 1 a problem (team store unreachable, no
remote configured), 2 usage.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from typing import Any

from ..errors import MemolabWarning
from ..key import Key
from .common import PROBLEM, USAGE, CliError, Progress, command, emit_json, json_option, options, parse_age, store_root


def _quiet() -> None:
    """The commands report the team store's state themselves: its warnings (unreachable,
    unsigned) would only repeat it on stderr."""
    import warnings

    warnings.simplefilter("ignore", MemolabWarning)


def _team_store(args: argparse.Namespace, create: bool = False) -> Any:
    """The local store, in front of the configured team store (``CliError`` if none is configured)."""
    from ..settings import config
    from ..store import get_store

    _quiet()
    remote = config.remote()
    if remote is None or not remote[0] or not remote[1]:
        raise CliError(PROBLEM, "no team store configured: set MEMOLAB_REMOTE (postgresql://…) and "
                                "MEMOLAB_REMOTE_BLOBS (s3://bucket/prefix), or [tool.memolab] in pyproject.toml "
                                "(docs/team.md)")
    root = store_root(args)
    if not create and not ((root / "index.sqlite").is_file() or (root / "blobs").is_dir()):
        raise CliError(PROBLEM, f"no store at {root} (nothing memoized there yet? set MEMOLAB_STORE or --store)")
    store = get_store(root)
    if not hasattr(store, "link"):
        problem = getattr(store, "problem", None)
        raise CliError(PROBLEM, f"the local store {root} cannot be used: {problem}")
    return store


def _unreachable(store: Any, e: BaseException | None = None) -> CliError:
    from ..team.link import Failed

    what = "team store error" if isinstance(e, Failed) else "team store unreachable"
    return CliError(PROBLEM, f"{what} ({store.link.disabled or store.link.last_error}); "
                             f"{_queued(store)} result(s) stay queued locally")


def _queued(store: Any) -> int:
    from ..team import journal

    return journal.count(store.index)


# -- remote status | upgrade -------------------------------------------------------------------

def _remote_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("status", "upgrade"),
                   help="status: reachable? schema version? the team's key? queued vs uploaded; upgrade: migrate "
                        "the team schema and record the team's key (this machine's MEMOLAB_HMAC_KEY) if none is")
    p.add_argument("--set-key", action="store_true",
                   help="with upgrade: make this machine's MEMOLAB_HMAC_KEY the team's, replacing the one recorded "
                        "(a deliberate change of the team's key: rows signed with the old one are then recomputed)")
    json_option(p)


@command("remote", "the team store: `remote status` (reachable? schema? queued uploads) or `remote upgrade`")
@options(_remote_options)
def cmd_remote(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        return _upgrade(args)
    from ..settings import config
    from ..store import signing
    from ..team import journal
    from ..team.link import Offline

    _quiet()
    remote = config.remote()
    if remote is None or not remote[0] or not remote[1]:
        raise CliError(PROBLEM, "no team store configured: set MEMOLAB_REMOTE and MEMOLAB_REMOTE_BLOBS (docs/team.md)")
    root = store_root(args)
    local = (root / "index.sqlite").is_file()
    out: dict[str, Any] = {"index": redact(remote[0]), "blobs": remote[1], "store": str(root),
                           "reachable": False, "index_reachable": False, "blobs_reachable": False,
                           "schema_version": None, "supported": None, "error": None,
                           "queued": 0, "uploaded": 0, "team_evaluations": None,
                           "signed": signing.secret() is not None, "failing": 0, "last_upload_error": None}
    if local:
        journal.foreground_only()  # a status is read-only: no upload now (thread) nor at exit
        try:
            store = _team_store(args)
        finally:
            journal.background = True  # (for a caller that runs commands in-process)
        store.journal.read_only = True
        link = store.link
        out["queued"] = journal.count(store.index)
        out["uploaded"] = journal.uploaded_count(store.index)
        out["failing"], out["last_upload_error"] = journal.failing(store.index)
    else:
        from ..team.link import Link

        link = Link(remote[0], remote[1], config.settings().remote_timeout)
    t0 = time.monotonic()
    recorded: str | None = None
    if remote[0].lower().startswith(("postgresql://", "postgres://")):
        # read-only and bounded: never creates the schema, checks all of it
        from ..team.pgschema import status as pg_status

        st = pg_status(remote[0], link.timeout)
        out["index_reachable"] = st["reachable"]
        out["schema_version"] = st["schema"]
        out["supported"] = f"{st['supported'][0]}-{st['supported'][1]}"
        out["team_evaluations"] = st.get("evaluations")
        recorded = st.get("team_key")
        if not st["ok"]:
            # an empty database is usable (the first client creates the schema); a damaged or
            # unsupported schema, or a server that does not answer in time, is not
            out["index_reachable"] = bool(st.get("empty"))
            out["index_problem"] = st["reachable"] and not st.get("empty")
            out["error"] = st["message"]
    else:
        try:
            idx = link.attempt(lambda: link.index)
            out["index_reachable"] = True
            out["schema_version"], out["supported"] = _schema(idx)
            out["team_evaluations"] = sum(f["evaluations"] for f in link.attempt(idx.functions))
            recorded = link.attempt(idx.team_key)
        except Offline:
            out["error"] = link.disabled or link.last_error
    try:
        b = link.attempt(lambda: link.blobs)
        ping = getattr(b, "ping", None)
        if ping is not None:
            link.attempt(lambda: ping(link.timeout))
        out["blobs_reachable"] = True
    except Offline:
        out["error"] = out["error"] or link.disabled or link.last_error
    out["reachable"] = out["index_reachable"] and out["blobs_reachable"]
    out["team_key"] = _short(recorded)
    out["key_matches"] = None if recorded is None or not out["signed"] else recorded == signing.key_check()
    # whether this machine loads the team's results (docs/team.md, "Trust"; a team that cannot be
    # asked for its key check is judged as unsigned)
    out["not_loaded"] = signing.load_refusal(recorded)
    out["loads"] = out["not_loaded"] is None
    out["seconds"] = round(time.monotonic() - t0, 3)
    if args.json:
        emit_json(out)
    else:
        state = "reachable" if out["reachable"] else f"{'PROBLEM' if out.get('index_problem') else 'UNREACHABLE'} " \
            f"({out['error']})"
        index_state = "reachable" if out["index_reachable"] else "unreachable"
        if not out["index_reachable"] and out.get("index_problem"):
            index_state = "reachable, NOT USABLE"
        print(f"team index   {out['index']}  ({index_state})")
        print(f"team blobs   {out['blobs']}  ({'reachable' if out['blobs_reachable'] else 'unreachable'})")
        print(f"status       {state}")
        if out["schema_version"] is not None:
            print(f"schema       {out['schema_version']} (this memolab supports {out['supported']})")
        if out["team_evaluations"] is not None:
            print(f"team         {out['team_evaluations']} evaluation(s)")
        if out["index_reachable"]:
            if out["team_key"] is None:
                print("team key     none recorded: `memolab remote upgrade` with the team's MEMOLAB_HMAC_KEY records it "
                      "(until then a machine with a mistyped key can publish rows the others refuse)")
            elif out["key_matches"] is False or not out["signed"]:
                print(f"team key     {out['team_key']}: NOT this machine's MEMOLAB_HMAC_KEY: nothing computed here is "
                      "published")
            else:
                print(f"team key     {out['team_key']}: this machine's MEMOLAB_HMAC_KEY")
        print(f"this store   {out['store']}: {out['queued']} queued for upload, {out['uploaded']} uploaded")
        if out["failing"]:
            print(f"failing      {out['failing']} queued result(s) were refused by the team store: "
                  f"{out['last_upload_error']}")
        if not out["signed"]:
            if out["loads"]:
                print("signing      OFF: MEMOLAB_HMAC_KEY is not set and MEMOLAB_TEAM_UNSIGNED=1, so anyone who can "
                      "write to the team store can run code in this process (docs/team.md)")
            else:
                print(f"signing      OFF: team results are not loaded here ({out['not_loaded']})")
    return 0 if out["reachable"] else PROBLEM


def redact(url: str) -> str:
    """A DSN without its password."""
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _schema(idx: Any) -> tuple:
    from ..team import link as _link  # noqa: F401

    version = getattr(idx, "version", None) if hasattr(idx, "dsn") else None  # PgIndex: the schema it found
    if version is None:
        from ..store.sqlite import SCHEMA_VERSION

        version = SCHEMA_VERSION  # a SQLite team index (one host)
        return version, f"{version}"
    try:
        from ..team.pg import SUPPORTED

        return version, f"{SUPPORTED[0]}-{SUPPORTED[1]}"
    except ImportError:
        return version, None


def _upgrade(args: argparse.Namespace) -> int:
    """Migrate the team schema, then establish the team's key: the check value of this machine's
    ``MEMOLAB_HMAC_KEY`` (``signing.key_check``: it tells nothing of the key) is recorded if none
    is, and compared with the recorded one otherwise (``--set-key`` replaces it). Every client
    compares its own with it and refuses to publish when they differ (``TeamStore.key_refusal``)."""
    from ..settings import config
    from ..store import signing
    from ..team.link import open_index

    remote = config.remote()
    if remote is None or not remote[0]:
        raise CliError(PROBLEM, "no team index configured: set MEMOLAB_REMOTE=postgresql://… (docs/team.md)")
    if remote[0].lower().startswith(("postgresql://", "postgres://")):
        from ..team.pg import upgrade

        result: Any = upgrade(remote[0])
    else:
        result = "a SQLite team index upgrades itself when opened"
    mine = signing.key_check()
    key: dict[str, Any] = {"recorded": None, "this_machine": mine is not None, "matches": None, "changed": False}
    index = open_index(remote[0], config.settings().remote_timeout)
    try:
        if mine is not None:
            before, now = index.set_team_key(mine, replace=args.set_key)
            key.update(recorded=_short(now), matches=now == mine, changed=before != now)
        else:
            recorded = index.team_key()
            key.update(recorded=_short(recorded))
    finally:
        close = getattr(index, "close", None)
        if close is not None:
            close()
    if args.json:
        emit_json({"index": redact(remote[0]), "result": result, "team_key": key})
    else:
        print(f"team schema of {redact(remote[0])}: {result if result is not None else 'up to date'}")
        if mine is None:
            print("team key     " + (f"recorded ({key['recorded']}); not compared: MEMOLAB_HMAC_KEY is not set here"
                                     if key["recorded"] else "none recorded: set MEMOLAB_HMAC_KEY (the team's secret) "
                                     "and run `memolab remote upgrade` again to record it"))
        elif key["matches"]:
            print(f"team key     {'recorded now' if key['changed'] else 'recorded'} ({key['recorded']}): this "
                  "machine's MEMOLAB_HMAC_KEY is the team's")
        else:
            print(f"team key     recorded ({key['recorded']}) differs from this machine's MEMOLAB_HMAC_KEY: this "
                  "machine publishes nothing; set the team's key, or pass --set-key to make this key the team's")
    return 0 if key["matches"] is not False else PROBLEM


def _short(check: str | None) -> str | None:
    """A recorded key check as shown: its first hex digits (enough to tell two apart)."""
    return None if check is None else "check " + check.rpartition(":")[2][:12]


# -- sync -------------------------------------------------------------------------------------

def _sync_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true",
                   help="also upload local results computed before the team store was configured "
                        "(those the team index lacks)")
    json_option(p)


@command("sync", "upload this store's queued results to the team store now (in the foreground)")
@options(_sync_options)
def cmd_sync(args: argparse.Namespace) -> int:
    from ..team import journal

    journal.foreground_only()  # this command is the uploader: no thread racing it for the queue
    try:
        return _sync(args)
    finally:
        journal.background = True  # (for a caller that runs commands in-process)


def _sync(args: argparse.Namespace) -> int:
    from ..team.link import Offline

    store = _team_store(args)
    added = 0
    try:
        if args.all:
            added = store.enqueue_all()
        resent = store.journal.reconcile(force=True)  # what the team index lost is queued again
        total = _queued(store)
        with Progress("sync: uploading", total) as bar:
            n = store.journal.drain(progress=bar.update)
        store.flush_hits()
        store.forward_hits()
        from ..team import accepts

        pushed = accepts.push(store)  # accepts (and undos) made here while the team store was away
        from ..store.marks import kept_keys
        from ..team.keeps import send_marks

        marked = send_marks(store, kept_keys(store.local.index.conn()), store.link.attempt)  # (idempotent)
    except Offline as e:
        raise _unreachable(store, e) from None
    store.link.came_back()
    left = _queued(store)
    out = {"uploaded": n, "added_by_all": added, "queued": left, "resent": resent, "accepts": pushed["accepts"],
           "undos": pushed["undos"], "keep_marks": marked}
    if args.json:
        emit_json(out)
    else:
        extra = f" ({added} earlier result(s) added by --all)" if args.all else ""
        lost = f" ({resent} the team index had lost, sent again)" if resent else ""
        sent = (f"; sent {pushed['accepts']} accept(s) and {pushed['undos']} undo(s) made here"
                if pushed["accepts"] or pushed["undos"] else "")
        sent += f"; marked {marked} kept result(s) on the team index" if marked else ""
        print(f"uploaded {n} result(s){extra}{lost}{sent}; {left} still queued")
    return 0 if left == 0 else PROBLEM


# -- pull -------------------------------------------------------------------------------------

class Age(float):
    """``--since 2d``: that long before now by the team index's clock (``cmd_pull``), not this machine's."""


def _parse_since(text: str) -> float:
    """``2d`` (that long ago: an ``Age``), or a date/time (``2026-01-31``, ``2026-01-31T12:00``)."""
    try:
        return Age(parse_age(text))
    except argparse.ArgumentTypeError:
        pass
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an age or a date: {text!r} (try 2d, 12h, 2026-01-31)") from None
    return t.timestamp()


def _pull_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("function", nargs="?", help="function (full symbol or unambiguous suffix); default: every function")
    p.add_argument("--since", type=_parse_since, metavar="WHEN",
                   help="only results finished after WHEN: an age (2d, 12h) or a date (2026-01-31)")
    json_option(p)


@command("pull", "download the team's results (of FUNCTION) into this store, for offline work")
@options(_pull_options)
def cmd_pull(args: argparse.Namespace) -> int:
    from ..team.link import Offline

    store = _team_store(args, create=True)
    fn: str | None = None
    try:
        if args.function:
            fn = _resolve(args.function, [f["fn"] for f in store.link.attempt(store.link.index.functions)])
        bars: list[Progress] = []

        def step(n: int, total: int) -> None:
            if not bars:  # the total is known once the one rows_since query answered
                bars.append(Progress("pull: downloading", total).__enter__())
            bars[0].update(n)

        since = args.since
        if isinstance(since, Age):
            since = store.link.attempt(store.link.index.clock) - since
        try:
            r = store.pull(fn, since, progress=step)
        finally:
            if bars:
                bars[0].__exit__(None, None, None)
    except Offline as e:
        raise _unreachable(store, e) from None
    r["function"] = fn
    if r.get("not_loaded"):
        print(f"memolab: {r['not_loaded']}", file=sys.stderr)  # why nothing was imported (warnings are quiet here)
    if args.json:
        emit_json(r)
    else:
        what = fn or "every function"
        print(f"pulled {what}: {r['imported']} result(s) imported ({r['blobs']} blob(s) downloaded, {r['runs']} run(s) "
              f"of logs), {r['already_here']} already here" + (f", {r['refused']} refused (corrupt or unsigned)"
                                                              if r["refused"] else ""))
    return 0


def _resolve(name: str, fns: list[str]) -> str:
    from .common import short_name

    if name in fns:
        return name
    matches = sorted({f for f in fns if f.endswith(":" + name) or f.endswith("." + name) or short_name(f) == name
                      or f.split(":")[-1] == name})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(PROBLEM, f"no function matches {name!r} in the team store")
    raise CliError(USAGE, f"{name!r} is ambiguous: it matches {', '.join(matches)}; give the full name")


def _local_marks(args: Any) -> tuple[set[Key], set[str]]:
    """The keys this machine's store keeps, and the blobs its snapshots hold (read without
    migrating it; none without a store)."""
    from ..store import marks, schema
    from .common import store_root

    path = store_root(args) / "index.sqlite"
    if not path.is_file():
        return set(), set()
    c = schema.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)  # read as it is: never migrated here
    try:
        return marks.kept_keys(c), marks.snapshot_refs(c)
    finally:
        c.close()


def run_cli(args: Any) -> int:
    """``memolab gc --remote [--older-than AGE] [--max-size SIZE] [--grace AGE] [--yes] [--json]``."""
    from ..errors import RemoteUnavailable, StoreConfigError
    from ..settings import config
    from ..store.marks import SNAPSHOT_RECENT as RECENT
    from ..team.gc import DEFAULT_GRACE, execute, plan
    from ..team.link import open_index, open_remote_blobs
    from .common import OK, PROBLEM, CliError, Progress, emit_json, human_age, human_bytes, human_seconds, table

    remote = config.remote()
    if remote is None or not remote[0] or not remote[1]:
        raise CliError(PROBLEM, "gc --remote: no team store configured: set MEMOLAB_REMOTE (postgresql://…) and "
                                "MEMOLAB_REMOTE_BLOBS (s3://bucket/prefix), or [tool.memolab] in pyproject.toml")
    where = f"{redact(remote[0])} + {redact(remote[1])}"
    grace = DEFAULT_GRACE if args.grace is None else args.grace
    dry = args.dry_run or not args.yes  # a shared store: nothing is deleted unless asked for in so many words
    try:
        index = open_index(remote[0], config.settings().remote_timeout)
        blobs = open_remote_blobs(remote[1], config.settings().remote_timeout)
        kept, held = _local_marks(args)
        p = plan(index, blobs, args.older_than, args.max_size, grace, kept=kept, held=held)
        if not dry:
            with Progress("gc --remote: deleting", len(p.rows) + len(p.blobs)) as bar:
                r = execute(index, blobs, p, progress=bar.update)
        else:
            r = p.summary(dry_run=True)
    except (RemoteUnavailable, OSError) as e:
        raise CliError(PROBLEM, f"gc --remote: team store unreachable ({where}): {e}") from None
    except StoreConfigError as e:
        raise CliError(PROBLEM, f"gc --remote: {e}") from None
    except Exception as e:  # a driver's refusal (psycopg, botocore: errors of many kinds) is told; the rest raised
        if not type(e).__module__.startswith(("psycopg", "botocore", "boto3")):
            raise
        first = (str(e).strip().splitlines() or [""])[0]  # a refusal (permissions, …): one line, not a trace
        raise CliError(PROBLEM, f"gc --remote: the team store refused it ({type(e).__name__}: {first})") from None
    r["grace"] = grace
    if args.json:
        emit_json(r)
        return OK
    print(f"team store {where}: {p.listed} objects, {human_bytes(p.listed_bytes)}")
    if p.rows:
        rows = [(e["id"], e["fn"], human_age(max(e["finished"] or 0, e["last_hit"] or 0)), human_bytes(e["size"]))
                for e in p.rows[:30]]
        print(table(["ID", "FUNCTION", "LAST USED (TEAM)", "SIZE"], rows, right=(0, 3)))
        if len(p.rows) > 30:
            print(f"… and {len(p.rows) - 30} more")
    verb = "would drop" if dry else "dropped"
    free = "would free" if dry else "freed"
    n_rows = len(p.rows)
    print(f"{verb} {n_rows} evaluation{'s' if n_rows != 1 else ''} from the team index; {free} "
          f"{human_bytes(r['blob_bytes'])} ({r['blobs']} blob{'s' if r['blobs'] != 1 else ''}); "
          f"kept {r['young_blobs_kept']} unreferenced blob{'s' if r['young_blobs_kept'] != 1 else ''} written within "
          f"the grace period of {human_seconds(grace)} ({human_bytes(r['young_bytes_kept'])}; perhaps uploads in flight)")
    print(f"kept: {p.kept} row{'s' if p.kept != 1 else ''}, {human_bytes(p.kept_bytes)} (keep marks, the team's and "
          "this machine's: never dropped)")
    if p.stale_snapshots:
        print(f"{'would let go' if dry else 'let go'} {len(p.stale_snapshots)} unnamed team snapshot(s) unused for "
              f"{human_seconds(RECENT)}")
    if p.leases:
        print(f"{'would drop' if dry else 'dropped'} {p.leases} team lease(s) not heart-beaten for "
              f"{human_seconds(grace)} (their machines died)")
    if p.uploads:
        print(f"{'would abort' if dry else 'aborted'} {len(p.uploads)} multipart upload(s) abandoned more than "
              f"{human_seconds(grace)} ago (a process killed mid-upload; their parts are billed until aborted)")
    if dry and not args.dry_run:
        print("dry run: nothing deleted; pass --yes to delete")
    return OK
