"""What a store, its index and its blob stores promise: the one boundary the memo layer talks to.

Four stores stand behind it: ``Store`` (an SQLite index and a blob folder),
``ReadOnlyStore`` and ``NoStore`` (a store that cannot be written, or not used at
all: ``health``), and ``TeamStore`` (``team.layered``: a local ``Store`` in front
of a team index and blob store, holding it, not subclassing it). The memo layer,
``explain`` and the CLI use them only through ``MemoStore``; the conformance suite
(``tests/test_store_conformance.py``) runs the same behaviour over all four.

Two indexes satisfy ``EvaluationIndex`` (``sqlite.Index``, ``team.pg.PgIndex``;
``tests/test_index_conformance.py``). Blobs come in two shapes, on purpose: the
local folder is written by content (``put(data) -> (digest, size)``, memory-mapped
reads, verification by stamp) and a remote blob store is written under a digest
the caller computed while streaming (``put(digest, data)``, batched transfers);
``BlobReader`` is what both answer alike.

Protocols only: nothing here is imported on the hit path, and no class has to
inherit from them (they are ``runtime_checkable`` for the tests' ``isinstance``).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from ..key import Key

Row = dict[str, Any]

__all__ = ["Key", "Row", "EvaluationIndex", "BlobReader", "LocalBlobs", "RemoteBlobs", "MemoStore", "LayeredStore"]


@runtime_checkable
class EvaluationIndex(Protocol):
    """The rows of evaluations, their leases and their usage (``sqlite.Index``, ``team.pg.PgIndex``)."""

    def lookup(self, key: Key, lean: bool = False) -> Row | None:
        """The 'done' row of ``key`` or None: one query, nothing written."""

    def lookup_many(self, keys: Sequence[Key]) -> dict[Key, Row]: ...

    def claim(self, key: Key, owner: str, ttl: float, force: bool = False,
              on_owner: Callable[[Any], None] | None = None) -> tuple[str, Row | None]:
        """('hit', row), ('owner', None) or ('wait', None): one attempt at the lease of ``key``."""

    def heartbeat(self, held: Iterable[tuple[Key, str]]) -> None: ...

    def release(self, key: Key, owner: str) -> None: ...

    def live_leases(self, ttl: float) -> int: ...

    def record(self, key: Key, owner: str, fields: Row, sources: dict[str, tuple[str, str]],
               present: Callable[[], bool] | None = None, also: Callable[[Any], None] | None = None) -> int:
        """Store the row of ``key`` and drop ``owner``'s lease (``BlobsGone`` if ``present()`` says no)."""

    def publish(self, key: Key, fields: Row, sources: dict[str, tuple[str, str]], **kw: Any) -> Any: ...

    def publish_many(self, rows: Sequence[tuple[Key, Row, dict[str, tuple[str, str]]]], **kw: Any) -> Any: ...

    def rows_since(self, fn: str | None = None, since: float | None = None, **kw: Any) -> list[Row]: ...

    def inline_of(self, eval_id: int) -> bytes | None: ...

    def mark_corrupt(self, eval_id: int, reason: str | None = None, status: str = "corrupt") -> None: ...

    def add_hits(self, counts: dict[int, tuple[int, float]], stamps: dict[str, tuple[int, int, int]] | None = ...) -> None: ...

    def evaluations(self, fn: str | None = None, where: str = "", params: Sequence[Any] = (), **kw: Any) -> list[Row]: ...

    def functions(self) -> list[Row]: ...

    def referenced_digests(self, exclude: Collection[int] = ...) -> set[str]: ...

    def gc_plan(self, cutoff: float | None, max_size: int | None) -> list[Row]: ...

    def delete_evaluations(self, ids: Sequence[int]) -> None: ...

    def clear(self, fn: str | None = None) -> int: ...

    def source(self, digest: str) -> str | None: ...

    def sources_of(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]: ...


@runtime_checkable
class BlobReader(Protocol):
    """What local and remote blob stores answer alike: the bytes of a blob, verified
    against its digest (``CorruptBlob`` if they do not match)."""

    def get(self, digest: str, size: int) -> Any: ...


@runtime_checkable
class LocalBlobs(BlobReader, Protocol):
    """The blob folder of a local store (``blobs.BlobFolder``)."""

    def put(self, data: Any, digest: str | None = None) -> tuple[str, int]: ...

    def path(self, digest: str) -> Any: ...

    def size(self, digest: str) -> int:
        """Its size in bytes, 0 if absent."""

    def mtime(self, digest: str) -> float: ...

    def verify(self, digest: str) -> str | None: ...

    def quarantine(self, digest: str) -> None: ...

    def delete(self, digest: str) -> None: ...

    def clean_tmp(self, older_than: float = 3600.0) -> int: ...

    def __iter__(self) -> Iterator[str]: ...


