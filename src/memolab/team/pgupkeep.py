"""Listing and upkeep of the team index on PostgreSQL: what the CLI and team gc read and delete.

``PgUpkeep`` is mixed into ``team.pg.PgIndex`` (which gives ``_run``, its one way to run work
on a connection with retries and the remote timeout, and the keep marks of ``PgMarkIndex``):
listing rows and functions (ordered as SQLite orders them: ``_order_sql``), the blobs rows
refer to, gc's plan and deleting (never a 'done' row whose key is kept), clearing, and source
texts. The hot path (lookups, leases, publishing) stays in ``team/pg.py``.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from ..key import Key
from ..store.sqlite import plan_by_size
from .pgschema import ROW_COLUMNS, TEXT_COLS as _TEXT_COLS

Row = dict[str, Any]  # (as in team/pg.py)
T = TypeVar("T")

_LAST_USE = "(CASE WHEN finished IS NULL THEN 0 ELSE GREATEST(finished, COALESCE(last_hit, 0)) END)"
_ORDER_TERM = re.compile(r"^\s*([a-z_]+)(?:\s+(asc|desc))?\s*$", re.I)


def _order_sql(order: str) -> str:
    """SQLite's ordering in PostgreSQL: NULLs smallest, text by bytes (``COLLATE "C"``)."""
    terms = []
    for part in order.split(","):
        m = _ORDER_TERM.match(part)
        if m is None:
            return order  # not a plain column list: passed as written
        col, way = m.group(1).lower(), (m.group(2) or "ASC").upper()
        coll = ' COLLATE "C"' if col in _TEXT_COLS else ""
        terms.append(f"{col}{coll} {way} NULLS {'FIRST' if way == 'ASC' else 'LAST'}")
    return ", ".join(terms)


