"""What every ``memolab`` subcommand shares: the command registry, human units, tables,
exit codes, confirmation, progress, and opening the store a command names.

Subcommand modules (``cli.store_commands``, ``doctor``, ``team.cli``, ``ui.cli``) import
this module, never the dispatcher in ``cli/__init__``: the dispatcher imports them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import swallowed
from ..settings.progress import Bar
from ..settings.text import (
    human_age as human_age,  # re-exported: the one age formatter
    human_bytes as human_bytes,  # re-exported: the one size formatter
    human_seconds as human_seconds,  # re-exported: the one duration formatter
)
from ..store.inlist import chunks

COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {}


def command(name: str, help: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register ``fn(args) -> exit code`` as subcommand ``name``; ``fn.configure(parser)`` adds its options."""
    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (fn, getattr(fn, "configure", lambda p: None), help)
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


def terminal_width(wide: bool = False) -> int | None:
    """The width tables must fit, or None for no limit: ``--wide``, or stdout is no terminal (a pipe
    or a file gets whole cells, so ``grep`` finds them) and ``$COLUMNS`` does not say otherwise."""
    import shutil

    if wide:
        return None
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        return None
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = (),
          width: int | None = None, flex: Sequence[int] = ()) -> str:
    """Aligned columns. With ``width``, the ``flex`` columns (the long free-text ones: names,
    arguments) are cut, widest first, down to 8 characters each, so a line fits the terminal."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if width is not None and flex:
        over = sum(widths) + 2 * (len(widths) - 1) - width
        while over > 0:
            i = max(flex, key=lambda j: widths[j])
            floor = max(8, len(headers[i]))
            if widths[i] <= floor:
                break
            cut = min(over, widths[i] - floor, max(1, (widths[i] - floor + 1) // 2))
            widths[i] -= cut
            over -= cut
        for r in cells:
            for i in flex:
                r[i] = _cut(r[i], widths[i])

    def fmt(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=False))).rstrip()

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


#: the progress bar of every command (``memolab.settings.progress``: on a terminal only, once the work has
#: lasted ``MEMOLAB_PROGRESS_DELAY``; tqdm's drawing when it is installed)
Progress = Bar


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str, allow_nan=False))


# -- helpers ------------------------------------------------------------------------------

def store_root(args: argparse.Namespace) -> Path:
    from ..settings import config

    return Path(args.store).expanduser() if getattr(args, "store", None) else config.store_path()


def open_store(args: argparse.Namespace, write: bool = False) -> Any:
    """The store named by ``--store`` (or the configured one); it must exist.

    No command creates a store: ``memolab --store /typo ls`` says there is none (exit 1)
    instead of leaving an empty store behind. A command that only reads (``write`` False)
    never migrates a store an older memolab wrote: it reads it as it is (``store.reading``).
    """
    from ..store import get_store
    from ..store.reading import open_for_reading

    root = store_root(args)
    if root.exists() and not root.is_dir():
        raise CliError(PROBLEM, f"no store at {root}: it is a file")
    # a store being created by another process has its folders before its index file
    if not ((root / "index.sqlite").is_file() or (root / "blobs").is_dir()):
        raise CliError(PROBLEM, f"no store at {root} (nothing memoized there yet? set MEMOLAB_STORE or --store)")
    store = get_store(root) if write else open_for_reading(root)
    from ..store.health import NoStore

    if isinstance(store, NoStore):
        raise store.problem  # nothing of it can be read (its folders are links, its index damaged): one line
    return store


def writable_store(args: argparse.Namespace) -> Any:
    """``_store`` for commands that delete: a store that can only be read (a read-only mount, a
    damaged or newer index: the store's ``problem``) is refused before anything is asked."""
    store = open_store(args, write=True)
    problem = getattr(store, "problem", None)
    if isinstance(problem, BaseException):
        raise problem
    return store


def known_functions(store: Any) -> list[str]:
    """Every function name the store knows: stored evaluations, logged runs (process runs
    such as ``<process:train.py>`` too) and functions that only ever missed."""
    from ..tracking import resolve

    return resolve.known_functions(store.index)


def short_name(fn: str) -> str:
    """``pkg.mod:train`` -> ``train``; ``<process:run.py>`` -> ``run.py``."""
    from ..tracking import resolve

    return resolve.short_name(fn)


def resolve_name(store: Any, name: str) -> Any:
    """``tracking.resolve.resolve`` (the resolver ``memolab.runs`` uses too) with its errors as the
    CLI's: every form memolab prints a function in (``a.py:train``, ``__main__:train``,
    ``pkg.mod:train``, ``train``) is taken back."""
    from ..tracking import resolve

    try:
        return resolve.resolve(store.index, name, who="memolab")
    except resolve.AmbiguousFunction as e:
        raise CliError(USAGE, str(e).removeprefix("memolab: ")) from None
    except resolve.FunctionNotFound as e:
        raise CliError(PROBLEM, str(e).removeprefix("memolab: ")) from None


def resolve_function(store: Any, name: str, whole: bool = False) -> str:
    """The symbol ``name`` means; every command that takes a function goes through here (or
    ``resolve_name``). ``whole``: the command acts on every script's share of a script's function
    (``clear``), so one script's label is refused where several scripts share the symbol."""
    r = resolve_name(store, name)
    if whole and r.script is not None and label_of(store, r.fn) == r.fn:
        raise CliError(USAGE, f"{name} is one script's share of {r.fn}, which several scripts ran; this command "
                              f"acts on the whole symbol: give {r.fn} to act on every script's")
    return str(r.fn)


def label_of(store: Any, fn: str, script: str | None = None) -> str:
    """How ``fn`` is printed everywhere (``a.py:train`` for a script's function)."""
    from ..tracking import resolve

    return resolve.label_of(store.index, fn, script)


def snapshot_of(row: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's snapshot, its arguments' secrets masked (rows of an older memolab hold them)."""
    from ..settings.text import mask_args

    try:
        snap = json.loads(row.get("snapshot") or "{}")
    except ValueError:
        return {}
    if isinstance(snap, dict) and isinstance(snap.get("args"), dict):
        snap["args"] = mask_args(snap["args"])
    return snap


def eval_json(e: dict[str, Any], full: bool = False) -> dict[str, Any]:
    """The documented JSON form of an evaluation (docs/cli.md)."""
    snap = snapshot_of(e)
    out = {"id": e["id"], "fn": e["fn"], "status": e["status"], "started": e["started"], "finished": e["finished"],
           "duration": e["duration"], "size": e["size"], "hits": e["hits"], "last_hit": e["last_hit"],
           "code": e["code"], "arguments": {k: v[1] for k, v in snap.get("args", {}).items()},
           "result": snap.get("result"), "expires": _expires(snap), "expired": expired(e, snap)}
    if full:
        try:
            versions = json.loads(e["versions"] or "{}")
        except ValueError:
            versions = {}
        out.update({"args_digest": e["args"], "schema": e["schema"], "host": e["host"], "python": e["python"],
                    "versions": versions, "ignored": snap.get("ignored") or [], "deps": snap.get("deps") or {},
                    "reason": e.get("reason")})
    return out


def _expires(snap: dict[str, Any]) -> float | None:
    v = snap.get("expires")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def expired(e: dict[str, Any], snap: dict[str, Any] | None = None) -> bool:
    """Has stored evaluation ``e`` expired (``@memo(max_age=...)`` when it was stored: its snapshot's
    ``expires``)? A call judges by its own code's ``max_age``; this is what the store can tell."""
    when = _expires(snapshot_of(e) if snap is None else snap)
    return e.get("status") == "done" and when is not None and when < time.time()


#: an evaluations row that has expired (``expired``'s rule in SQL; one parameter: now)
_EXPIRED_WHERE = ("status='done' AND instr(snapshot, '\"expires\"') > 0 AND "
                  "(CASE WHEN json_valid(snapshot) THEN json_extract(snapshot, '$.expires') END) < ?")


def expired_counts(store: Any) -> dict[str, int]:
    """fn -> how many of its stored evaluations have expired (see ``expired``); {} if unknown."""
    try:
        rows = store.index.conn().execute(
            f"SELECT fn, COUNT(*) FROM evaluations WHERE {_EXPIRED_WHERE} GROUP BY fn", (time.time(),)).fetchall()
    except (sqlite3.Error, OSError):  # (no JSON1: advisory)
        swallowed("cli.common: expired_counts")
        return {}
    return {fn: int(n) for fn, n in rows}


def expired_of(conn: Any, fn: str, where: str = "", params: Sequence[Any] = ()) -> int | None:
    """How many of ``fn``'s stored evaluations (those also matching ``where``) have expired, read
    from those stored with an expiry (the ``evaluations_expiring`` index, where the store has
    it); None if unknown."""
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM evaluations WHERE fn=? AND {_EXPIRED_WHERE}"
                                + (f" AND {where}" if where else ""), (fn, time.time(), *params)).fetchone()[0])
    except (sqlite3.Error, OSError):  # (no JSON1: advisory)
        swallowed("cli.common: expired_of")
        return None


