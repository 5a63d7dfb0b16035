"""``memolab runs [FUNC]``: every run (running, failed, interrupted and lost ones too) with its
name, status, duration and final metrics; and the run half of ``memolab show``."""
from __future__ import annotations

import argparse
import datetime as _dt
from collections.abc import Sequence
from typing import Any

from .common import (
    OK,
    USAGE,
    CliError,
    command,
    emit_json,
    footer,
    human_age,
    human_seconds,
    json_option,
    label_of,
    open_store,
    options,
    positive_int,
    resolve_function,
    short_name,
    table,
    terminal_width,
)

STATUSES = ("running", "done", "failed", "interrupted", "lost")


def _runs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("func", nargs="?", help="a function (full symbol or its name), or a script (train.py); all if omitted")
    p.add_argument("--status", choices=STATUSES, action="append", help="only runs with this status (repeatable)")
    p.add_argument("--metric", action="append", metavar="TAG",
                   help="a scalar tag to show the final value of (repeatable; default: the most common tags)")
    p.add_argument("--tag", action="append", metavar="TAG", help="only runs carrying this tag (repeatable: all of them)")
    p.add_argument("--sort", metavar="METRIC[:min|max]",
                   help="best first by the final value of a scalar tag (loss-like tags: lowest; else highest; "
                        "`:min`/`:max` says which); runs without it last")
    p.add_argument("--limit", type=positive_int, default=50, help="runs to show, newest first (default 50)")
    p.add_argument("--all", action="store_true", help="show every run")
    p.add_argument("--wide", action="store_true", help="do not cut columns to the terminal's width")
    json_option(p)


def run_json(r: dict[str, Any]) -> dict[str, Any]:
    """The documented JSON form of a run (docs/cli.md)."""
    ev = r.get("eval_id") if r.get("stored") else None
    return {"id": r["id"], "fn": r["fn"], "name": r.get("label"), "status": r["status"], "started": r["started"],
            "finished": r.get("finished"), "duration": r.get("duration"), "evaluation": ev, "code": r.get("code"),
            "parent": r.get("parent"), "script": r.get("script"), "hparams": r.get("hparams") or {},
            "metrics": r.get("metrics") or {}, "error": r.get("error"), "accepted": r.get("accepted") or [],
            "run_tags": r.get("run_tags") or [], "notes": r.get("notes") or []}


def where(r: dict[str, Any]) -> str:
    """A function as a person tells it apart: ``train.py:train`` for a script's ``__main__:train``."""
    import os

    fn = r["fn"]
    if fn.startswith("__main__:") and r.get("script"):
        return f"{os.path.basename(r['script'])}:{fn.split(':', 1)[1]}"
    return short_name(fn)


def metric_columns(rows: Sequence[dict[str, Any]], chosen: list[str] | None, most: int) -> list[str]:
    """The tags given, else the ``most`` tags logged by the most runs (``val/``, then ``train/`` first on ties)."""
    if chosen:
        return chosen
    from ..tracking.names import is_system_tag

    count: dict[str, int] = {}
    for r in rows:
        for t in r.get("metrics") or {}:
            if not is_system_tag(t):  # sys/cpu is how the machine was, not what the run found
                count[t] = count.get(t, 0) + 1
    rank = {"val": 0, "train": 1}
    return sorted(count, key=lambda t: (-count[t], rank.get(t.split("/")[0], 2), t))[:most]


def sort_key(text: str) -> tuple[str, bool]:
    """``val/loss`` -> (tag, lower is better by its name); ``val/acc:min`` says so outright."""
    from ..tracking.names import lower_is_better

    tag, _, how = text.rpartition(":") if text.endswith((":min", ":max")) else (text, "", "")
    if not tag:
        raise CliError(USAGE, f"--sort needs a scalar tag, got {text!r}")
    return tag, (how == "min") if how else lower_is_better(tag)


