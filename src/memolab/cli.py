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


# -- helpers ------------------------------------------------------------------------------

def _store(args: argparse.Namespace):
    from .store import get_store

    return get_store(args.store) if args.store else get_store()


def resolve_function(store, name: str) -> str:
    """Accept a full symbol (``pkg.mod:f``) or an unambiguous suffix (``f``, ``mod:f``)."""
    fns = [f["fn"] for f in store.index.functions()]
    if name in fns:
        return name
    matches = [f for f in fns if f.endswith(":" + name) or f.endswith("." + name) or f.split(":")[-1] == name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        # a function that missed but never finished still has a `why`
        row = store.index.conn().execute("SELECT DISTINCT fn FROM misses").fetchall()
        cands = [r[0] for r in row if r[0] == name or r[0].endswith(":" + name)]
        if len(cands) == 1:
            return cands[0]
        raise SystemExit(f"memolab: no function matches {name!r} in {store.root}" + _suggest(name, fns))
    raise SystemExit(f"memolab: {name!r} is ambiguous: " + ", ".join(sorted(matches)))


def _suggest(name: str, fns: List[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, fns + [f.split(":")[-1] for f in fns], n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _args_summary(row: Dict[str, Any], width: int = 60) -> str:
    snap = json.loads(row["snapshot"] or "{}")
    text = ", ".join(f"{k}={v[1]}" for k, v in snap.get("args", {}).items())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- commands -----------------------------------------------------------------------------

@command("ls", "list memoized functions, or the evaluations of one")
@options(lambda p: (p.add_argument("func", nargs="?", help="a function (full symbol or its name)"),
                    p.add_argument("--limit", type=int, default=50, help="evaluations to show (default 50)")))
def cmd_ls(args: argparse.Namespace) -> int:
    store = _store(args)
    store.flush_hits()
    if not args.func:
        fns = store.index.functions()
        if not fns:
            print(f"no stored evaluations in {store.root}")
            return 0
        rows = [(f["fn"], f["evaluations"], human_size(f["size"]), f["hits"], human_duration(f["compute"]), human_age(f["last"]))
                for f in fns]
        print(table(["FUNCTION", "EVALS", "SIZE", "HITS", "COMPUTE", "LAST RUN"], rows, right=(1, 2, 3, 4)))
        return 0
    fn = resolve_function(store, args.func)
    evs = store.index.evaluations(fn, limit=args.limit)
    rows = [(e["id"], human_age(e["finished"]), human_duration(e["duration"]), human_size(e["size"]), e["hits"],
             e["code"][:8], e["status"] if e["status"] != "done" else "", _args_summary(e)) for e in evs]
    print(fn)
    print(table(["ID", "WHEN", "TOOK", "SIZE", "HITS", "CODE", "STATUS", "ARGUMENTS"], rows, right=(0, 2, 3, 4)))
    return 0


@command("show", "show one evaluation in full")
@options(lambda p: p.add_argument("eval", type=int, help="evaluation id (from `memolab ls FUNC`)"))
def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    rows = store.index.evaluations(where="id=?", params=(args.eval,))
    if not rows:
        raise SystemExit(f"memolab: no evaluation #{args.eval} in {store.root}")
    e = rows[0]
    snap = json.loads(e["snapshot"] or "{}")
    versions = json.loads(e["versions"] or "{}")
    print(f"evaluation #{e['id']}  {e['fn']}")
    info = [
        ("status", e["status"]),
        ("finished", f"{_dt.datetime.fromtimestamp(e['finished']):%Y-%m-%d %H:%M:%S} ({human_age(e['finished'])})"),
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
    return 0


@command("why", "explain the last miss of a function")
@options(lambda p: p.add_argument("func", help="a function (full symbol or its name)"))
def cmd_why(args: argparse.Namespace) -> int:
    from .explain import Explanation

    store = _store(args)
    fn = resolve_function(store, args.func)
    miss = store.index.last_miss(fn)
    if miss is None:
        print(f"{fn}: no miss recorded")
        return 0
    t = miss.pop("time")
    print(f"last miss {human_age(t)} ({_dt.datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S}):")
    print(str(Explanation.from_dict(miss)))
    return 0


@command("clear", "forget stored evaluations (of one function, or all)")
@options(lambda p: (p.add_argument("func", nargs="?", help="a function; all functions if omitted"),
                    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")))
def cmd_clear(args: argparse.Namespace) -> int:
    store = _store(args)
    fn = resolve_function(store, args.func) if args.func else None
    what = fn or f"every function in {store.root}"
    if not args.yes and sys.stdin.isatty():
        if input(f"forget the stored evaluations of {what}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing cleared")
            return 1
    n = store.clear(fn)
    print(f"cleared {n} evaluation{'s' if n != 1 else ''} of {what}")
    return 0


def _gc_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=parse_age, metavar="AGE", help="drop evaluations not used for AGE (e.g. 30d)")
    p.add_argument("--max-size", type=parse_size, metavar="SIZE", help="then drop least recently used until the store fits SIZE")
    p.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")


@command("gc", "drop old or least-recently-used evaluations and unreferenced blobs")
@options(_gc_options)
def cmd_gc(args: argparse.Namespace) -> int:
    store = _store(args)
    store.flush_hits()
    drop = store.gc_plan(args.older_than, args.max_size)
    verb = "would drop" if args.dry_run else "dropped"
    if drop:
        rows = [(e["id"], e["fn"], human_age(max(e["finished"] or 0, e["last_hit"] or 0)), human_size(e["size"]))
                for e in drop[:30]]
        print(table(["ID", "FUNCTION", "LAST USED", "SIZE"], rows, right=(0, 3)))
        if len(drop) > 30:
            print(f"… and {len(drop) - 30} more")
    if args.dry_run:
        dead = store.unreferenced_blobs(dropping=[e["id"] for e in drop])
        n, size = len(dead), sum(s for _, s in dead)
    else:
        if drop:
            store.forget()
            store.index.delete_evaluations([e["id"] for e in drop])
        n, size = store.collect_garbage()
    print(f"{verb} {len(drop)} evaluation{'s' if len(drop) != 1 else ''}; "
          f"{'would free' if args.dry_run else 'freed'} {human_size(size)} in {n} blob{'s' if n != 1 else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="memolab", description="Inspect and maintain a memolab store.")
    p.add_argument("--store", metavar="DIR", help="store directory (default: $MEMOLAB_STORE or <workspace>/.memolab)")
    p.add_argument("--version", action="version", version=f"memolab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    from .ui import cli as _ui_cli  # noqa: F401  (registers `ui` and `export-tb`)
    from . import doctor as _doctor  # noqa: F401  (registers `doctor`)
    for name, (fn, configure, help_) in _COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        configure(sp)
        sp.set_defaults(_fn=fn)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_fn", None):
        parser.print_help()
        return 2
    from .errors import MemolabError

    try:
        return int(args._fn(args) or 0)
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
