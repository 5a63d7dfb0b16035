"""The store's own subcommands: ``ls``, ``show``, ``why``, ``clear``, ``gc``."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
from collections.abc import Sequence
from typing import Any

from ..key import key_of
from ..store import edges, marks
from ..store.inlist import chunks
from ..store.schema import has_runs
from ..tracking import counts, unstored as unstored_runs
from ..tracking.resolve import evaluation_label
from . import argcols, ids
from .common import (
    OK,
    PROBLEM,
    USAGE,
    CliError,
    Progress,
    checkpoint_wal,
    command,
    confirm,
    emit_json,
    eval_json,
    expired,
    expired_counts,
    footer,
    human_age,
    human_bytes,
    human_seconds,
    index_bytes,
    json_option,
    known_functions,
    label_of,
    open_store,
    options,
    parse_age,
    parse_size,
    plural,
    positive_int,
    removed_line,
    resolve_function,
    snapshot_of,
    table,
    terminal_width,
)
from .note_commands import eval_marks
from .run_commands import find_run, list_runs, print_fields, print_notes, print_tags, short_length, show_run, wrapped


def _ls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", nargs="?", help="a function (full symbol or its name)")
    p.add_argument("--limit", type=positive_int, default=50, help="evaluations to show (default 50)")
    p.add_argument("--wide", action="store_true", help="do not cut columns to the terminal's width")
    json_option(p)


@command("ls", "list memoized functions, or the evaluations of one")
@options(_ls_options)
def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args)
    store.flush_hits()
    if not args.func:
        fns = ids.function_rows(store, store.index.functions())  # a.py:train and b.py:train apart
        only_runs = [f for f in known_functions(store) if f.startswith("<process:") or
                     (f not in {x["fn"] for x in fns} and _has_runs_of(store, f))]
        gone = expired_counts(store)
        for f in fns:  # a script's row (a.py:train) counted its own evaluations' already
            f["expired"] = f["expired"] if "expired" in f else gone.get(f["fn"], 0)
        if args.json:
            emit_json({"store": str(store.root), "functions": fns, "runs_only": only_runs})
            return OK
        if not fns:
            print(f"no stored evaluations in {store.root}")
        else:
            extra = ["EXPIRED"] if gone else []
            rows = [(f.get("label") or f["fn"], f["evaluations"], human_bytes(f["size"]), f["hits"],
                     human_seconds(f["compute"]), human_age(f["last"]), *([f["expired"] or ""] if gone else []))
                    for f in fns]
            print(table(["FUNCTION", "EVALS", "SIZE", "HITS", "COMPUTE", "LAST RUN", *extra], rows,
                        right=(1, 2, 3, 4, 6) if gone else (1, 2, 3, 4), width=terminal_width(args.wide), flex=(0,)))
        if only_runs:
            shown = [ids.shown_function(store, f) for f in only_runs]
            print(f"logged runs without stored evaluations: {', '.join(shown)} (memolab runs NAME)")
        return OK
    name, args.script = ids.split_script(store, args.func)  # a.py:train: that script's evaluations
    fn = resolve_function(store, name)
    # a script's: those a run of it produced, selected in SQL (never a list of every id read)
    mine = ("id IN (SELECT eval_id FROM runs WHERE fn=? AND script=?)", (fn, args.script)) if args.script else None
    total = _count_evaluations(store, fn) if mine is None else store.index.conn().execute(
        f"SELECT COUNT(*) FROM evaluations WHERE fn=? AND {mine[0]}", (fn, *mine[1])).fetchone()[0]
    if not total and not args.json and _has_runs_of(store, fn):
        # a script's process runs, or a function whose every run failed: its runs are what there is
        args.status, args.metric, args.all = None, None, False
        return list_runs(store, fn, args)
    if mine is None:
        evs = store.index.evaluations(fn, limit=args.limit)
    else:
        evs = store.index.evaluations(fn, where=mine[0], params=mine[1], limit=args.limit)
    kept = marks.kept_ids(store.index.conn(), [e["id"] for e in evs])
    # the runs that stored nothing (computing, failed, interrupted, lost) are rows among them, newest first
    unstored, capped = unstored_runs.counts(store.index, fn, args.script) if _has_runs_of(store, fn) else ({}, False)
    opened = unstored_runs.newest(store.index, fn, args.limit, args.script) if unstored else []
    given = argcols.of_snapshots([snapshot_of(e) for e in evs])
    run_args = argcols.of_runs(opened, given)
    merged = sorted([(e["finished"] or 0.0, e, a) for e, a in zip(evs, given, strict=True)]
                    + [(r["when"], r, a) for r, a in zip(opened, run_args, strict=True)],
                    key=lambda x: -x[0])[:args.limit]
    evs = [e for _, e, _ in merged if "texts" not in e]
    opened = [r for _, r, _ in merged if "texts" in r]
    if args.json:
        emit_json({"store": str(store.root), "fn": fn, "total": total,
                   "evaluations": [dict(eval_json(e), kept=e["id"] in kept, state=_status(e, e["id"] in kept))
                                   for e in evs],
                   "unstored_runs": [_run_json(r, a) for _, r, a in merged if "texts" in r],
                   "unstored_total": unstored, "unstored_total_capped": capped})
        return OK
    # the arguments that tell the rows apart in the row; those all rows share once, above the table
    varying, shared = argcols.split([a for _, _, a in merged])
    short = short_length(store, [r["id"] for r in opened]) if opened and terminal_width(args.wide) else 0
    rows = [_run_row(r, short, argcols.cell(a, varying)) if "texts" in r else
            (r["id"], human_age(r["finished"]), human_seconds(r["duration"]), human_bytes(r["size"]), r["hits"],
             r["code"][:8], _status(r, r["id"] in kept), argcols.cell(a, varying)) for _, r, a in merged]
    width = terminal_width(args.wide)
    print(ids.shown_function(store, fn, args.script))
    line = argcols.shared_line(shared, len(merged), width)
    if line:
        print(line)
    print(table(["ID", "WHEN", "TOOK", "SIZE", "HITS", "CODE", "STATUS", "ARGUMENTS"], rows, right=(0, 2, 3, 4),
                width=width, flex=(6, 7)))
    more = footer(len(evs), total, "evaluations", "--limit N for more")
    if more:
        print(more)
    if fn.startswith("__main__:") and not args.script:
        from ..tracking.names import function_label, script_labels
        from ..tracking.query import scripts_of

        paths = scripts_of(store.index.conn(), fn) if _has_runs_of(store, fn) else []
        labels = script_labels(paths)
        each = [function_label(fn, labels.get(p)) for p in paths]
        if len(each) > 1:
            print(f"(evaluations of {len(each)} scripts' {fn[9:]}: memolab ls {each[0]} lists one)")
    left = dict(unstored)
    for r in opened:  # (counted a moment before: one may have ended since)
        left[r["status"]] = max(0, left.get(r["status"], 0) - 1)
    if any(left.values()):
        print(f"also {'at least ' if capped else ''}{', '.join(f'{n:,} {s}' for s, n in sorted(left.items()) if n)} "
              f"run(s) without a stored evaluation: memolab runs {args.func}")
    return OK


def _run_row(r: dict[str, Any], short: int, args: str) -> tuple:
    """A run that stored nothing, as a row of ``ls FUNC``: when it ended (computing: started), how
    long it took or has taken so far, its status and a failure's first line."""
    rid = "r" + (str(r["id"])[:short] if short else str(r["id"]))
    status = r["status"] + (f": {r['error']}" if r.get("error") else "")
    when = r["started"] if r["status"] == "computing" else r["when"]
    return (rid, human_age(when), human_seconds(r["seconds"]), "-", "-", (r["code"] or "")[:8], status, args)