def best_first(rows: list[dict[str, Any]], tag: str, lower: bool) -> list[dict[str, Any]]:
    """Runs by the final value of ``tag``, best first (stable: newest first among equals); runs
    without a value (not logged, NaN) last."""
    import math

    def key(r: dict[str, Any]) -> tuple[int, float]:
        v = (r.get("metrics") or {}).get(tag)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return (1, 0.0)
        return (0, v if lower else -v)

    return sorted(rows, key=key)


def number(v: float | None) -> str:
    if v is None:
        return "-"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def short_length(store: Any, among: list[int] | None = None) -> int:
    """Digits of a run id that tell every run of the store apart (at least ``ids.SHORT_MIN``): the
    RUN column shows that many, as git shows commits, and ``show`` takes them (as the dashboard).
    ``among``: the runs shown, when not all of them are: the digits that tell those apart."""
    from ..tracking import query
    from .ids import short_length as digits

    return digits(query.ready(store.index), among)


def runs_table(rows: list[dict[str, Any]], args: argparse.Namespace, with_fn: bool, short: int = 0) -> str:
    """``short``: digits of run ids shown (0: whole ids)."""
    width = terminal_width(args.wide)
    tags = metric_columns(rows, args.metric, 1000 if width is None else 4)
    if width is None:
        short = 0  # --wide or a pipe: whole ids, as `--json` has them
    while True:  # metric columns that do not fit once names are cut go, last first
        text = _runs_table(rows, tags, width, with_fn, short)
        if width is None or not tags or max(len(ln) for ln in text.splitlines()) <= width:
            return text
        tags = tags[:-1]


def _runs_table(rows: list[dict[str, Any]], tags: list[str], width: int | None, with_fn: bool, short: int = 0) -> str:
    # two scripts that define the same function share the symbol __main__:NAME: say which file ran
    with_fn = with_fn or len({where(r) for r in rows if r["fn"].startswith("__main__:")}) > 1
    headers = ["RUN", "STATUS"] + (["FUNCTION"] if with_fn else []) + ["NAME", "WHEN", "TOOK", "EVAL"] + tags
    body = []
    for r in rows:
        rid = (str(r["id"])[:short] if short else r["id"]) if isinstance(r["id"], int) else "-"
        ev = f"#{r['eval_id']}" if r.get("stored") and r.get("eval_id") else "-"
        label = " ".join([r.get("label") or "", *(f"[{t}]" for t in r.get("run_tags") or [])]).strip()
        cells = [rid, r["status"]] + ([where(r)] if with_fn else []) + [
            label, human_age(r["started"]), human_seconds(r.get("duration")), ev]
        cells += [number((r.get("metrics") or {}).get(t)) for t in tags]
        body.append(cells)
    name_col = 3 if with_fn else 2
    flex = [name_col] + ([2] if with_fn else [])
    n = len(headers)
    return table(headers, body, right=[0, name_col + 2, name_col + 3] + list(range(n - len(tags), n)),
                 width=width, flex=flex)


def list_runs(store: Any, fn: str | None, args: argparse.Namespace) -> int:
    from ..tracking import query

    script = getattr(args, "script", None)
    if not (args.all or args.status or getattr(args, "tag", None) or getattr(args, "sort", None)):
        # the newest --limit rows, read by index; the total counted in SQL (issue 52)
        rows = query.runs(store.index, fn, limit=args.limit, script=script or None)
        return _print_runs(store, fn, script, args, rows, rows, query.count_rows(store.index, fn, script or None))
    rows = query.runs(store.index, fn)
    if script:  # a.py:train: the runs of that script
        rows = [r for r in rows if r.get("script") == script]
    if args.status:
        rows = [r for r in rows if r["status"] in args.status]
    for t in getattr(args, "tag", None) or []:
        rows = [r for r in rows if t in (r.get("run_tags") or [])]
    rows.sort(key=lambda r: r["started"] or 0, reverse=True)
    if getattr(args, "sort", None):
        tag, lower = sort_key(args.sort)
        rows = best_first(rows, tag, lower)
        if not args.metric:
            args.metric = [tag]
        elif tag not in args.metric:
            args.metric = [tag, *args.metric]
    return _print_runs(store, fn, script, args, rows, rows if args.all else rows[: args.limit], len(rows))