def expired_among(conn: Any, eval_ids: list[int]) -> int | None:
    """How many of the evaluations ``eval_ids`` have expired (a script's share of a function that
    several scripts define: ``ls`` lists them apart); None if unknown."""
    n, now = 0, time.time()
    try:
        for q, part in chunks(eval_ids):
            n += conn.execute(f"SELECT COUNT(*) FROM evaluations WHERE id IN ({q}) AND "
                              f"{_EXPIRED_WHERE}", (*part, now)).fetchone()[0]
    except (sqlite3.Error, OSError):  # (no JSON1: advisory)
        swallowed("cli.common: expired_among")
        return None
    return n


def index_bytes(root: Any) -> int:
    """index.sqlite with its WAL: what the index costs on disk."""
    n = 0
    for suffix in ("", "-wal"):
        try:
            n += os.stat(str(root / "index.sqlite") + suffix).st_size
        except OSError:
            swallowed("cli.common: index_bytes")
    return n


def checkpoint_wal(store: Any) -> None:
    # fold the WAL back so the size measured after a deletion is the index's own
    try:
        store.index.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except (sqlite3.Error, OSError):
        swallowed("cli.common: checkpoint_wal")  # a busy reader only delays it; sizes are then reported as they are


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def removed_line(verb: str, r: dict[str, Any], what: str = "") -> str:
    """``cleared F: 2 evaluations, 3 runs, 1200 log points; freed 1.2 MB (2 blobs: 1.1 MB; index 300 KB -> 200 KB)``"""
    freed = "would free" if verb.startswith("would") else "freed"
    about = "~" if r.get("index_estimated") else ""  # a dry run's index share is an estimate
    index_part = ""
    if r.get("index_bytes_before") is not None:
        index_part = f"; index {human_bytes(r['index_bytes_before'])} -> {about}{human_bytes(r['index_bytes_after'])}"
    return (f"{verb}{' ' + what + ':' if what else ''} {plural(r['evaluations'], 'evaluation')}, "
            f"{plural(r['runs'], 'run')}, {plural(r['log_points'], 'log point')}; {freed} "
            f"{about}{human_bytes(r['bytes_freed'])} ({plural(r['blobs'], 'blob')}: {human_bytes(r['blob_bytes'])}"
            f"{index_part})")


def positive_int(text: str) -> int:
    """An argparse type: 1, 2, ... (``--limit -3`` and ``--limit 0`` are refused, naming the value)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


def footer(shown: int, total: int, what: str, hint: str) -> str | None:
    """``50 of 10,000 runs shown (--limit N or --all for more)``, or None when all are shown."""
    if shown >= total:
        return None
    return f"{shown:,} of {total:,} {what} shown ({hint})"


def json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (fields in docs/cli.md)")

