"""The team's accepted code changes on PostgreSQL (``memolab_accepts``, team schema 2): the same
operations as the local index's ``accepts`` table (``store.accepts.AcceptIndex``), mixed into
``PgIndex``. A team database still at schema 1 has none: ``accepts`` answers no accept and
``add_accept`` refuses, until ``memolab remote upgrade``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .pgschema import ACCEPTS_SINCE, NOW

T = TypeVar("T")

#: the columns of ``memolab_accepts``
TEAM_COLUMNS = ("id", "fn", "schema", "new_code", "old_code", "time", "user_name", "host", "deps_before",
                "deps_after", "diffs", "undone", "undone_by", "signature", "uploaded_by")


class AcceptsUnsupported(Exception):
    """The team index is at a schema without accepts (1): `memolab remote upgrade`."""


class PgAcceptIndex:
    """``accepts``, ``add_accept``, ``undo_accept`` of ``PgIndex`` (which gives ``_run``, ``version``, ``who``)."""

    version: int
    who: str

    def _run(self, work: Callable[[Any], T], retry: bool = True, slow: bool = False) -> T:  # pragma: no cover
        raise NotImplementedError

    @property
    def accepts_supported(self) -> bool:
        return self.version >= ACCEPTS_SINCE

    def accepts(self, fn: str | None = None, schema: str | None = None, active: bool = True,
                ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Accepts (of ``fn``, under ``schema``), oldest first; ``active``: those not undone. One statement."""
        if not self.accepts_supported:
            return []
        clauses: list[str] = []
        params: list[Any] = []
        for col, v in (("fn", fn), ("schema", schema)):
            if v is not None:
                clauses.append(f"{col} = %s")
                params.append(v)
        if active:
            clauses.append("undone IS NULL")
        if ids is not None:
            clauses.append("id = ANY(%s)")
            params.append([int(i) for i in ids])
        sql = (f"SELECT {', '.join(TEAM_COLUMNS)} FROM memolab_accepts"
               + (" WHERE " + " AND ".join(clauses) if clauses else "") + " ORDER BY id")
        rows = self._run(lambda c: c.execute(sql, params).fetchall())
        return [dict(zip(TEAM_COLUMNS, r, strict=False)) for r in rows]

    def add_accept(self, rec: dict[str, Any]) -> int:
        """Record accept ``rec`` (signed by whoever made it); its team id."""
        if not self.accepts_supported:
            raise AcceptsUnsupported(f"the team index is at schema {self.version}, which predates accepts")
        values = {c: rec.get(c) for c in TEAM_COLUMNS if c not in ("id", "undone", "undone_by")}
        values["uploaded_by"] = values.get("uploaded_by") or self.who
        cols = list(values)
        sql = (f"INSERT INTO memolab_accepts({', '.join(cols)}) VALUES ({', '.join('%s' for _ in cols)}) RETURNING id")
        row = self._run(lambda c: c.execute(sql, [values[k] for k in cols]).fetchone())
        return int(row[0])

    def undo_accept(self, accept_id: int, when: float | None = None, by: str | None = None,
                    pending: bool = False) -> bool:
        """Take accept ``accept_id`` back (the database's clock unless ``when``); whether it was active."""
        if not self.accepts_supported:
            return False
        cur = self._run(lambda c: c.execute(
            f"UPDATE memolab_accepts SET undone = COALESCE(%s::float8, {NOW}), undone_by = %s "
            "WHERE id = %s AND undone IS NULL", (when, by, int(accept_id))))
        return int(cur.rowcount) > 0
