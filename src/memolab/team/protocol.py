"""What an index of evaluations must do, whichever database holds it.

The local store's ``store.sqlite.Index`` and the team's ``team.pg.PgIndex``
both satisfy ``EvalIndex``; ``tests/test_index_conformance.py`` runs one suite
against both, so a rule (a dead owner's lease is taken over after its TTL, a
published row is never replaced by a later publish, a lookup never writes) holds
the same on a laptop and on the team database.

Rows are plain dicts keyed by the column names of ``store.sqlite.EVAL_COLUMNS``
plus ``inline`` (the bytes of a small result, or None) and, on the team index,
``logs`` (the evaluation's logs bundle: the digest of a blob, or a small bundle
inline as ``z:`` + base64, see ``team.logs``; or None).
Field values travel verbatim between indexes (digests, snapshot text, the HMAC
signature), so a row signed on one machine verifies on another.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from ..key import Key

Row = dict[str, Any]
Sources = dict[str, tuple[str, str]]  # digest -> (symbol, source text)


class EvalIndex(Protocol):
    # -- the hot path ------------------------------------------------------------------
    def lookup(self, key: Key, lean: bool = False) -> Row | None:
        """The 'done' row of ``key`` (with ``inline``), or None. One query, no write, no lock."""

    def lookup_many(self, keys: Sequence[Key]) -> dict[Key, Row]:
        """``lookup`` for several keys in one round trip (``pull``, a batch of tasks)."""

    # -- single flight -----------------------------------------------------------------
    def claim(self, key: Key, owner: str, ttl: float, force: bool = False,
              on_owner: Any = None) -> tuple[str, Row | None]:
        """Atomically: ('hit', row) if stored (unless ``force``); else ('owner', None) if
        the lease was free, ours, or its holder is dead (on this host) or stopped
        heart-beating for ``ttl`` seconds; else ('wait', None)."""

    def heartbeat(self, held: Iterable[tuple[Key, str]]) -> None:
        """Refresh the leases ``(key, owner)`` (only where ``owner`` still holds them)."""

    def release(self, key: Key, owner: str) -> None:
        """Drop ``owner``'s lease of ``key`` (nothing if it holds none)."""

    def live_leases(self, ttl: float) -> int:
        """Leases heart-beaten within ``ttl`` seconds: computations in flight."""

    # -- results -----------------------------------------------------------------------
    def record(self, key: Key, owner: str, fields: Row, sources: Sources, present: Any = ...,
               also: Any = None) -> int:
        """Store a finished evaluation computed under ``owner``'s lease and drop the lease.
        A lease lost to another owner who already stored a row keeps that row (its id is returned)."""

    def publish(self, key: Key, fields: Row, sources: Sources, owner: str | None = None) -> tuple[int, bool]:
        """Insert a finished evaluation computed elsewhere (a local store uploading it, a
        team row imported locally): (id, True) if inserted; (id of the row already
        there, False) if the key has a 'done' row, which is never replaced. A row out
        of use (corrupt, stale) is replaced. ``owner``'s lease of the key is dropped. A row
        without ``finished`` gets the index's clock (``clock``), ``started`` that less its
        duration: what the uploader sends, since a machine's clock may be off by days."""

    def publish_many(self, rows: Sequence[tuple[Key, Row, Sources]]) -> list[tuple[int, bool]]:
        """``publish`` for a batch, in one transaction (``memolab sync``)."""

    def rows_since(self, fn: str | None = None, since: float | None = None,
                   limit: int | None = None) -> list[Row]:
        """'done' rows (with ``inline``) finished after ``since``, oldest first: what ``pull`` fetches."""

    def mark_corrupt(self, eval_id: int, reason: str | None = None, status: str = "corrupt") -> None:
        """Take a row out of use; ``lookup`` no longer finds it."""

    def add_hits(self, counts: dict[int, tuple[int, float | None]],
                 stamps: dict[str, tuple[int, int, int]] | None = ...) -> None:
        """Add batched hit counts (id -> (n, last hit time; None: now by the index's clock));
        last_hit only grows."""

    def team_key(self) -> str | None:
        """The team's key check (``signing.key_check``) recorded by ``memolab remote upgrade``, or None."""

    def set_team_key(self, check: str, replace: bool = False) -> tuple[str | None, str]:
        """Record the team's key check unless one is recorded (``replace``: whatever is): (before, now)."""

    def clock(self) -> float:
        """The index's time in seconds (the database server's): what every comparison of times uses."""

    # -- listing and maintenance ---------------------------------------------------------
    def evaluations(self, fn: str | None = None, where: str = "", params: Sequence[Any] = (),
                    order: str = "finished DESC", limit: int | None = None) -> list[Row]:
        """Rows without ``inline`` (``where`` only for the local index: its SQL dialect)."""

    def functions(self) -> list[dict[str, Any]]:
        """Per function: evaluations, size, last, hits, compute (sum of durations)."""

    def referenced_digests(self, exclude: Collection[int] = ...) -> set[str]:
        """Digests of blobs rows (other than ``exclude``) refer to (inline rows refer to none)."""

    def gc_plan(self, cutoff: float | None, max_size: int | None, kept: Collection[Key] = ()) -> list[Row]:
        """What gc drops, least recently used first (see ``Store.gc_plan``), never a 'done' row
        whose key is one of ``kept`` (keep marks: ``store.marks``)."""

    def delete_evaluations(self, ids: Sequence[int]) -> None: ...

    def clear(self, fn: str | None = None) -> int: ...

    def source(self, digest: str) -> str | None: ...

    def sources_of(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """digest -> (symbol, source text) of those of ``digests`` kept here, in one query:
        the code texts a row's snapshot names, for ``explain``'s diffs on another machine."""
