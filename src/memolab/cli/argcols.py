"""The arguments of a table's rows (``ls FUNC``, ``runs``): the ones that vary between the rows
shown come first, in the row; the ones every row shares are said once, above the table.

In a sweep of 24 calls of ``train(ds, model, optimizer, lr, seed, epochs)`` the row's cell was
``ds={'Xtr': tensor([[-1.1258, …`` cut at the width, so lr and seed, which tell the rows apart,
never appeared. The values are the texts the calls were keyed with (``summary.text``).
"""
from __future__ import annotations

from typing import Any

from ..calls.summary import shared_line, split

__all__ = ["split", "cell", "shared_line", "of_snapshots"]  # (split, shared_line: summary's, for the CLI)


def cell(args: dict[str, str], varying: list[str]) -> str:
    """A row's cell: its varying arguments (``lr=0.1, seed=3``); the table cuts it to the width."""
    return ", ".join(f"{n}={args[n]}" for n in varying if n in args)


def of_snapshots(snaps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """{name: text} of each evaluation's snapshot (pseudo-arguments such as ``<global rng torch>``
    too: two rows may differ by nothing else)."""
    return [{n: str(v[1]) for n, v in (s.get("args") or {}).items() if isinstance(v, list) and len(v) == 2}
            for s in snaps]
