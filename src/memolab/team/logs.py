"""Logs travel with their evaluation: one compressed bundle per evaluation.

The runs of an evaluation (``runs.eval_id``) and everything logged to them
(scalars with their summaries, histograms, images, text) are serialised as one
JSON document, zlib-compressed, stored as a blob in the team blob store; its
digest goes into the team row's ``logs`` column. Another machine that hits the
evaluation (or ``pull``s it) imports the bundle into its own tracking tables,
under fresh run ids, attached to its local copy of the evaluation.

A small bundle (at most ``INLINE_MAX`` bytes compressed) travels in the ``logs``
column itself instead, as ``z:`` + base64 (``inline_ref``/``parse_ref``). Every
computation records its run (host, timing, hyper-parameters: a few hundred
bytes compressed) even when it logs nothing, so without this every team hit and
every pulled result cost two more requests (a HEAD for the size, a GET): on a
``pull`` of 16 MB results that was a third of the requests and of the object
server's work. Large bundles (a long run's scalars, images) still go to the blob
store: index rows stay small.

JSON, never pickle: a bundle written by someone else is untrusted input. On
import only the columns the local tables have are written, through parameters,
and a bundle that does not parse is ignored (logs are never worth a failure).
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from typing import Any

from ..store.inlist import placeholders
from ..store.schema import has_runs

#: tables keyed by run, copied verbatim (the derived summaries too: they are
#: what the dashboard reads, and recomputing them would need the sink's logic)
_RUN_TABLES = ("scalars", "scalar_tags", "scalar_blocks", "log_events")
_MAX_BUNDLE = 1 << 30  # a decompressed bundle larger than this is refused (a zip bomb)
FORMAT = 1
#: a bundle at most this large (compressed) is carried inline in the team row's ``logs`` column
INLINE_MAX = 8 << 10
_INLINE = "z:"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def inline_ref(bundle: bytes) -> str | None:
    """The ``logs`` value that carries ``bundle`` in the row itself, or None if it is too
    large for a row (it goes to the blob store, named by its digest)."""
    if len(bundle) > INLINE_MAX:
        return None
    return _INLINE + base64.b64encode(bundle).decode("ascii")


def parse_ref(ref: str | None) -> tuple[str | None, bytes | None]:
    """A team row's ``logs`` value: ``(digest, None)`` for a bundle in the blob store,
    ``(None, bytes)`` for one inline, ``(None, None)`` for none or a value that is
    neither (another client's damage: logs are best effort, never worth a failure)."""
    if not ref:
        return None, None
    if ref.startswith(_INLINE):
        try:
            return None, base64.b64decode(ref[len(_INLINE):], validate=True)
        except (binascii.Error, ValueError):
            return None, None
    return (ref, None) if _DIGEST.match(ref) else (None, None)


def _enc(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(v)).decode("ascii")}
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        return base64.b64decode(v.get("b64", ""))
    return v


def export(index: Any, eval_id: int) -> bytes | None:
    """The bundle of the runs attached to local evaluation ``eval_id``, or None if it has none."""
    c = index.conn()
    if not has_runs(c):
        return None
    cur = c.execute("SELECT * FROM runs WHERE eval_id=? AND status!='running'", (eval_id,))
    cols = [d[0] for d in cur.description]
    runs = [list(r) for r in cur.fetchall()]
    if not runs:
        return None
    ids = [r[cols.index("id")] for r in runs]
    if "hparams" in cols:  # (recorded masked; an older memolab's runs were not: masked on their way out)
        h = cols.index("hparams")
        for r in runs:
            r[h] = _masked_hparams(r[h])
    doc: dict[str, Any] = {"format": FORMAT, "runs": {"columns": cols, "rows": runs}, "tables": {}}
    q = placeholders(len(ids))
    for t in _RUN_TABLES:
        cur = c.execute(f"SELECT * FROM {t} WHERE run IN ({q})", ids)
        tcols = [d[0] for d in cur.description]
        doc["tables"][t] = {"columns": tcols, "rows": [[_enc(v) for v in r] for r in cur.fetchall()]}
    return zlib.compress(json.dumps(doc, separators=(",", ":"), allow_nan=True).encode("utf-8"), 6)


def _masked_hparams(text: Any) -> Any:
    from ..settings.text import mask_secrets

    try:
        return json.dumps(mask_secrets(json.loads(text))) if isinstance(text, str) and text else text
    except ValueError:
        return text


def import_bundle(index: Any, data: bytes, eval_id: int) -> int:
    """Attach the runs of ``data`` to local evaluation ``eval_id``; returns how many runs.

    Idempotent per evaluation: if it already has runs, nothing is imported. All or
    nothing: in a transaction of its own, or in a savepoint of the caller's (the team
    layer records an imported row and its logs together); a bundle that fails midway
    raises and leaves nothing, the caller's other work in the transaction intact."""
    d = zlib.decompressobj()
    raw = d.decompress(data, _MAX_BUNDLE)
    if d.unconsumed_tail:
        raise ValueError("logs bundle too large")
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("not a memolab logs bundle")
    from ..store.sqlite import savepoint

    with index.write() as c:
        where = (str(getattr(index, "path", "")), id(c))
        try:
            with savepoint(c, "memolab_logs"):
                return _import(c, doc, eval_id, where)
        except BaseException:
            _COLUMNS.pop(where, None)  # (a table thought there may have gone with a rollback)
            raise


_COLUMNS_SQL = ("SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
                f"WHERE m.type = 'table' AND m.name IN ({','.join(repr(t) for t in ('runs', *_RUN_TABLES))})")


#: (store path, id(connection)) -> the columns of the run tables there. Asking costs 130 µs, as
#: much as the rest of a small import (one is part of every team hit). Kept only for tables
#: found already there, never for tables this transaction creates (a rollback would take them
#: back); columns are only ever added (by a newer memolab), and one missing here is skipped.
_COLUMNS: dict[tuple[str, int], dict[str, set]] = {}


def _columns(c: Any) -> dict[str, set]:
    have: dict[str, set] = {}
    for t, col in c.execute(_COLUMNS_SQL):
        have.setdefault(t, set()).add(col)
    return have


def _import(c: Any, doc: dict[str, Any], eval_id: int, where: tuple[str, int]) -> int:
    from ..tracking import runs as _runs, schema

    have = _COLUMNS.get(where)
    if have is None:
        have = _columns(c)
        if len(have) == 1 + len(_RUN_TABLES) and {n for n, _ in schema.ADDED_RUN_COLUMNS} <= have["runs"]:
            _COLUMNS[where] = have
        else:
            schema.ensure(c)  # a store that never logged: its tables made in this transaction
            have = _columns(c)
    if c.execute("SELECT 1 FROM runs WHERE eval_id=? LIMIT 1", (eval_id,)).fetchone():
        return 0
    rcols: list[str] = list(doc["runs"]["columns"])
    if "id" not in rcols:
        raise ValueError("logs bundle without run ids")
    remap: dict[int, int] = {}
    for r in doc["runs"]["rows"]:
        remap[int(r[rcols.index("id")])] = _runs.new_id()
    keep = [i for i, n in enumerate(rcols) if n in have["runs"]]
    for r in doc["runs"]["rows"]:
        row = dict(zip(rcols, r, strict=False))
        row["id"] = remap[int(row["id"])]
        row["eval_id"] = eval_id
        row["parent"] = remap.get(row.get("parent")) if row.get("parent") is not None else None  # type: ignore[arg-type]  # checked not None
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
