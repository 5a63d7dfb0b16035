"""``memolab doctor``: check a store end to end, fix what is safe, say what is not.

Checks, in order: the index file (opens, not from a newer memolab, ``PRAGMA
integrity_check``), its rows (every column that must decode does), every blob
against its digest, references to missing blobs, temporary files left by dead
writers. Damaged blobs are quarantined and the evaluations using them (or using
an undecodable row) are marked corrupt, so their next call recomputes them;
temporary files of writers that are gone are removed. Exit status 0 when the
store is healthy, 1 when damage was found (and fixed where possible).

A damaged index is never changed without ``--repair``, which moves it aside
(``index.sqlite.damaged-<time>``, with its ``-wal``) and rebuilds a fresh one from
the rows that can still be read out of it, each kept only if every blob it refers
to is present and verifies. Blobs do not record the call they belong to, so
rows that cannot be read cannot be rebuilt: they are recomputed on their next
call, and their blobs go at the next ``gc``. Logs and miss history are not
carried over. Doctor never prints a traceback: an unexpected failure is one
line and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable
from .common import PROBLEM, CliError, Progress, command, confirm, emit_json, human_bytes, options, store_root, table

Out = Callable[[str], None]


def _index_problem(path: Path) -> tuple[str | None, bool]:
    """(problem, repairable) of the index file: None when it opens and passes ``integrity_check``."""
    from ..store.health import ReadOnlyIndex

    if not path.exists():
        return None, False
    try:
        idx = ReadOnlyIndex(path)
        # O(the index's pages): a phase with no count SQLite reports, drawn as one step with its time
        with Progress(f"doctor: index integrity check ({human_bytes(path.stat().st_size)})", 1) as bar:
            rows = [r[0] for r in idx.conn().execute("PRAGMA integrity_check(20)").fetchall()]
            bar.update()
    except StoreUnavailable as e:
        return str(e), e.kind == "damaged"
    except sqlite3.OperationalError as e:
        return f"the index cannot be opened ({e})", False
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        return f"the index is damaged ({type(e).__name__}: {e})", True
    if rows != ["ok"]:
        return f"the index fails its integrity check: {'; '.join(rows[:5])}", True
    return None, False


# -- repair --------------------------------------------------------------------------------

def _read_rows(conn: sqlite3.Connection, table_: str, cols: list[str], order: str) -> tuple[list[tuple[Any, ...]], int]:
    """The rows of ``table_`` that can be read, skipping over damaged stretches: (rows, read errors)."""
    out: list[tuple[Any, ...]] = []
    errors = 0
    last: Any = None
    skip = 1
    while True:
        where = "" if last is None else f" WHERE {order} > ?"
        try:
            cur = conn.execute(f"SELECT {','.join(cols)} FROM {table_}{where} ORDER BY {order}",
                               () if last is None else (last + skip - 1 if isinstance(last, int) else last,))
            for r in cur:
                out.append(r)
                last = r[0]
                skip = 1
            return out, errors
        except sqlite3.DatabaseError:
            errors += 1
            if errors > 60 or not isinstance(last, int):
                return out, errors
            skip *= 4  # jump over the damaged pages, further each time


def _intact(store: Any, row: dict[str, Any]) -> bool:
    """Is everything a salvaged row refers to present and equal to its digest?"""
    refs = [tuple(r) for r in json.loads(row["buffers"] or "[]")]
    if row.get("inline") is not None:  # payload and buffers inside the row itself
        from ..store import inline_problem

        return inline_problem(row) is None
    digests = [row["payload"], *(d for d, _ in refs)]
    return all(d is not None and store.blobs.verify(d) is None for d in digests)


def repair_index(root: Path, out: Out) -> int:
    from ..store import Store, get_store
    from ..store.health import row_problem
    from ..store.sqlite import EVAL_COLUMNS, KEEP_SOURCES_SQL

    index = root / "index.sqlite"
    aside = root / f"index.sqlite.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(index, aside)
    if Path(f"{index}-wal").exists():
        os.replace(f"{index}-wal", f"{aside}-wal")  # committed rows may live only there
    Path(f"{index}-shm").unlink(missing_ok=True)
    out(f"moved the damaged index to {aside.name}")
    rows: list[tuple[Any, ...]] = []
    cols: list[str] = list(EVAL_COLUMNS)
    sources: list[tuple[Any, ...]] = []
    errors = 0
    try:
        old = sqlite3.connect(f"{aside.absolute().as_uri()}?mode=ro", uri=True)
        have = {r[1] for r in old.execute("PRAGMA table_info(evaluations)")}
        cols = ["id", *(k for k in EVAL_COLUMNS if k in have and k != "id")]
        if "inline" in have:
            cols.append("inline")  # small results kept in the row itself
        rows, errors = _read_rows(old, "evaluations", cols, "id")
        sources, _ = _read_rows(old, "sources", ["digest", "symbol", "source"], "digest")
        old.close()
    except sqlite3.Error:
        errors += 1
    store = Store(root)  # a fresh index (the cached handle of this process pointed at the old file)
    kept = dropped = 0
    with store.index.write() as c:
        for r in rows:
            row = dict(zip(cols, r, strict=False))
            if row["status"] != "done" or row_problem(row) is not None:
                dropped += 1
                continue
            if not _intact(store, row):
                dropped += 1
                continue
            c.execute(f"INSERT OR IGNORE INTO evaluations({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                      [row[k] for k in cols])
            kept += 1
        c.executemany(KEEP_SOURCES_SQL, sources)
    from ..store import forget_open_stores

    forget_open_stores(root)  # later calls in this process open the new index
    get_store(root)
    if kept:
        out(f"rebuilt the index: recovered {kept} of {kept + dropped} readable evaluation{'s' if kept + dropped != 1 else ''}"
            + (f" ({dropped} dropped: not finished, undecodable, or their blobs are missing or damaged)" if dropped else "")
            + (f"; {errors} damaged stretch{'es' if errors != 1 else ''} could not be read" if errors else ""))
    else:
        out("started an empty index: no evaluation could be recovered from the damaged one")
    out("not recovered: logs and miss history. Evaluations that were not recovered are recomputed on their next call; "
        "their blobs go at the next `memolab gc`")
    return 1


# -- checks of a readable store ------------------------------------------------------------------

def _check_store(root: Path, out: Out, facts: dict[str, Any] | None = None, drop_leases: bool = False) -> int:
    from ..store.reading import open_for_reading

    store = open_for_reading(root)  # an older store is checked as it is, never migrated (nothing changed then)
    readonly = hasattr(store, "problem")
    if readonly:
        out(f"note: {store.problem}; nothing will be changed")
    # Every row of the index read once (``doctorwalk``): text that is not UTF-8, columns that do
    # not decode, results kept in their row against their digests, the blobs each refers to, the
    # kept counts recounted. (Each phase draws its bar on a terminal once it has lasted a moment:
    # docs/performance.md says what each costs at a million rows.)
    from .doctorwalk import walk

    rows = walk(store.index, lambda total: Progress("doctor: reading the index's rows", total))
    try:
        return _check_rows(store, rows, out, facts, drop_leases, readonly)
    finally:
        rows.close()


def _check_rows(store: Any, rows: Any, out: Out, facts: dict[str, Any] | None, drop_leases: bool, readonly: bool) -> int:
    from ..store import tmpfiles
    from ..store.layout import is_digest

    bad = 0
    garbled, undecodable = rows.garbled, rows.undecodable
    # miss records `memolab why` could not explain: advisory, so removed (the next miss is recorded afresh)
    from ..calls.explain import record_problem
    from ..store.sqlite import parse_miss

    bad_misses = [i for i, fn, t, raw in store.index.conn().execute(
        "SELECT id, CAST(fn AS BLOB), time, CAST(explanation AS BLOB) FROM misses")
        if record_problem(parse_miss("", t, raw)) is not None]
    # the per-function counts kept by triggers (tracking/counts.py): recounted where they drifted
    # (a writer that bypassed them: INSERT OR IGNORE of a stored key by an older memolab)
    from ..tracking import counts

    for line in rows.drift:
        out(f"kept count {line}" + ("" if readonly else ": recounted"))
    # every run's arguments in value order (tracking/argindex.py), counted in the same walk:
    # rebuilt where they drifted
    from ..tracking import argindex

    for line in rows.args_drift:
        out(f"kept {line}" + ("" if readonly else ": rebuilt"))
    # blobs against their digests
    checked = 0
    damaged: dict[str, str] = {}
    digests = list(store.blobs)
    with Progress("doctor: verifying blobs", len(digests)) as bar:  # a bar on a terminal, nothing on a pipe
        for d in digests:
            checked += 1
            problem = store.blobs.verify(d)
            bar.update()
            # A blob that vanished since the listing was collected by a concurrent
            # gc (or clear): only a reference to it, checked below, makes it a problem.
            if problem and problem != "missing" and not problem.endswith("is missing"):
                damaged[d] = problem

    def decide(c: Any) -> tuple[list[tuple[str, str]], dict[int, list[str]]]:
        # the walk's references and counts stand if nothing was committed since it began (asked
        # under the write lock, before this transaction's own writes); else they are read again
        same = rows.unchanged()
        if c is not None:
            # rows holding text that is not UTF-8: rewritten readable (with replacement characters)
            # and taken out of use, so `ls` and the dashboard can show them again
            for i, row in garbled.items():
                sets = [k for k in row if k not in ("id", "inline") and isinstance(row[k], str)]
                c.execute(f"UPDATE evaluations SET {', '.join(k + '=?' for k in sets)}, status='corrupt', reason=? "
                          "WHERE id=?", [row[k] for k in sets] + ["undecodable text in the index", i])
            if bad_misses:
                c.executemany("DELETE FROM misses WHERE id=?", [(i,) for i in bad_misses])
            if rows.drift and same and rows.recount is not None:
                counts.rewrite(c, *rows.recount)
            elif rows.drift:
                counts.check(c, repair=True)
            if rows.args_drift:
                argindex.rebuild(c)
        refs = rows.refs if same else store.index.referenced_blobs(only_done=True)
        # (a name that is no digest is a damaged row, marked below: never made a path)
        missing = [d for d in refs if d not in damaged and is_digest(d) and not store.blobs.path(d).exists()]
        problems = [(d, p) for d, p in damaged.items()] + [(d, "missing") for d in missing]
        affected: dict[int, list[str]] = {}
        for d in [*damaged, *missing]:
            for i in refs.get(d, []):
                affected.setdefault(i, []).append(d)
        if c is not None:
            for i in affected:
                store.index.mark_corrupt(i)
            for i, why in undecodable.items():
                store.index.mark_corrupt(i, why)
        return problems, affected

    if readonly:
        problems, affected = decide(None)
    else:
        # Decide under the write lock, from references read now: rows written,
        # replaced or dropped while we were hashing (fresh, clear, gc in other
        # processes) must count as they are, not as they were at the start.
        with store.index.write() as c:
            problems, affected = decide(c)
        store.forget()
    if undecodable:
        bad += 1
        out(table(["EVALUATION", "PROBLEM"], [(f"#{i}", why) for i, why in sorted(undecodable.items())]))
        out(f"{len(undecodable)} evaluation{'s' if len(undecodable) != 1 else ''} with an undecodable or damaged index row"
            + ("" if readonly else " marked corrupt: recomputed (and replaced) on their next call"))
    if bad_misses:
        bad += 1
        out(f"{len(bad_misses)} damaged miss record{'s' if len(bad_misses) != 1 else ''} (`memolab why` cannot explain "
            f"{'them' if len(bad_misses) != 1 else 'it'})" + ("" if readonly else ": removed"))
    if problems:
        bad += 1
        out(table(["BLOB", "PROBLEM"], [(d[:16], p) for d, p in problems]))
        moved = "" if readonly else f"; moved to {store.blobs.quarantine_dir}"
        out(f"{len(problems)} of {checked} blobs damaged or missing{moved}")
        out(f"{len(affected)} evaluation{'s' if len(affected) != 1 else ''} "
            f"{'affected' if readonly else 'marked corrupt'} ({', '.join('#' + str(i) for i in sorted(affected))}): "
            "they will be recomputed on their next call")
    # temporary files of writers that are gone
    litter = [t for t in tmpfiles.scan(store.blobs.tmp) if t.alive is not True]
    dead = [t for t in litter if t.alive is False or t.age > 3600]
    removed: list[Any] = []
    if dead:
        removed = [] if readonly else tmpfiles.reclaim(store.blobs.tmp)
        size = sum(t.size for t in dead)
        out(f"{len(dead)} temporary file{'s' if len(dead) != 1 else ''} ({human_bytes(size)}) left by writers that are "
            f"gone{'' if readonly else f': removed {len(removed)}'}")
    _dead_leases(store, out, facts, drop_leases and not readonly)
    if not bad:
        out(f"all {checked} blobs verified against their digests; index integrity ok; no problems")
    if facts is not None:
        facts.update(checked=checked, problems=[{"blob": d, "problem": p} for d, p in problems],
                     quarantine=str(store.blobs.quarantine_dir), marked_corrupt=sorted(affected),
                     undecodable={str(i): why for i, why in sorted(undecodable.items())},
                     miss_records_removed=0 if readonly else len(bad_misses),
                     temp_files_removed=len(removed), read_only=readonly)
    return 1 if bad else 0


def _dead_leases(store: Any, out: Out, facts: dict[str, Any] | None, drop: bool) -> None:
    """Leases of provably dead owners (``deadleases``), in this store and in the team index when
    one is configured: listed; dropped with ``drop`` (``--drop-dead-leases``). Advisory: a claim
    takes such a lease over anyway, so they never make doctor fail."""
    from ..settings import config
    from ..store import deadleases

    local = deadleases.local_dead(store)
    team: list[Any] = []
    others, team_problem = 0, None
    remote = config.remote()
    index = None
    if remote is not None and remote[0] and remote[1]:
        from ..team.link import open_index

        try:
            index = open_index(remote[0], config.settings().remote_timeout)
            team, others = deadleases.team_dead(index)
        except Exception as e:  # unreachable, an older schema: the local check stands
            team_problem = f"{type(e).__name__}: {e}"
    dropped = {"local": 0, "team": 0}
    if drop and local:
        dropped["local"] = deadleases.drop_local(store)
    if drop and team and index is not None:
        try:
            dropped["team"] = deadleases.drop_team(index, team)
        except Exception as e:  # the team's index (psycopg): errors of many kinds; the local check stands
            team_problem = f"{type(e).__name__}: {e}"
    rows = [("local", k[0], deadleases.describe(o)) for o, k in local] + \
           [("team", k[0], deadleases.describe(o)) for o, k in team]
    if rows:
        out(table(["WHERE", "LEASE OF", "OWNER (DEAD)"], rows))
        what = f"{len(rows)} lease{'s' if len(rows) != 1 else ''} of owners that are gone"
        out(what + (f": dropped ({dropped['local']} local, {dropped['team']} team)" if drop else
                    ": each is taken over by the next call of its key; `memolab doctor --drop-dead-leases` drops them"))
    if others:
        out(f"team index: {others} other lease{'s' if others != 1 else ''} (live, or of other machines: judged by "
            "their heartbeat)")
    if team_problem:
        out(f"team index: leases not checked ({team_problem})")
    if facts is not None:
        facts["dead_leases"] = {"local": [{"fn": k[0], "owner": o} for o, k in local],
                                "team": [{"fn": k[0], "owner": o} for o, k in team],
                                "dropped": dropped, "team_problem": team_problem}


def run(root: Path, repair: bool = False, out: Out = print, facts: dict[str, Any] | None = None,
        confirm_repair: Callable[[], bool] = lambda: True, drop_leases: bool = False) -> int:
    root = Path(root)
    if not root.is_dir():
        out(f"no store at {root}" + (" (it is a file)" if root.exists() else ""))
        return 1 if root.exists() else 0
    from ..store import layout

    try:
        layout.check(root)  # a store whose folders are links: nothing is checked, moved or deleted through them
    except StoreUnavailable as e:
        out(str(e))
        if facts is not None:
            facts["index_problem"] = str(e)
        return 1
    problem, repairable = _index_problem(root / "index.sqlite")
    if facts is not None:
        facts["index_problem"] = problem
    if problem:
        out(f"index: {problem}")
        if not repairable:
            return 1
        if not repair:
            out(f"run `memolab --store {root} doctor --repair` to move it aside and rebuild it from what can be read")
            return 1
        if not confirm_repair():
            out("nothing repaired")
            return 1
        if facts is not None:
            facts["repaired"] = True
        return repair_index(root, out)
    return _check_store(root, out, facts, drop_leases)


def _doctor_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repair", action="store_true",
                   help="move a damaged index aside and rebuild it from the rows that can be read")
    p.add_argument("-y", "--yes", action="store_true",
                   help="repair without asking (required for --repair when stdin is not a terminal)")
    p.add_argument("--drop-dead-leases", action="store_true",
                   help="drop the leases of owners that are provably gone (this store's, and the team's of this host)")
    p.add_argument("--json", action="store_true", help="machine-readable output (fields in docs/cli.md)")


@command("doctor", "check the index and verify every blob; quarantine damage; --repair rebuilds a damaged index")
@options(_doctor_options)
def cmd_doctor(args: argparse.Namespace) -> int:
    root = store_root(args)
    if not root.is_dir():  # like every command: no store is made here, and none is a problem (exit 1)
        raise CliError(PROBLEM, f"no store at {root}" + (" (it is a file)" if root.exists() else ""))
    lines: list[str] = []
    facts: dict[str, Any] = {"index_problem": None, "repaired": False}
    out: Out = lines.append if args.json else print
    # --repair moves the index aside: asked only when there is something to repair, and
    # refused without a terminal unless --yes (as clear and gc are)
    ask = lambda: confirm(args, f"move the damaged index of {root} aside and rebuild it")  # noqa: E731
    try:
        rc = run(root, repair=args.repair, out=out, facts=facts, confirm_repair=ask, drop_leases=args.drop_dead_leases)
        if args.json:
            emit_json({"ok": rc == 0, **facts, "messages": lines})
        return rc
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except CliError:
        raise  # a refused --repair: memolab.cli.main prints it (exit 2)
    except Exception as e:  # doctor is run on broken stores: never a traceback
        if os.environ.get("MEMOLAB_DEBUG"):
            raise
        print(f"memolab doctor: could not finish: {type(e).__name__}: {e}")
        return 2