def _run_json(r: dict[str, Any], args: dict[str, str]) -> dict[str, Any]:
    """``ls FUNC --json``'s form of a run that stored nothing (docs/cli.md)."""
    return {"run": r["id"], "fn": r["fn"], "status": r["status"], "started": r["started"],
            "ended": None if r["status"] == "computing" else r["when"], "seconds": r["seconds"],
            "error": r["error"], "code": r["code"], "arguments": args}


def _status(e: dict[str, Any], kept: bool) -> str:
    """``ls``'s STATUS, what the store knows of a stored evaluation: ``hit`` (a later call used it),
    ``stored`` (none has yet), ``expired`` (``max_age``: the next call recomputes), not usable
    (``corrupt``, ``unloadable``: the next call recomputes), and ``kept`` (gc never drops it)."""
    s = "expired" if expired(e) else e["status"] if e["status"] != "done" else "hit" if e["hits"] else "stored"
    return ", ".join(x for x in (s, "kept" if kept else "") if x)


def _kept_line(store: Any) -> tuple[str, dict[str, int]]:
    """gc's word on what it leaves alone: ``kept: 3 rows, 1.2 MB (memolab keep; never dropped)``."""
    n, size = marks.kept_summary(store.index.conn())
    return (f"kept: {plural(n, 'row')}, {human_bytes(size)} (keep marks: gc never drops them)",
            {"kept_evaluations": n, "kept_bytes": size})