@runtime_checkable
class RemoteBlobs(BlobReader, Protocol):
    """A team blob store (``team.blobs``: a folder, fsspec, S3)."""

    def put(self, digest: str, data: Any) -> bool: ...

    def get_to(self, digest: str, size: int, path: Any, **kw: Any) -> Any: ...

    def exists(self, digest: str) -> bool: ...

    def size(self, digest: str) -> int | None:
        """Its size in bytes, None if absent."""

    def list(self) -> Iterator[tuple[str, int, float]]: ...

    def delete(self, digests: Iterable[str]) -> None: ...

    def ping(self, timeout: float | None = None) -> None: ...


@runtime_checkable
class MemoStore(Protocol):
    """What the memo layer, ``explain`` and the CLI use of any store (``Store``,
    ``ReadOnlyStore``, ``NoStore``, ``TeamStore``).

    A call: ``load_from_memory`` (a hit in this process), else ``lookup`` (a hit
    ends there: ``load``), else a miss: ``is_quick`` decides whether it may compute
    without a lease; otherwise ``try_acquire`` until 'hit' or 'owner', then
    ``save`` (which drops the lease) or ``release``. A store that cannot store
    raises ``StoreUnavailable`` from ``try_acquire``/``save`` (the caller computes
    and warns); such a store has a ``problem`` attribute (a working one has none).
    """

    root: Any
    #: (fn, code digest) of results this process stored here (``explain``)
    stored_codes: Any
    index: Any

    def owner_id(self) -> str:
        """The lease owner of the calling thread."""

    def lookup(self, key: Key) -> Row | None: ...

    def try_acquire(self, key: Key, owner: str, force: bool = False,
                    on_owner: Callable[[Any], None] | None = None) -> tuple[str, Row | None]: ...

    def release(self, key: Key, owner: str) -> None:
        """Best effort: never raises."""

    def load_from_memory(self, key: Key, accept: Callable[[Row], bool] | None = None) -> tuple[bool, Any]:
        """This process's copy of ``key``'s result, if it has one whose row ``accept``s (not counted as a hit else)."""

    def has_copy(self, key: Key) -> bool:
        """Does this process hold a copy of ``key``'s result (``load_from_memory``'s candidate)?"""

    def forget(self, fn: str | None = None) -> None: ...

    def forget_key(self, key: Key) -> None: ...

    def flush_hits(self) -> None: ...

    def clear(self, fn: str | None = None) -> int: ...

    def collect_garbage(self, dry_run: bool = False) -> tuple[int, int]: ...


@runtime_checkable
class LayeredStore(MemoStore, Protocol):
    """A store that can store: all of ``MemoStore`` and the rest of a call's path
    (``Store``, ``ReadOnlyStore``, ``TeamStore``; not ``NoStore``)."""

    blobs: Any

    def note_duration(self, key: Key, seconds: float) -> None: ...

    def is_quick(self, key: Key) -> bool: ...

    def save(self, key: Key, owner: str, value: Any, fields: Row, sources: dict[str, tuple[str, str]]) -> int: ...

    def load(self, key: Key, row: Row) -> Any: ...

    def check_entry(self, key: Key, row: Row) -> str | None: ...

    def mark_corrupt(self, key: Key, row: Row, reason: str | None = None, status: str = "corrupt") -> None: ...

    def count_hit(self, eval_id: int) -> None: ...

    def ride_along(self, fn: Callable[[Any], None] | None) -> None: ...

    # around a save and the writing of its run's logs (a team store uploads the result after it)
    def logs_pending(self, key: Key) -> AbstractContextManager[None]: ...

    # why a call missed, handed over by the memo layer (which runs no SQL of its own)
    def known_absent(self, key: Key) -> bool: ...

    def newest_id(self) -> int | None: ...

    def miss_rider(self, fn: str, record: str) -> Callable[[Any], None]: ...

    def write_rider(self, rider: Callable[[Any], None]) -> None: ...

    def gc_plan(self, older_than: float | None = None, max_size: int | None = None,
                now: float | None = None) -> list[Row]: ...

    def unreferenced_blobs(self, dropping: Sequence[int] = (), among: Sequence[str] | None = None) -> list[tuple[str, int]]: ...