class PgUpkeep:
    """Listing, gc and clearing of ``PgIndex`` (which gives ``_run``, ``kept_keys`` and ``marks_supported``)."""

    def _run(self, work: Callable[[Any], T], retry: bool = True, slow: bool = False) -> T:  # pragma: no cover
        raise NotImplementedError

    def kept_keys(self) -> set[Key]:  # pragma: no cover (PgMarkIndex's)
        raise NotImplementedError

    @property
    def marks_supported(self) -> bool:  # pragma: no cover (PgMarkIndex's)
        raise NotImplementedError

    # -- listing and maintenance ------------------------------------------------------------
    def evaluations(self, fn: str | None = None, where: str = "", params: Sequence[Any] = (),
                    order: str = "finished DESC", limit: int | None = None) -> list[Row]:
        """Rows without ``inline``. ``where`` is SQL of PostgreSQL's dialect; its ``?``
        placeholders are taken as ``%s`` (the local index's style)."""
        cols = tuple(c for c in ROW_COLUMNS if c != "inline")
        clauses, args = [], []
        if fn is not None:
            clauses.append("fn = %s")
            args.append(fn)
        if where:
            clauses.append(where.replace("%", "%%").replace("?", "%s"))
            args.extend(params)
        sql = f"SELECT {', '.join(cols)} FROM memolab_evaluations"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += f" ORDER BY {_order_sql(order)}"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [dict(zip(cols, r, strict=False)) for r in self._run(lambda c: c.execute(sql, args).fetchall(), slow=True)]

    def functions(self) -> list[dict[str, Any]]:
        rows = self._run(lambda c: c.execute(
            "SELECT fn, count(*), sum(size), max(finished), sum(hits), sum(duration) FROM memolab_evaluations "
            'GROUP BY fn ORDER BY fn COLLATE "C"').fetchall(), slow=True)
        return [dict(fn=r[0], evaluations=int(r[1]), size=int(r[2] or 0), last=r[3], hits=int(r[4] or 0),
                     compute=float(r[5] or 0.0)) for r in rows]

    def referenced_digests(self, exclude: Collection[int] = frozenset()) -> set[str]:
        """Digests of the blobs rows (other than ``exclude``) refer to: payload and
        buffers of rows without inline bytes, and every row's logs bundle (unless inline)."""
        import json

        from .logs import parse_ref

        refs: set[str] = set()
        rows = self._run(lambda c: c.execute(
            "SELECT id, payload, buffers, logs, inline IS NULL FROM memolab_evaluations "
            "WHERE inline IS NULL OR logs IS NOT NULL").fetchall(), slow=True)
        for i, payload, buffers, logs, blobs in rows:
            if i in exclude:
                continue
            bundle, _ = parse_ref(logs)  # an inline bundle names no blob
            if bundle is not None:
                refs.add(bundle)
            if not blobs:
                continue
            if payload:
                refs.add(payload)
            if buffers and buffers != "[]":
                try:
                    refs.update(d for d, _ in json.loads(buffers))
                except (ValueError, TypeError):
                    continue  # a damaged row: a miss when asked for; its blobs are not kept for it
        return refs

    _GC_COLS = ("id", "fn", "finished", "last_hit", "size", "status")

    def gc_plan(self, cutoff: float | None, max_size: int | None, kept: Collection[Key] = ()) -> list[Row]:
        """See ``Index.gc_plan`` (the same plan; logs bundles are not weighed: their
        size is the blob store's to tell). Never a 'done' row whose key is kept: on the team
        (``memolab_keeps``, schema 3) or in ``kept`` (the marks of the machine that runs team gc)."""
        cols = ", ".join(self._GC_COLS)
        marked = {tuple(k) for k in kept} | self.kept_keys()
        if max_size is None:
            cond = "status <> 'done'" + (f" OR {_LAST_USE} < %s" if cutoff is not None else "")
            sql = (f"SELECT {cols}, code, args, schema FROM memolab_evaluations WHERE {cond} "
                   f"ORDER BY {_LAST_USE} ASC, id ASC")
            rows = self._run(lambda c: c.execute(sql, () if cutoff is None else (float(cutoff),)).fetchall(), slow=True)
            return [dict(zip(self._GC_COLS, r, strict=False)) for r in rows
                    if r[5] != "done" or (r[1], *r[6:9]) not in marked]
        sql = (f"SELECT {cols}, payload, payload_size, buffers, inline IS NOT NULL, {_LAST_USE}, code, args, schema "
               f"FROM memolab_evaluations ORDER BY {_LAST_USE} ASC, id ASC")
        rows = [(*r[:11], (r[1], *r[11:14]) in marked)
                for r in self._run(lambda c: c.execute(sql).fetchall(), slow=True)]
        drop = plan_by_size(rows, cutoff, max_size)
        return [dict(zip(self._GC_COLS, r[:6], strict=False)) for r in drop]

    def delete_evaluations(self, ids: Sequence[int]) -> None:
        """Delete rows ``ids``, never a 'done' row whose key is kept on the team (schema 3): a keep
        mark committed after the gc plan was made, before this statement, wins."""
        ids = [int(i) for i in ids]
        if not ids:
            return
        guard = (" AND NOT (status = 'done' AND EXISTS (SELECT 1 FROM memolab_keeps k WHERE k.fn = e.fn AND "
                 "k.code = e.code AND k.args = e.args AND k.schema = e.schema))") if self.marks_supported else ""
        self._run(lambda c: c.execute(f"DELETE FROM memolab_evaluations e WHERE id = ANY(%s){guard}", (ids,)),
                  slow=True)

    def clear(self, fn: str | None = None) -> int:
        if fn is None:
            cur = self._run(lambda c: c.execute("DELETE FROM memolab_evaluations"), slow=True)
        else:
            cur = self._run(lambda c: c.execute("DELETE FROM memolab_evaluations WHERE fn = %s", (fn,)), slow=True)
        return int(cur.rowcount)

    def source(self, digest: str) -> str | None:
        row = self._run(lambda c: c.execute("SELECT source FROM memolab_sources WHERE digest = %s",
                                            (digest,)).fetchone())
        return row[0] if row else None

    def sources_of(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """See ``EvalIndex.sources_of``: one round trip."""
        ds = list(dict.fromkeys(digests))
        if not ds:
            return {}
        rows = self._run(lambda c: c.execute("SELECT digest, symbol, source FROM memolab_sources "
                                             "WHERE digest = ANY(%s)", (ds,)).fetchall())
        return {d: (sym, src) for d, sym, src in rows}