def _count_evaluations(store: Any, fn: str) -> int:
    c = store.index.conn()
    if counts.available(c):  # kept by triggers: one row, not a count of the function's rows
        row = c.execute("SELECT n FROM evaluation_counts WHERE fn=?", (fn,)).fetchone()
        return int(row[0]) if row else 0
    return int(c.execute("SELECT COUNT(*) FROM evaluations WHERE fn=?", (fn,)).fetchone()[0])


def _has_runs_of(store: Any, fn: str) -> bool:
    c = store.index.conn()
    if not has_runs(c):
        return False
    return c.execute("SELECT 1 FROM runs WHERE fn=? LIMIT 1", (fn,)).fetchone() is not None


def _show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="an evaluation id (from `memolab ls FUNC`) or a run id (from `memolab runs`)")
    json_option(p)


@command("show", "show one evaluation, or one run, in full")
@options(_show_options)
def cmd_show(args: argparse.Namespace) -> int:
    store = open_store(args)
    kind, n = ids.resolve(store, args.id)  # the ids the dashboard shows: #12, r1475626
    if kind == "run":
        return show_run(store, find_run(store, n), args.json)  # type: ignore[arg-type]  # resolved: it exists
    e = store.index.evaluations(where="id=?", params=(n,))[0]
    logs = _logs_of(store, e["id"])
    marks = eval_marks(store, e["id"], logs[0])
    from ..calls.acceptance import as_json, covering

    accepts = covering(store.index, e["fn"], [e["code"]], active=False).get(e["code"], [])
    inputs = edges.inputs_of(store.index, e)
    users = edges.used_by(store.index, key_of(e))
    if args.json:
        emit_json({**eval_json(e, full=True), "runs": [r["id"] for r in logs[0]], "tags": logs[1],
                   "accepts": [as_json(a) for a in accepts],
                   "inputs": [{k: v for k, v in i.items() if k != "code"} for i in inputs],
                   "used_by": users, **marks})
        return OK
    snap = snapshot_of(e)
    try:
        versions = json.loads(e["versions"] or "{}")
    except ValueError:
        versions = {}
    print(f"evaluation #{e['id']}  {evaluation_label(store.index, e['fn'], e['id'])}")
    info = [
        ("status", e["status"] + (f" ({e['reason']})" if e.get("reason") else "")),
        ("finished", f"{_dt.datetime.fromtimestamp(e['finished']):%Y-%m-%d %H:%M:%S} ({human_age(e['finished'])})"
         if e["finished"] else "-"),
        ("took", human_seconds(e["duration"])),
        ("size", human_bytes(e["size"])),
        ("hits", f"{e['hits']} (last {human_age(e['last_hit'])})"),
        ("host", f"{e['host']}, Python {e['python']}, " + ", ".join(f"{k} {v}" for k, v in versions.items())),
        ("key", f"code {e['code'][:16]}  args {e['args'][:16]}  schema {e['schema']}"),
        ("result", snap.get("result_summary") or snap.get("result", "?")),  # typed, as the arguments
    ]
    if logs[0]:
        info.append(("run", ", ".join(f"{r['id']} ({r.get('label')})" for r in logs[0])))
    print_fields(info)
    if snap.get("args"):
        print("  arguments:")
        for k, (_d, r) in snap["args"].items():
            print(wrapped(f"    {k} = {r}", "      "))
    if snap.get("ignored"):
        print(wrapped(f"  ignored arguments: {', '.join(snap['ignored'])}", "    "))
    print_lineage(inputs, users)
    if snap.get("deps"):
        print("  code dependencies:")
        for sym, d in sorted(snap["deps"].items()):
            print(f"    {sym}  {str(d)[:16]}")
    if accepts:
        from ..store.accepts import summary

        print("  accepted changes (this evaluation's code, `memolab accept`):")
        for a in accepts:
            side = "used by" if a["old_code"] == e["code"] else "uses"
            print(f"    {summary(a)}: this code {side} code {(a['new_code'] if side == 'used by' else a['old_code'])[:8]}…")
    metrics: dict[str, object] = {}
    for r in logs[0]:
        metrics.update(r.get("metrics") or {})
    print_tags(logs[1], metrics)  # type: ignore[arg-type]
    print_notes(marks["run_tags"], marks["notes"])
    return OK