def _print_runs(store: Any, fn: str | None, script: str | None, args: argparse.Namespace,
                rows: list[dict[str, Any]], shown: list[dict[str, Any]], total: int) -> int:
    if args.json:
        emit_json({"store": str(store.root), "fn": fn, "total": total, "runs": [run_json(r) for r in shown]})
        return OK
    if not rows:
        print(f"no runs{' of ' + fn if fn else ''} in {store.root}")
        return OK
    if fn:
        from .ids import shown_function

        print(shown_function(store, fn, script, rows))
        # NAME says how each run differs (its varying arguments); what they all share, once
        from ..tracking.names import value_text
        from .argcols import shared_line, split

        if not any(r.get("name") for r in shown):  # (a named run's NAME is its name)
            hps = [{k: value_text(v, 40) for k, v in (r.get("hparams") or {}).items()} for r in shown]
            line = shared_line(split(hps)[1], len(shown), terminal_width(args.wide))
            if line:
                print(line)
    among = [r["id"] for r in shown if isinstance(r["id"], int)] if len(shown) < total else None  # (issue 52)
    print(runs_table(shown, args, with_fn=fn is None, short=short_length(store, among)))
    more = footer(len(shown), total, "runs", "--limit N or --all for more")
    if more:
        print(more)
    accepted = {a["id"]: (r["fn"], a) for r in shown for a in r.get("accepted") or []}
    if accepted:
        print("accepted code changes (`memolab accept FUNC --undo` takes one back):")
        for fn_, a in sorted(accepted.values(), key=lambda x: x[1]["id"]):
            print(f"  {short_name(fn_)}: accept #{a['id']}: code {a['new_code'][:8]}… gives the results of code "
                  f"{a['old_code'][:8]}… (accepted by {a['by']} {human_age(a['time'])})")
    return OK


@command("runs", "list runs (running, failed, interrupted and lost ones too) with their names and final metrics")
@options(_runs_options)
def cmd_runs(args: argparse.Namespace) -> int:
    from .ids import split_script

    store = open_store(args)
    store.flush_hits()
    name, args.script = split_script(store, args.func) if args.func else (None, None)
    fn = resolve_function(store, name) if name else None
    return list_runs(store, fn, args)


def find_run(store: Any, run_id: int) -> dict[str, Any] | None:
    from ..tracking import query

    rows = query.runs(store.index, ids=[run_id])
    if not rows:
        return None
    # its label says how it differs from the other (newest) runs of its function
    return query.labelled(store.index, rows)[0]


def show_run(store: Any, r: dict[str, Any], as_json: bool) -> int:
    """``memolab show RUN_ID``: a run in full, its logged tags, and a failure's traceback and output."""
    from ..tracking import query

    tags = query.tags(store.index, [r["id"]])
    fail = query.failure(store.index, r["id"])
    if as_json:
        emit_json({**run_json(r), "tags": tags, "traceback": fail["traceback"], "output": fail["output"]})
        return OK
    print(f"run {r['id']}  {label_of(store, r['fn'], r.get('script'))}  {r.get('label') or ''}")
    started = f"{_dt.datetime.fromtimestamp(r['started']):%Y-%m-%d %H:%M:%S} ({human_age(r['started'])})"
    info = [("status", r["status"] + (f" ({r['error']})" if r.get("error") else "")),
            ("started", started), ("took", human_seconds(r.get("duration"))),
            ("evaluation", f"#{r['eval_id']} (memolab show {r['eval_id']})" if r.get("stored") else "none stored"),
            ("code", (r.get("code") or "-")[:16]), ("host", f"{r.get('host') or '-'}, pid {r.get('pid') or '-'}"),
            ("script", r.get("script") or "-")]
    if r.get("parent"):
        info.append(("parent run", r["parent"]))
    if r["status"] != "done" and r.get("code") and not r.get("stored"):
        info.append(("code vs stored", _code_against_stored(store, r)))
    print_fields(info)
    if r.get("hparams"):
        print("  hyperparameters:")
        for k, v in r["hparams"].items():
            print(wrapped(f"    {k} = {v}", "      "))
    print_tags(tags, r.get("metrics") or {})
    print_notes(r.get("run_tags") or [], r.get("notes") or [])
    for what in ("traceback", "output"):
        if fail[what]:
            print(f"  {'output (its last lines)' if what == 'output' else what}:")
            for line in fail[what].rstrip("\n").splitlines():  # type: ignore[union-attr]  # set: fail[what] is truthy
                print(f"    {line}")
    return OK


