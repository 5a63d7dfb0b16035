"""The arguments of a table's rows (``ls FUNC``, ``runs``): the ones that vary between the rows
shown come first, in the row; the ones every row shares are said once, above the table.

In a sweep of 24 calls of ``train(ds, model, optimizer, lr, seed, epochs)`` the row's cell was
``ds={'Xtr': tensor([[-1.1258, …`` cut at the width, so lr and seed, which tell the rows apart,
never appeared. The values are the texts the calls were keyed with (``summary.text``).

Runs that stored nothing (computing, failed, interrupted) are rows too: a run keeps the same texts
(``argtext``) until it ends done, so its arguments compare with the evaluations'. A run written
before runs kept them has only its hyperparameters, another form (``'adam'`` is ``adam`` there,
a model's summary a string): ``of_runs`` reads each as the text a shown row has for it when one
of its forms matches, so a constant argument stays in the shared line.
"""
from __future__ import annotations

from typing import Any

from ..calls.summary import shared_line, split, text

__all__ = ["split", "cell", "shared_line", "of_snapshots", "of_runs"]  # (split, shared_line: summary's, for the CLI)


def cell(args: dict[str, str], varying: list[str]) -> str:
    """A row's cell: its varying arguments (``lr=0.1, seed=3``); the table cuts it to the width."""
    return ", ".join(f"{n}={args[n]}" for n in varying if n in args)


def of_snapshots(snaps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """{name: text} of each evaluation's snapshot (pseudo-arguments such as ``<global rng torch>``
    too: two rows may differ by nothing else)."""
    return [{n: str(v[1]) for n, v in (s.get("args") or {}).items() if isinstance(v, list) and len(v) == 2}
            for s in snaps]


def of_runs(runs: list[dict[str, Any]], known: list[dict[str, str]]) -> list[dict[str, str]]:
    """{name: text} of each run (``tracking.unstored.newest``'s rows): its kept texts, else (an older
    run) its hyperparameters, each read as the text of ``known`` (the other rows') it may stand for."""
    seen: dict[str, set[str]] = {}
    for k in known:
        for n, t in k.items():
            seen.setdefault(n, set()).add(t)
    seen_runs = [r["texts"] for r in runs if r.get("texts") is not None]
    for k in seen_runs:
        for n, t in k.items():
            seen.setdefault(n, set()).add(t)
    # a pseudo-argument found while the body ran (``<global rng torch>``) is in the evaluations' rows,
    # not in a run's from its start: where every other row agrees on it, the run is not told apart by it
    pseudo = {n: next(iter(ts)) for n, ts in seen.items()
              if n.startswith("<") and len(ts) == 1 and known and all(n in k for k in known)}
    out = []
    for r in runs:
        if r.get("texts") is not None:
            out.append({**pseudo, **r["texts"]})
            continue
        mine = dict(pseudo)
        for n, v in (r.get("hparams") or {}).items():
            forms = [text(v)] + ([v] if isinstance(v, str) else [])  # a value's text, or a summary kept as a string
            mine[n] = next((f for f in forms if f in seen.get(n, ())), forms[0])
        out.append(mine)
    return out