def print_lineage(inputs: Sequence[dict[str, Any]], users: Sequence[dict[str, Any]]) -> None:
    """An evaluation's inputs (argument path <- the evaluation an object there came from) and users."""
    if inputs:
        print("  inputs (argument <- the evaluation it came from):")
        w = max(len(i["path"]) for i in inputs)
        for i in inputs:
            if i.get("store"):
                where = f"{i['function']} (recorded in another store, {i['store']})"
            elif i["evaluation"] is None:
                where = f"{i['function']} (not stored any more: cleared or collected)"
            else:
                where = f"{i['function']} #{i['evaluation']}" + (f" ({i['status']})" if i.get("status") else "")
            print(f"    {i['path'].ljust(w)}  <- {where}{'  (by content)' if i.get('by') == 'content' else ''}")
    if users:
        print("  used by:")
        for u in users:
            print(f"    {u['function']} #{u['evaluation']} (as {u['path']})" + (f" ({u['status']})" if u.get("status") else ""))


def _logs_of(store: Any, eval_id: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """(the runs attached to an evaluation, their logged tags by kind)."""
    from ..tracking import query

    if not has_runs(store.index.conn()):
        return [], {}
    ids = [r for (r,) in store.index.conn().execute("SELECT id FROM runs WHERE eval_id=?", (eval_id,))]
    # labelled as among the function's newest runs (``query.labelled``): never all of them read
    runs = query.labelled(store.index, query.runs(store.index, ids=ids)) if ids else []
    return runs, query.tags(store.index, ids)


def _why_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", help="a function (full symbol or its name)")
    json_option(p)


@command("why", "explain the last miss of a function")
@options(_why_options)
def cmd_why(args: argparse.Namespace) -> int:
    from ..calls.explain import Explanation, last_miss

    store = open_store(args)
    fn = resolve_function(store, args.func)
    miss = last_miss(store, fn)
    if miss is None:
        if args.json:
            emit_json({"fn": fn, "miss": None})
        else:
            print(f"{label_of(store, fn)}: no miss recorded")
        return OK
    t = miss.pop("time")
    script = miss.get("script") if isinstance(miss.get("script"), str) else None
    ex = Explanation.from_dict(miss)
    from ..calls.acceptance import as_json, covering

    code = (ex.change or {}).get("code")
    accepts = [a for a in covering(store.index, fn, [code]).get(code, []) if a["new_code"] == code] if code else []
    if args.json:
        emit_json({"fn": fn, "miss": {"time": t, **ex.to_dict()}, "accepts": [as_json(a) for a in accepts]})
        return OK
    print(f"last miss {human_age(t)} ({_dt.datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S}):")
    ex.fn = label_of(store, fn, script)  # printed as `ls` prints it (a.py:train)
    print(str(ex))
    if accepts:
        from ..store.accepts import summary

        for a in accepts:
            print(f"accepted since: {summary(a)} (`memolab accept {args.func} --undo` takes it back)")
    elif code and ex.change and not ex.hit:
        print(f"(a change of code alone: `memolab accept {args.func}` shows it again and, if you confirm, records "
              "that it gives the same results)")
    return OK


def _destructive_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask for confirmation (required when stdin is not a terminal)")
    json_option(p)


def _clear_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", nargs="?", help="a function, or a script's process runs (e.g. train.py); all if omitted")
    p.add_argument("--downstream", action="store_true",
                   help="also forget the evaluations built on what is cleared (their inputs came from it), "
                        "transitively; says which before asking")
    p.add_argument("--dry-run", action="store_true", help="say what would be cleared, clear nothing")
    _destructive_options(p)


@command("clear", "forget stored evaluations and logged runs (of one function, or all)")
@options(_clear_options)
def cmd_clear(args: argparse.Namespace) -> int:
    from ..tracking import retention

    if args.downstream and not args.func:
        raise CliError(USAGE, "clear --downstream needs a function: what is built on everything is everything")
    store = open_store(args, write=not args.dry_run)  # a dry run reads: an older store is not migrated
    fn = resolve_function(store, args.func, whole=True) if args.func else None
    what = fn or f"every function in {store.root}"
    down = _downstream_plan(store, fn, args.json) if args.downstream and fn else []
    if args.dry_run:
        own = _count_evaluations(store, fn) if fn else store.index.conn().execute(
            "SELECT COUNT(*) FROM evaluations").fetchone()[0]
        r = {"fn": fn, "dry_run": True, "evaluations": own + len(down), "downstream": down}
        if args.json:
            emit_json(r)
        else:
            print(f"would clear {what}: {plural(own, 'evaluation')}"
                  + (f" and {plural(len(down), 'evaluation')} built on them" if args.downstream else "")
                  + "; dry run: nothing cleared")
        return OK
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem  # a store that can only be read: nothing can be cleared
    also = f" and the {plural(len(down), 'evaluation')} built on them" if down else ""
    if not confirm(args, f"forget the stored evaluations and logged runs of {what}{also}"):
        print("nothing cleared")
        return PROBLEM
    before = index_bytes(store.root)
    own = [i for (i,) in store.index.conn().execute("SELECT id FROM evaluations WHERE fn=?", (fn,))] if fn else []
    left = len(edges.downstream(store.index, own)) if own and not args.downstream else 0
    store.forget(fn)
    n = store.index.clear(fn)
    if down:
        for f in {d["function"] for d in down}:
            store.forget(f)
        ids = [d["evaluation"] for d in down]
        for _, part in chunks(ids):
            store.index.delete_evaluations(part)
    purged = retention.purge_counts(store.index, fn) + retention.purge_orphans_counts(store.index)
    blobs, blob_bytes = store.collect_garbage()
    checkpoint_wal(store)
    after = index_bytes(store.root)
    r = {"fn": fn, "evaluations": n + len(down), "runs": purged.runs, "log_points": purged.points, "blobs": blobs,
         "blob_bytes": blob_bytes, "index_bytes_before": before, "index_bytes_after": after,
         "bytes_freed": blob_bytes + max(0, before - after)}
    if args.downstream:
        r["downstream"] = down
    if args.json:
        emit_json(r)
    else:
        print(removed_line("cleared", r, what + (f" (and {plural(len(down), 'evaluation')} built on it)"
                                                 if args.downstream else "")))
        if left:
            print(f"{plural(left, 'evaluation')} built on them {'stays' if left == 1 else 'stay'}: their inputs from "
                  f"{fn} now show as not stored any more (memolab clear {args.func} --downstream forgets those too)")
    return OK


def _downstream_plan(store: Any, fn: str, quiet: bool) -> list[dict[str, Any]]:
    """The evaluations built on ``fn``'s, transitively (``[{"function", "evaluation"}]``, nearest
    first), listed on stdout unless ``quiet``: what ``clear --downstream`` forgets besides."""
    ids = [i for (i,) in store.index.conn().execute("SELECT id FROM evaluations WHERE fn=?", (fn,))]
    down = edges.downstream(store.index, ids)
    names = _functions_of(store, down)
    plan: list[dict[str, Any]] = [{"function": names[i], "evaluation": i} for i in down if i in names]
    fns: dict[str, list] = {}
    for d in plan:
        fns.setdefault(d["function"], []).append(d["evaluation"])
    if not quiet:
        if not plan:
            print(f"no evaluation is built on those of {fn}")
        else:
            print(f"built on the evaluations of {fn} (their inputs came from them), and cleared with them:")
            for f, ids_ in sorted(fns.items()):
                print(f"  {f}  " + ", ".join(f"#{i}" for i in sorted(ids_)))
    return plan


def _functions_of(store: Any, ids: Sequence[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    c = store.index.conn()
    for q, part in chunks(ids):
        out.update((int(i), f) for i, f in c.execute(f"SELECT id, fn FROM evaluations WHERE id IN ({q})", part))
    return out


def _gc_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=parse_age, metavar="AGE",
                   help="drop evaluations not used for AGE (e.g. 30d), and runs without a stored evaluation "
                        "(process, failed, lost runs) last written AGE ago")
    p.add_argument("--max-size", type=parse_size, metavar="SIZE", help="then drop least recently used until the store fits SIZE")
    p.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    p.add_argument("--remote", action="store_true",
                   help="collect the team store (MEMOLAB_REMOTE + MEMOLAB_REMOTE_BLOBS) instead of the local one: "
                        "a dry run unless --yes (docs/team.md)")
    p.add_argument("--grace", type=parse_age, metavar="AGE",
                   help="with --remote: never delete a blob written less than AGE ago (default 1h: uploads in flight)")
    _destructive_options(p)


@command("gc", "drop old or least-recently-used evaluations, old runs and unreferenced blobs")
@options(_gc_options)
def cmd_gc(args: argparse.Namespace) -> int:
    if args.remote:
        from .team_commands import run_cli

        return run_cli(args)
    if args.grace is not None:
        raise CliError(USAGE, "--grace applies to gc --remote only")
    from ..tracking import retention

    store = open_store(args, write=not args.dry_run)  # a dry run reads: an older store is not migrated
    store.flush_hits()
    drop = store.gc_plan(args.older_than, args.max_size)  # least recently used first, selected in SQL
    stale = retention.stale_runs(store.index, args.older_than) if args.older_than is not None else []
    if not args.json:
        if drop:
            rows = [(e["id"], evaluation_label(store.index, e["fn"], e["id"]),
                     human_age(max(e["finished"] or 0, e["last_hit"] or 0)), human_bytes(e["size"]))
                    for e in drop[:30]]
            print(table(["ID", "FUNCTION", "LAST USED", "SIZE"], rows, right=(0, 3)))
            if len(drop) > 30:
                print(f"… and {len(drop) - 30} more")
        if stale:
            kinds: dict[str, int] = {}
            for r in stale:
                kinds[r["fn"]] = kinds.get(r["fn"], 0) + 1
            print("runs without a stored evaluation: " + ", ".join(f"{fn} ({n})" for fn, n in sorted(kinds.items())))
    if args.dry_run:
        drop_ids = [e["id"] for e in drop]
        run_ids = [r["id"] for r in stale]
        c = store.index.conn()
        if drop_ids and has_runs(c):
            for q, chunk in chunks(drop_ids):
                run_ids += [x for (x,) in c.execute(f"SELECT id FROM runs WHERE eval_id IN ({q})", chunk)]
        dead = store.unreferenced_blobs(dropping=drop_ids)
        size = sum(s for _, s in dead)
        runs = sorted(set(run_ids))
        r = {"evaluations": len(drop), "runs": len(runs), "log_points": retention.log_points(store.index, runs),
             "blobs": len(dead), "blob_bytes": size, "bytes_freed": size, "dry_run": True}
        # what the index would shrink by (gc vacuums it): estimated from the share of each table's rows that go
        estimate = retention.index_bytes_freed(store.index, runs, drop_ids)
        if estimate is not None:
            before = index_bytes(store.root)
            r.update(index_bytes_before=before, index_bytes_after=max(0, before - estimate),
                     bytes_freed=size + min(estimate, before), index_estimated=True)
        line, k = _kept_line(store)
        if args.json:
            emit_json({**r, **k, "evaluation_ids": drop_ids})
        else:
            print(removed_line("would drop", r))
            print(line)
        return OK
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem  # a store that can only be read: nothing can be dropped
    if not confirm(args, f"drop {plural(len(drop), 'evaluation')} and {plural(len(stale), 'run')} "
                         f"and collect unreferenced blobs in {store.root}"):
        print("nothing dropped")
        return PROBLEM
    before = index_bytes(store.root)
    if drop:
        store.forget()
        ids = [e["id"] for e in drop]
        with Progress("gc: dropping evaluations", len(ids)) as bar:
            for _, part in chunks(ids):
                store.index.delete_evaluations(part)
                bar.update(len(part))
    with Progress("gc: dropping runs and their logs", 1) as bar:
        purged = retention.purge_orphans_counts(store.index) + retention.delete_runs(store.index, [r["id"] for r in stale])
        bar.update()
    from ..team import snapshots

    snapshots.drop_stale(store.index)  # unnamed snapshots unused here for snapshots.RECENT
    with Progress("gc: collecting unreferenced blobs", 1) as bar:
        n, size = store.collect_garbage()
        bar.update()
    checkpoint_wal(store)
    after = index_bytes(store.root)
    r = {"evaluations": len(drop), "runs": purged.runs, "log_points": purged.points, "blobs": n, "blob_bytes": size,
         "index_bytes_before": before, "index_bytes_after": after, "bytes_freed": size + max(0, before - after),
         "dry_run": False}
    line, k = _kept_line(store)
    if args.json:
        emit_json({**r, **k, "evaluation_ids": [e["id"] for e in drop]})
    else:
        print(removed_line("dropped", r))
        print(line)
    return OK



def _upgrade_options(p: argparse.ArgumentParser) -> None:
    json_option(p)


@command("upgrade", "bring a store an older memolab wrote up to this memolab's schema (commands that only read never do)")
@options(_upgrade_options)
def cmd_upgrade(args: argparse.Namespace) -> int:
    from ..store import schema
    from ..store.reading import older_version

    root = open_store(args).root  # (read: it must exist, and a store whose folders are links is refused)
    before = older_version(root / "index.sqlite")
    said = schema.announce
    schema.announce = lambda path, old, new: None  # said below, as this command's output
    try:
        store = open_store(args, write=True)
    finally:
        schema.announce = said
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem
    r = {"store": str(root), "from": before or schema.SCHEMA_VERSION, "to": schema.SCHEMA_VERSION,
         "changed": before is not None}
    if args.json:
        emit_json(r)
    elif before is None:
        print(f"the store {root} is up to date (schema {schema.SCHEMA_VERSION})")
    else:
        steps = [f"  {v}: {what}" for v, what, _ in schema.STEPS if v > before]
        print(f"upgraded the store {root} from schema {before} to {schema.SCHEMA_VERSION}; an older memolab can no "
              "longer use it:\n" + "\n".join(steps))
    return OK
