"""HTML displays for notebooks (``_repr_html_``): ``memolab.runs()`` as a table with metric
columns, a run with its curves as small inline SVG charts, ``explain()`` with its reasons and
a rendered diff, evaluations as a table.

Plain HTML with inline styles and inline SVG: no script, no stylesheet, nothing fetched, so
it renders the same in Jupyter, JupyterLab, VS Code and a notebook exported to HTML (and in
GitHub's notebook viewer, which runs no script). Every text shown is escaped.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..settings.text import human_age, human_bytes, human_seconds

__all__ = ["runs_table", "run_card", "explanation", "evaluation", "evaluations_table", "sparkline"]

_TABLE = 'style="border-collapse:collapse;font-size:12px"'
_CELL = 'style="padding:2px 8px;text-align:{};border-bottom:1px solid #ddd"'
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _num(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    return str(v)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    head = "".join(f"<th {_CELL.format('right' if i in right else 'left')}>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td {_CELL.format('right' if i in right else 'left')}>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def metric_columns(runs: Sequence[Any], most: int = 6) -> list[str]:
    """The tags logged by the most runs (``val/``, then ``train/`` first on ties). The machine's own
    samples (``sys/cpu``: every run has them) only when the runs logged nothing else: as in the
    dashboard and ``memolab runs``, what a run found comes first."""
    from ..tracking.names import is_system_tag

    count: dict[str, int] = {}
    for r in runs:
        for t in r.metrics or {}:
            count[t] = count.get(t, 0) + 1
    own = [t for t in count if not is_system_tag(t)]
    rank = {"val": 0, "train": 1}
    return sorted(own or count, key=lambda t: (-count[t], rank.get(t.split("/")[0], 2), t))[:most]


def runs_table(runs: Sequence[Any], limit: int = 200) -> str:
    """``memolab.runs()``: one row per run, its final metrics in columns (the 6 most common tags)."""
    if not runs:
        return "<p><i>no runs</i></p>"
    shown = list(runs)[:limit]
    tags = metric_columns(shown)
    several = len({r.fn for r in shown}) > 1
    headers = ["run"] + (["function"] if several else []) + ["name", "status", "started", "took", "evaluation"] + tags
    rows = []
    for r in shown:
        ev = f"#{r.evaluation.id}" if r.evaluation else "–"
        cells = [f"<code>{_e(r.id)}</code>"] + ([_e(r.fn)] if several else []) + [
            _e(r.name), _status(r.status), _e(human_age(r.started, empty="–")),
            _e(human_seconds(r.duration) if r.duration else "–"),
            _e(ev)] + [_e(_num((r.metrics or {}).get(t))) for t in tags]
        rows.append(cells)
    n = len(headers)
    more = f"<p><small>{len(shown)} of {len(runs)} runs shown</small></p>" if len(runs) > len(shown) else ""
    return _shared(shown) + _table(headers, rows, right=[n - 1 - i for i in range(len(tags))]) + more


def _shared(runs: Sequence[Any]) -> str:
    """The arguments every run shares, said once above the table (``name`` says how each differs),
    as ``memolab runs`` says them."""
    from ..calls.summary import shared_line, split
    from ..tracking.names import value_text

    if len(runs) < 2 or len({r.fn for r in runs}) > 1:
        return ""
    line = shared_line(split([{k: value_text(v, 40) for k, v in (r.hparams or {}).items()} for r in runs])[1],
                       len(runs), 200)
    return f"<p><small>{_e(line)}</small></p>" if line else ""


def _status(s: str) -> str:
    colour = {"done": "#2ca02c", "failed": "#d62728", "running": "#1f77b4", "lost": "#7f7f7f",
              "interrupted": "#ff7f0e"}.get(s, "#333")
    return f'<span style="color:{colour}">{_e(s)}</span>'


def sparkline(steps: Sequence[float], values: Sequence[float | None], colour: str = _COLOURS[0],
              width: int = 220, height: int = 60) -> str:
    """An inline SVG line of ``values`` over ``steps`` (gaps at None and non-finite values)."""
    pts = [(s, v) for s, v in zip(steps, values, strict=False)
           if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]
    if not pts:
        return f'<svg width="{width}" height="{height}"></svg>'
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - 4) / ((x1 - x0) or 1)
    sy = (height - 4) / ((y1 - y0) or 1)
    path = " ".join(f"{2 + (x - x0) * sx:.1f},{height - 2 - (y - y0) * sy:.1f}" for x, y in pts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'style="background:#fafafa;border:1px solid #eee">'
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/></svg>')


def run_card(run: Any, curves: Sequence[tuple[str, Any]]) -> str:
    """A run: what it is, then one small chart per scalar tag (``curves``: (tag, Scalars))."""
    ev = run.evaluation
    facts = [("function", run.fn), ("status", run.status), ("started", human_age(run.started, empty="–")),
             ("took", human_seconds(run.duration) if run.duration else "–"),
             ("evaluation", f"#{ev.id} ({ev.hits} hits, {human_bytes(ev.size)}): {ev.result}" if ev else "none stored")]
    if run.script:
        facts.append(("script", run.script))
    if run.error:
        facts.append(("error", run.error))
    head = f"<b>run <code>{_e(run.id)}</code></b> {_e(run.name)}"
    info = _table(["", ""], [[_e(k), _e(v)] for k, v in facts])
    hp = ""
    if run.hparams:
        hp = "<details><summary>hyperparameters</summary>" + _table(
            ["name", "value"], [[_e(k), _e(v)] for k, v in run.hparams.items()]) + "</details>"
    charts = []
    for i, (tag, s) in enumerate(curves):
        last = next((v for v in reversed(s.value) if v is not None and math.isfinite(v)), None)
        finite = [v for v in s.value if v is not None and math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (None, None)
        charts.append(f'<div style="display:inline-block;margin:4px 12px 4px 0;font-size:11px">'
                      f'<div><b>{_e(tag)}</b> {_e(_num(last))} <span style="color:#888">'
                      f'(min {_e(_num(lo))}, max {_e(_num(hi))}, {len(s.step)} points)</span></div>'
                      f'{sparkline(s.step, s.value, _COLOURS[i % len(_COLOURS)])}</div>')
    body = "".join(charts) if charts else "<p><i>no scalars logged</i></p>"
    return f'<div class="memolab-run">{head}{info}{hp}<div>{body}</div></div>'


def explanation(ex: Any) -> str:
    """``explain()``: hit or miss, each reason, each code diff rendered (added lines green, removed red)."""
    verdict = ('<span style="color:#2ca02c">hit</span>' if ex.hit else '<span style="color:#d62728">miss</span>')
    reasons = "".join(f"<li>{_e(r)}</li>" for r in ex.reasons)
    diffs = []
    for sym, diff in ex.diffs.items():
        lines = []
        for ln in diff.rstrip("\n").splitlines():
            colour = ("#22863a" if ln.startswith("+") and not ln.startswith("+++") else
                      "#b31d28" if ln.startswith("-") and not ln.startswith("---") else
                      "#6f42c1" if ln.startswith("@@") else "#24292e")
            back = ("#e6ffed" if colour == "#22863a" else "#ffeef0" if colour == "#b31d28" else "transparent")
            lines.append(f'<span style="color:{colour};background:{back};display:block">{_e(ln) or " "}</span>')
        diffs.append(f"<div><b>{_e(sym)}</b><pre style=\"font-size:12px;padding:4px;border:1px solid #eee\">"
                     f"{''.join(lines)}</pre></div>")
    ev = f" (evaluation #{_e(ex.evaluation)})" if ex.evaluation is not None else ""
    return (f'<div class="memolab-explain"><b>{_e(ex.shown or ex.fn)}</b>: {verdict}{ev}<ul>{reasons}</ul>'
            f'{"".join(diffs)}</div>')


def evaluation(ev: Any) -> str:
    """A run's stored evaluation (``Run.evaluation``)."""
    return (f'<span class="memolab-evaluation">evaluation <b>#{_e(ev.id)}</b>: {_e(ev.hits)} hits, '
            f'{_e(human_bytes(ev.size))}, result <code>{_e(ev.result)}</code></span>')


def evaluations_table(rows: Sequence[dict[str, Any]]) -> str:
    """``MemoFunction.evaluations()``: id, when, how long it took, size, hits, arguments, result."""
    import json

    if not rows:
        return "<p><i>no stored evaluations</i></p>"
    out = []
    for e in rows:
        try:
            snap = json.loads(e.get("snapshot") or "{}")
        except ValueError:
            snap = {}
        from ..settings.text import mask_args

        args = ", ".join(f"{k}={v[1]}" for k, v in mask_args(snap.get("args") or {}).items() if not k.startswith("<"))
        out.append([f"#{_e(e.get('id'))}", _e(human_age(e.get("finished"), empty="–")),
                    _e(human_seconds(e["duration"]) if e.get("duration") else "–"), _e(human_bytes(e.get("size"))),
                    _e(e.get("hits")), f"<code>{_e(args)}</code>",
                    f"<code>{_e(snap.get('result_summary') or snap.get('result'))}</code>"])
    return _table(["id", "stored", "took", "size", "hits", "arguments", "result"], out, right=[2, 3, 4])