def _code_against_stored(store: Any, r: dict[str, Any]) -> str:
    """Whether a run that stored nothing ran the code of a stored evaluation: a failure after an edit
    points at the edit (``memolab why`` diffs the last miss against what was stored)."""
    c = store.index.conn()
    same = c.execute("SELECT id FROM evaluations WHERE fn=? AND code=? ORDER BY finished DESC LIMIT 1",
                     (r["fn"], r["code"])).fetchone()
    if same:
        return f"the same code as evaluation #{same[0]}"
    last = c.execute("SELECT id FROM evaluations WHERE fn=? ORDER BY finished DESC LIMIT 1", (r["fn"],)).fetchone()
    if last:
        return (f"changed since the last stored evaluation #{last[0]} "
                f"(`memolab why {short_name(r['fn'])}` diffs the last miss against it)")
    return "no stored evaluation of this function to compare with"


def print_tags(tags: dict[str, list[str]], metrics: dict[str, float | None]) -> None:
    """The logged tags by kind, scalars with their final value."""
    if not any(tags.values()):
        print("  logs: none")
        return
    print("  logs:")
    for kind, names in tags.items():
        if not names:
            continue
        if kind == "scalar":
            # the run's own tags first; the machine's samples (sys/cpu, sys/memory) last, on a line of their own
            from ..tracking.names import is_system_tag

            own = [t for t in names if not is_system_tag(t)]
            system = [t for t in names if is_system_tag(t)]
            if own:
                print(wrapped(f"    scalars: {', '.join(f'{t} = {number(metrics.get(t))}' for t in own)}", "      "))
            if system:
                print(wrapped(f"    system (sys/): {', '.join(f'{t} = {number(metrics.get(t))}' for t in system)}", "      "))
        else:
            print(wrapped(f"    {kind}s: {', '.join(names)}", "      "))


def wrapped(line: str, indent: str) -> str:
    """``line`` folded to the terminal's width at spaces, continued under ``indent``: never in the
    middle of a number or a name (a terminal folds at the last column, whatever is there). A pipe
    gets it whole."""
    width = terminal_width()
    if width is None or len(line) <= width:
        return line
    import textwrap

    return textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False,
                         replace_whitespace=False, drop_whitespace=True)


def print_fields(info: list[Any]) -> None:
    """``  key    value`` lines, values folded under themselves (``wrapped``)."""
    w = max(len(k) for k, _ in info)
    for k, v in info:
        print(wrapped(f"  {k.ljust(w)}  {v}", " " * (w + 4)))


def print_notes(tags: list[str], notes: list[dict[str, Any]]) -> None:
    """Its tags on one line, then its notes, oldest first, each with when it was written."""
    if tags:
        print(f"  tags: {', '.join(tags)}")
    if notes:
        print("  notes:")
        for n in notes:
            when = _dt.datetime.fromtimestamp(n["time"]).strftime("%Y-%m-%d %H:%M")
            lines = n["text"].splitlines() or [""]
            print(f"    {when}  {lines[0]}")
            for line in lines[1:]:
                print(f"                      {line}")
