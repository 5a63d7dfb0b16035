"""What changed in the code between two evaluations: the unified diff of their dependency
snapshots, from the source texts the index keeps (the dashboard's code diff).
"""
from __future__ import annotations

import difflib
import json
from typing import Any

from .query import ready

__all__ = ["code_diff"]


def code_diff(index: Any, a: int, b: int) -> dict[str, Any]:
    """Unified diff between the dependency snapshots of two evaluations (by eval id)."""
    c = ready(index)

    def deps(eid: int) -> dict[str, str]:
        row = c.execute("SELECT snapshot FROM evaluations WHERE id=?", (eid,)).fetchone()
        if row is None:
            raise KeyError(f"no evaluation #{eid}")
        return (json.loads(row[0] or "{}").get("deps") or {})

    def source(d: str) -> str:
        row = c.execute("SELECT source FROM sources WHERE digest=?", (d,)).fetchone()
        return row[0] if row else f"<source of {d} not stored>\n"

    da, db = deps(a), deps(b)
    files = []
    for sym in sorted(set(da) | set(db)):
        x, y = da.get(sym), db.get(sym)
        if x == y:
            continue
        sa = source(x) if x else ""
        sb = source(y) if y else ""
        diff = "".join(difflib.unified_diff(sa.splitlines(True), sb.splitlines(True), f"#{a} {sym}", f"#{b} {sym}"))
        files.append({"symbol": sym, "status": "added" if not x else "removed" if not y else "changed", "diff": diff})
    return {"a": a, "b": b, "same": not files, "changes": files}
