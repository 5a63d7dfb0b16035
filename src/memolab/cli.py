"""The ``memolab`` command line: look into a store and keep it healthy.

Output is for people: aligned tables, sizes and durations in human units.
Subcommands register themselves with ``@command`` so that other modules can
add theirs without touching the parser plumbing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

_COMMANDS: Dict[str, Tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {}


def command(name: str, help: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register ``fn(args) -> exit code`` as subcommand ``name``; ``fn.configure(parser)`` adds its options."""
    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        _COMMANDS[name] = (fn, getattr(fn, "configure", lambda p: None), help)
        return fn

    return deco


def options(configure: Callable[[argparse.ArgumentParser], None]) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        fn.configure = configure  # type: ignore[attr-defined]
        return fn

    return deco


# -- human units ------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 500MB, 10GB, 2GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


_SPANS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*(s|m|min|h|d|w)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (try 30d, 12h, 90m)")
    return float(m.group(1)) * _SPANS[m.group(2)]


def human_size(n: Optional[float]) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_duration(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def human_age(t: Optional[float], now: Optional[float] = None) -> str:
    if not t:
        return "-"
    d = (now or time.time()) - t
    if d < 60:
        return "just now"
    if d < 3600:
        return f"{int(d // 60)} min ago"
    if d < 86400:
        return f"{int(d // 3600)} h ago"
    if d < 30 * 86400:
        return f"{int(d // 86400)} d ago"
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def fmt(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    out = [fmt(headers), fmt(["─" * w for w in widths])]
    out.extend(fmt(r) for r in cells)
    return "\n".join(out)


# -- exit codes, errors, confirmation, progress ----------------------------------------------

#: One exit-code convention across commands (docs/cli.md): 0 ok, 1 a problem found or
#: something asked for not found (no store, no such function or evaluation, damage), 2 usage
#: (bad options, an ambiguous name, a destructive command refused without --yes or a terminal).
OK, PROBLEM, USAGE = 0, 1, 2


class CliError(Exception):
    """Print ``memolab: <message>`` on stderr and exit with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def confirm(args: argparse.Namespace, action: str) -> bool:
    """Ask before a destructive ``action``; ``--yes`` skips the question.

    Without a terminal on stdin there is nobody to ask: ``echo n | memolab clear`` or a
    script must not delete anything by accident, so the command refuses (exit 2) unless
    ``--yes`` is given. Declining at the prompt returns False (the command exits 1).
    """
    if getattr(args, "yes", False):
        return True
    if not sys.stdin.isatty():
        raise CliError(USAGE, f"refusing to {action} without a terminal to confirm it: pass --yes")
    try:
        answer = input(f"{action}? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


class Progress:
    """A one-line progress bar on stderr while it is a terminal; nothing at all on a pipe or file.

    Hand-written (30 lines) rather than a dependency: it needs no import at ``import memolab``
    and draws at most ~10 times a second, so a loop over a million items does not pay for it.
    """

    def __init__(self, label: str, total: int, unit: str = "") -> None:
        self.label, self.total, self.unit = label, max(0, int(total)), unit
        self.done = 0
        self.on = self.total > 0 and sys.stderr.isatty()
        self._last = 0.0

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 24)
        sys.stderr.write(f"\r{self.label} [{bar:<24}] {self.done}/{self.total}{self.unit} {frac:4.0%}")
        sys.stderr.flush()

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            sys.stderr.write("\r\033[K")  # erase the bar: the command's own output follows
            sys.stderr.flush()


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str, allow_nan=False))


# -- helpers ------------------------------------------------------------------------------

def store_root(args: argparse.Namespace) -> Path:
    from . import config

    return Path(args.store).expanduser() if getattr(args, "store", None) else config.store_path()


def _store(args: argparse.Namespace):
    """The store named by ``--store`` (or the configured one); it must exist.

    No command creates a store: ``memolab --store /typo ls`` says there is none (exit 1)
    instead of leaving an empty store behind.
    """
    from .store import get_store

    root = store_root(args)
    if root.exists() and not root.is_dir():
        raise CliError(PROBLEM, f"no store at {root}: it is a file")
    # a store being created by another process has its folders before its index file
    if not ((root / "index.sqlite").is_file() or (root / "blobs").is_dir()):
        raise CliError(PROBLEM, f"no store at {root} (nothing memoized there yet? set MEMOLAB_STORE or --store)")
    return get_store(root)


def _writable_store(args: argparse.Namespace):
    """``_store`` for commands that delete: a store that can only be read (a read-only mount, a
    damaged or newer index: the store's ``problem``) is refused before anything is asked."""
    store = _store(args)
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem
    return store


def known_functions(store) -> List[str]:
    """Every function name the store knows: stored evaluations, logged runs (process runs
    such as ``<process:train.py>`` too) and functions that only ever missed."""
    c = store.index.conn()
    names = {f["fn"] for f in store.index.functions()}
    if c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone():
        names.update(r[0] for r in c.execute("SELECT DISTINCT fn FROM runs"))
    names.update(r[0] for r in c.execute("SELECT DISTINCT fn FROM misses"))
    return sorted(names)


def short_name(fn: str) -> str:
    """``pkg.mod:train`` -> ``train``; ``<process:run.py>`` -> ``run.py``."""
    if fn.startswith("<process:") and fn.endswith(">"):
        return fn[len("<process:"):-1]
    return fn.split(":")[-1].split(".")[-1] if ":" in fn else fn


def resolve_function(store, name: str) -> str:
    """Accept a full symbol (``pkg.mod:f``) or an unambiguous suffix (``f``, ``mod:f``, ``run.py``
    for the process run of ``run.py``); every command that takes a function goes through here."""
    fns = known_functions(store)
    if name in fns:
        return name
    matches = [f for f in fns if f.endswith(":" + name) or f.endswith("." + name) or short_name(f) == name
               or f.split(":")[-1] == name]
    matches = sorted(set(matches))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(PROBLEM, f"no function matches {name!r} in {store.root}" + _suggest(name, fns))
    raise CliError(USAGE, f"{name!r} is ambiguous: it matches {', '.join(matches)}; give the full name")


def _suggest(name: str, fns: List[str]) -> str:
    """Close full names, each once (two modules' ``train`` are listed by their full symbols)."""
    import difflib

    by_short: Dict[str, List[str]] = {}
    for f in fns:
        by_short.setdefault(short_name(f), []).append(f)
    close: List[str] = []
    for c in difflib.get_close_matches(name, list(by_short) + fns, n=5):
        for full in by_short.get(c, [c]):
            # a short name shared by several functions is shown as their full names
            shown = c if len(by_short.get(c, [])) == 1 else full
            if shown not in close:
                close.append(shown)
    return f" (did you mean {', '.join(close[:3])}?)" if close else ""


def _snap(row: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return json.loads(row.get("snapshot") or "{}")
    except ValueError:
        return {}


def _args_summary(row: Dict[str, Any], width: int = 60) -> str:
    text = ", ".join(f"{k}={v[1]}" for k, v in _snap(row).get("args", {}).items())
    return text if len(text) <= width else text[: width - 1] + "…"


def _eval_json(e: Dict[str, Any], full: bool = False) -> Dict[str, Any]:
    """The documented JSON form of an evaluation (docs/cli.md)."""
    snap = _snap(e)
    out = {"id": e["id"], "fn": e["fn"], "status": e["status"], "started": e["started"], "finished": e["finished"],
           "duration": e["duration"], "size": e["size"], "hits": e["hits"], "last_hit": e["last_hit"],
           "code": e["code"], "arguments": {k: v[1] for k, v in snap.get("args", {}).items()},
           "result": snap.get("result")}
    if full:
        try:
            versions = json.loads(e["versions"] or "{}")
        except ValueError:
            versions = {}
        out.update({"args_digest": e["args"], "schema": e["schema"], "host": e["host"], "python": e["python"],
                    "versions": versions, "ignored": snap.get("ignored") or [], "deps": snap.get("deps") or {},
                    "reason": e.get("reason")})
    return out


def index_bytes(root: Any) -> int:
    """index.sqlite with its WAL: what the index costs on disk."""
    n = 0
    for suffix in ("", "-wal"):
        try:
            n += os.stat(str(root / "index.sqlite") + suffix).st_size
        except OSError:
            pass
    return n


def _checkpoint(store) -> None:
    # fold the WAL back so the size measured after a deletion is the index's own
    try:
        store.index.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except Exception:
        pass  # a busy reader only delays it; sizes are then reported as they are


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _removed_line(verb: str, r: Dict[str, Any], what: str = "") -> str:
    """``cleared F: 2 evaluations, 3 runs, 1200 log points; freed 1.2 MB (2 blobs: 1.1 MB; index 300 KB -> 200 KB)``"""
    freed = "would free" if verb.startswith("would") else "freed"
    index_part = ""
    if r.get("index_bytes_before") is not None:
        index_part = f"; index {human_size(r['index_bytes_before'])} -> {human_size(r['index_bytes_after'])}"
    return (f"{verb}{' ' + what + ':' if what else ''} {_plural(r['evaluations'], 'evaluation')}, "
            f"{_plural(r['runs'], 'run')}, {_plural(r['log_points'], 'log point')}; {freed} "
            f"{human_size(r['bytes_freed'])} ({_plural(r['blobs'], 'blob')}: {human_size(r['blob_bytes'])}{index_part})")


def _json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (fields in docs/cli.md)")


# -- commands -----------------------------------------------------------------------------

def _ls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", nargs="?", help="a function (full symbol or its name)")
    p.add_argument("--limit", type=int, default=50, help="evaluations to show (default 50)")
    _json_option(p)


@command("ls", "list memoized functions, or the evaluations of one")
@options(_ls_options)
def cmd_ls(args: argparse.Namespace) -> int:
    store = _store(args)
    store.flush_hits()
    if not args.func:
        fns = store.index.functions()
        only_runs = [f for f in known_functions(store) if f.startswith("<process:") or
                     (f not in {x["fn"] for x in fns} and _has_runs_of(store, f))]
        if args.json:
            emit_json({"store": str(store.root), "functions": fns, "runs_only": only_runs})
            return OK
        if not fns:
            print(f"no stored evaluations in {store.root}")
        else:
            rows = [(f["fn"], f["evaluations"], human_size(f["size"]), f["hits"], human_duration(f["compute"]),
                     human_age(f["last"])) for f in fns]
            print(table(["FUNCTION", "EVALS", "SIZE", "HITS", "COMPUTE", "LAST RUN"], rows, right=(1, 2, 3, 4)))
        if only_runs:
            print(f"logged runs without stored evaluations: {', '.join(only_runs)}")
        return OK
    fn = resolve_function(store, args.func)
    evs = store.index.evaluations(fn, limit=args.limit)
    if args.json:
        emit_json({"store": str(store.root), "fn": fn, "evaluations": [_eval_json(e) for e in evs]})
        return OK
    rows = [(e["id"], human_age(e["finished"]), human_duration(e["duration"]), human_size(e["size"]), e["hits"],
             e["code"][:8], e["status"] if e["status"] != "done" else "", _args_summary(e)) for e in evs]
    print(fn)
    print(table(["ID", "WHEN", "TOOK", "SIZE", "HITS", "CODE", "STATUS", "ARGUMENTS"], rows, right=(0, 2, 3, 4)))
    return OK


def _has_runs_of(store, fn: str) -> bool:
    c = store.index.conn()
    if not c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone():
        return False
    return c.execute("SELECT 1 FROM runs WHERE fn=? LIMIT 1", (fn,)).fetchone() is not None


def _show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("eval", type=int, help="evaluation id (from `memolab ls FUNC`)")
    _json_option(p)


@command("show", "show one evaluation in full")
@options(_show_options)
def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    if not 0 < args.eval < 2**63:
        raise CliError(PROBLEM, f"no evaluation #{args.eval} in {store.root}")
    rows = store.index.evaluations(where="id=?", params=(args.eval,))
    if not rows:
        raise CliError(PROBLEM, f"no evaluation #{args.eval} in {store.root}")
    e = rows[0]
    if args.json:
        emit_json(_eval_json(e, full=True))
        return OK
    snap = _snap(e)
    try:
        versions = json.loads(e["versions"] or "{}")
    except ValueError:
        versions = {}
    print(f"evaluation #{e['id']}  {e['fn']}")
    info = [
        ("status", e["status"] + (f" ({e['reason']})" if e.get("reason") else "")),
        ("finished", f"{_dt.datetime.fromtimestamp(e['finished']):%Y-%m-%d %H:%M:%S} ({human_age(e['finished'])})"
         if e["finished"] else "-"),
        ("took", human_duration(e["duration"])),
        ("size", human_size(e["size"])),
        ("hits", f"{e['hits']} (last {human_age(e['last_hit'])})"),
        ("host", f"{e['host']}, Python {e['python']}, " + ", ".join(f"{k} {v}" for k, v in versions.items())),
        ("key", f"code {e['code'][:16]}  args {e['args'][:16]}  schema {e['schema']}"),
        ("result", snap.get("result", "?")),
    ]
    w = max(len(k) for k, _ in info)
    for k, v in info:
        print(f"  {k.ljust(w)}  {v}")
    if snap.get("args"):
        print("  arguments:")
        for k, (d, r) in snap["args"].items():
            print(f"    {k} = {r}")
    if snap.get("ignored"):
        print(f"  ignored arguments: {', '.join(snap['ignored'])}")
    if snap.get("deps"):
        print("  code dependencies:")
        for sym, d in sorted(snap["deps"].items()):
            print(f"    {sym}  {str(d)[:16]}")
    return OK


def _why_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", help="a function (full symbol or its name)")
    _json_option(p)


@command("why", "explain the last miss of a function")
@options(_why_options)
def cmd_why(args: argparse.Namespace) -> int:
    from .explain import Explanation, last_miss

    store = _store(args)
    fn = resolve_function(store, args.func)
    miss = last_miss(store, fn)
    if miss is None:
        if args.json:
            emit_json({"fn": fn, "miss": None})
        else:
            print(f"{fn}: no miss recorded")
        return OK
    t = miss.pop("time")
    ex = Explanation.from_dict(miss)
    if args.json:
        emit_json({"fn": fn, "miss": {"time": t, **ex.to_dict()}})
        return OK
    print(f"last miss {human_age(t)} ({_dt.datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S}):")
    print(str(ex))
    return OK


def _destructive_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask for confirmation (required when stdin is not a terminal)")
    _json_option(p)


def _clear_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", nargs="?", help="a function, or a script's process runs (e.g. train.py); all if omitted")
    _destructive_options(p)


@command("clear", "forget stored evaluations and logged runs (of one function, or all)")
@options(_clear_options)
def cmd_clear(args: argparse.Namespace) -> int:
    from .tracking import retention

    store = _writable_store(args)
    fn = resolve_function(store, args.func) if args.func else None
    what = fn or f"every function in {store.root}"
    if not confirm(args, f"forget the stored evaluations and logged runs of {what}"):
        print("nothing cleared")
        return PROBLEM
    before = index_bytes(store.root)
    store.forget(fn)
    n = store.index.clear(fn)
    purged = retention.purge_counts(store.index, fn) + retention.purge_orphans_counts(store.index)
    blobs, blob_bytes = store.collect_garbage()
    _checkpoint(store)
    after = index_bytes(store.root)
    r = {"fn": fn, "evaluations": n, "runs": purged.runs, "log_points": purged.points, "blobs": blobs,
         "blob_bytes": blob_bytes, "index_bytes_before": before, "index_bytes_after": after,
         "bytes_freed": blob_bytes + max(0, before - after)}
    if args.json:
        emit_json(r)
    else:
        print(_removed_line("cleared", r, what))
    return OK


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
        from .team.gc import run_cli

        return run_cli(args)
    if args.grace is not None:
        raise CliError(USAGE, "--grace applies to gc --remote only")
    from .tracking import retention

    store = _store(args)
    store.flush_hits()
    drop = store.gc_plan(args.older_than, args.max_size)  # least recently used first, selected in SQL
    stale = retention.stale_runs(store.index, args.older_than) if args.older_than is not None else []
    if not args.json:
        if drop:
            rows = [(e["id"], e["fn"], human_age(max(e["finished"] or 0, e["last_hit"] or 0)), human_size(e["size"]))
                    for e in drop[:30]]
            print(table(["ID", "FUNCTION", "LAST USED", "SIZE"], rows, right=(0, 3)))
            if len(drop) > 30:
                print(f"… and {len(drop) - 30} more")
        if stale:
            kinds: Dict[str, int] = {}
            for r in stale:
                kinds[r["fn"]] = kinds.get(r["fn"], 0) + 1
            print("runs without a stored evaluation: " + ", ".join(f"{fn} ({n})" for fn, n in sorted(kinds.items())))
    if args.dry_run:
        drop_ids = [e["id"] for e in drop]
        run_ids = [r["id"] for r in stale]
        c = store.index.conn()
        if drop_ids and c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone():
            for i in range(0, len(drop_ids), 500):
                chunk = drop_ids[i:i + 500]
                run_ids += [x for (x,) in c.execute(
                    f"SELECT id FROM runs WHERE eval_id IN ({','.join('?' * len(chunk))})", chunk)]
        dead = store.unreferenced_blobs(dropping=drop_ids)
        size = sum(s for _, s in dead)
        r = {"evaluations": len(drop), "runs": len(set(run_ids)), "log_points": retention.log_points(store.index, sorted(set(run_ids))),
             "blobs": len(dead), "blob_bytes": size, "bytes_freed": size, "dry_run": True}
        if args.json:
            emit_json({**r, "evaluation_ids": drop_ids})
        else:
            print(_removed_line("would drop", r))
        return OK
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem  # a store that can only be read: nothing can be dropped
    if not confirm(args, f"drop {_plural(len(drop), 'evaluation')} and {_plural(len(stale), 'run')} "
                         f"and collect unreferenced blobs in {store.root}"):
        print("nothing dropped")
        return PROBLEM
    before = index_bytes(store.root)
    if drop:
        store.forget()
        ids = [e["id"] for e in drop]
        with Progress("gc: dropping evaluations", len(ids)) as bar:
            for i in range(0, len(ids), 500):
                store.index.delete_evaluations(ids[i:i + 500])
                bar.update(len(ids[i:i + 500]))
    with Progress("gc: dropping runs and their logs", 1) as bar:
        purged = retention.purge_orphans_counts(store.index) + retention.delete_runs(store.index, [r["id"] for r in stale])
        bar.update()
    with Progress("gc: collecting unreferenced blobs", 1) as bar:
        n, size = store.collect_garbage()
        bar.update()
    _checkpoint(store)
    after = index_bytes(store.root)
    r = {"evaluations": len(drop), "runs": purged.runs, "log_points": purged.points, "blobs": n, "blob_bytes": size,
         "index_bytes_before": before, "index_bytes_after": after, "bytes_freed": size + max(0, before - after),
         "dry_run": False}
    if args.json:
        emit_json({**r, "evaluation_ids": [e["id"] for e in drop]})
    else:
        print(_removed_line("dropped", r))
    return OK


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    store_help = "store directory (default: $MEMOLAB_STORE or <workspace>/.memolab)"
    p = argparse.ArgumentParser(prog="memolab", description="Inspect and maintain a memolab store.",
                                epilog="exit status: 0 ok, 1 a problem found or something not found, 2 usage")
    p.add_argument("--store", metavar="DIR", help=store_help)
    p.add_argument("--version", action="version", version=f"memolab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    from .ui import cli as _ui_cli  # noqa: F401  (registers `ui` and `export-tb`)
    from . import doctor as _doctor  # noqa: F401  (registers `doctor`)
    from .team import cli as _team_cli  # noqa: F401  (registers `remote`, `sync`, `pull`)
    for name, (fn, configure, help_) in _COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        # `memolab ls --store DIR` as well as `memolab --store DIR ls`; SUPPRESS keeps a
        # --store given before the command when none is given after it
        sp.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
        configure(sp)
        sp.set_defaults(_fn=fn)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_fn", None):
        parser.print_help()
        return USAGE
    from .errors import MemolabError

    try:
        return int(args._fn(args) or 0)
    except CliError as e:
        sys.stdout.flush()
        print(f"memolab: {e}", file=sys.stderr)
        return e.code
    except BrokenPipeError:  # `memolab ls | head`
        return 0
    except KeyboardInterrupt:
        return 130
    except MemolabError as e:  # an unusable store, a bad location: one line, no traceback
        print(f"memolab: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        if os.environ.get("MEMOLAB_DEBUG"):
            raise
        print(f"memolab: error: {type(e).__name__}: {e}\n(`memolab --store DIR doctor` checks the store; "
              "MEMOLAB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
