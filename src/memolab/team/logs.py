"""Logs travel with their evaluation: one compressed bundle per evaluation.

The runs of an evaluation (``runs.eval_id``) and everything logged to them
(scalars with their summaries, histograms, images, text) are serialised as one
JSON document, zlib-compressed, stored as a blob in the team blob store; its
digest goes into the team row's ``logs`` column. Another machine that hits the
evaluation (or ``pull``s it) imports the bundle into its own tracking tables,
under fresh run ids, attached to its local copy of the evaluation.

JSON, never pickle: a bundle written by someone else is untrusted input. On
import only the columns the local tables have are written, through parameters,
and a bundle that does not parse is ignored (logs are never worth a failure).
"""
from __future__ import annotations

import base64
import json
import zlib
from typing import Any, Dict, List, Optional

#: tables keyed by run, copied verbatim (the derived summaries too: they are
#: what the dashboard reads, and recomputing them would need the sink's logic)
_RUN_TABLES = ("scalars", "scalar_tags", "scalar_blocks", "log_events")
_MAX_BUNDLE = 1 << 30  # a decompressed bundle larger than this is refused (a zip bomb)
FORMAT = 1


def _enc(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(v)).decode("ascii")}
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        return base64.b64decode(v.get("b64", ""))
    return v


def _has_runs(c: Any) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone() is not None


def export(index: Any, eval_id: int) -> Optional[bytes]:
    """The bundle of the runs attached to local evaluation ``eval_id``, or None if it has none."""
    c = index.conn()
    if not _has_runs(c):
        return None
    cur = c.execute("SELECT * FROM runs WHERE eval_id=? AND status!='running'", (eval_id,))
    cols = [d[0] for d in cur.description]
    runs = [list(r) for r in cur.fetchall()]
    if not runs:
        return None
    ids = [r[cols.index("id")] for r in runs]
    doc: Dict[str, Any] = {"format": FORMAT, "runs": {"columns": cols, "rows": runs}, "tables": {}}
    q = ",".join("?" * len(ids))
    for t in _RUN_TABLES:
        cur = c.execute(f"SELECT * FROM {t} WHERE run IN ({q})", ids)
        tcols = [d[0] for d in cur.description]
        doc["tables"][t] = {"columns": tcols, "rows": [[_enc(v) for v in r] for r in cur.fetchall()]}
    return zlib.compress(json.dumps(doc, separators=(",", ":"), allow_nan=True).encode("utf-8"), 6)


def import_bundle(index: Any, data: bytes, eval_id: int) -> int:
    """Attach the runs of ``data`` to local evaluation ``eval_id``; returns how many runs.

    Idempotent per evaluation: if it already has runs, nothing is imported."""
    d = zlib.decompressobj()
    raw = d.decompress(data, _MAX_BUNDLE)
    if d.unconsumed_tail:
        raise ValueError("logs bundle too large")
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("not a memolab logs bundle")
    from ..tracking import runs as _runs, schema

    with index.write() as c:
        schema.ensure(c)
        if c.execute("SELECT 1 FROM runs WHERE eval_id=? LIMIT 1", (eval_id,)).fetchone():
            return 0
        have = {t: {r[1] for r in c.execute(f"PRAGMA table_info({t})")} for t in ("runs", *_RUN_TABLES)}
        rcols: List[str] = list(doc["runs"]["columns"])
        if "id" not in rcols:
            raise ValueError("logs bundle without run ids")
        remap: Dict[int, int] = {}
        for r in doc["runs"]["rows"]:
            remap[int(r[rcols.index("id")])] = _runs.new_id()
        keep = [i for i, n in enumerate(rcols) if n in have["runs"]]
        for r in doc["runs"]["rows"]:
            row = dict(zip(rcols, r))
            row["id"] = remap[int(row["id"])]
            row["eval_id"] = eval_id
            row["parent"] = remap.get(row.get("parent")) if row.get("parent") is not None else None
            names = [rcols[i] for i in keep]
            c.execute(f"INSERT INTO runs({','.join(names)}) VALUES ({','.join('?' * len(names))})",
                      [row[n] for n in names])
        for t in _RUN_TABLES:
            part = doc["tables"].get(t)
            if not part or not part.get("rows"):
                continue
            tcols = list(part["columns"])
            if "run" not in tcols:
                continue
            keep_t = [i for i, n in enumerate(tcols) if n in have[t] and n != "id"]  # log_events ids are local
            names = [tcols[i] for i in keep_t]
            at = tcols.index("run")
            rows = []
            for r in part["rows"]:
                new = remap.get(int(r[at]))
                if new is None:
                    continue
                rows.append([new if i == at else _dec(r[i]) for i in keep_t])
            c.executemany(f"INSERT OR IGNORE INTO {t}({','.join(names)}) VALUES ({','.join('?' * len(names))})", rows)
    return len(remap)
