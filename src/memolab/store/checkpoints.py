"""Checkpoints of evaluations in progress (``memolab.checkpoint``), kept in the store.

One row per evaluation key in its own table of ``index.sqlite``; the bytes go
to the blob folder like results do (a pickle payload plus out-of-band
buffers), so a checkpoint is as crash-safe as a result: blobs are written and
fsynced first, then the row is replaced in one transaction, under the lock
garbage collection deletes under. A SIGKILL at any moment leaves the previous
checkpoint or the new one, never a torn one. Rows are signed like
evaluations when ``$MEMOLAB_HMAC_KEY`` is set (a checkpoint runs code when
loaded, as a result does).
"""
from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from ..errors import BlobsGone, StoreMiss, swallowed
from ..key import Key
from . import signing

DDL = """
CREATE TABLE IF NOT EXISTS checkpoints(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    step INTEGER NOT NULL,
    created REAL NOT NULL,
    payload TEXT NOT NULL, payload_size INTEGER NOT NULL, buffers TEXT NOT NULL,
    code_refs TEXT, signature TEXT,
    PRIMARY KEY(fn, code, args, schema)
);
"""

_COLS = ("step", "created", "payload", "payload_size", "buffers", "code_refs", "signature")


def _signed_key(key: Key) -> tuple[str, ...]:
    # not an evaluation's signature: a checkpoint row cannot pass for a result
    return ("checkpoint", *key)


def _ensure(index: Any) -> None:
    if not getattr(index, "_checkpoints_ready", False):
        index.conn().executescript(DDL)
        index._checkpoints_ready = True


def save(store: Any, key: Key, step: int, value: Any) -> None:
    """Store ``value`` as the checkpoint of ``key`` (replacing the previous one)."""
    from .. import pickling

    index = store.index
    _ensure(index)
    payload, buffers, refs = pickling.dumps_with_refs(value)

    def put_and_record() -> None:
        pd, psize = store.blobs.put(payload)
        brefs = [store.blobs.put(b) for b in buffers]
        paths = [store.blobs.path(d) for d in [pd, *(d for d, _ in brefs)]]
        row = {"step": int(step), "created": time.time(), "payload": pd, "payload_size": psize,
               "buffers": json.dumps(brefs), "code_refs": json.dumps(refs, sort_keys=True)}
        row["signature"] = signing.sign(_signed_key(key), row)
        with index.write() as c:
            if not all(p.exists() for p in paths):
                raise BlobsGone(key)
            c.execute(f"INSERT OR REPLACE INTO checkpoints(fn, code, args, schema, {','.join(_COLS)}) "
                      f"VALUES (?,?,?,?,{','.join('?' * len(_COLS))})", (*key, *(row[k] for k in _COLS)))
            # Checkpoints of the same call under other code can never be resumed
            # by this code: the newest code's checkpoint supersedes them.
            c.execute("DELETE FROM checkpoints WHERE fn=? AND args=? AND schema=? AND code<>?",
                      (key[0], key[2], key[3], key[1]))

    try:
        put_and_record()
    except BlobsGone:  # gc took a blob between put and record: put again holding the lock
        with index.write():
            put_and_record()


def load(store: Any, key: Key) -> tuple[int, Any] | None:
    """(step, value) of the checkpoint of ``key``, or None. Raises ``StoreMiss``
    (``CodeChanged``) when it exists but cannot be used."""
    from .. import pickling

    index = store.index
    _ensure(index)
    r = index.conn().execute(f"SELECT {','.join(_COLS)} FROM checkpoints WHERE fn=? AND code=? AND args=? AND schema=?",
                             key).fetchone()
    if r is None:
        return None
    row = dict(zip(_COLS, r, strict=False))
    bad = signing.problem(_signed_key(key), row)
    if bad is None and row["code_refs"]:
        bad = pickling.check_refs(json.loads(row["code_refs"]))
    if bad is not None:
        raise StoreMiss(bad)
    payload = store.blobs.get(row["payload"], row["payload_size"], verify="always")
    buffers = [bytes(store.blobs.get(d, size, verify="always")) for d, size in json.loads(row["buffers"])]
    return row["step"], pickling.loads(bytes(payload), buffers)


def drop(store: Any, key: Key) -> None:
    index = store.index
    _ensure(index)
    with index.write() as c:
        c.execute("DELETE FROM checkpoints WHERE fn=? AND code=? AND args=? AND schema=?", key)


def referenced(conn: sqlite3.Connection) -> dict[str, int]:
    """blob digest -> a (negative) reference id, for every blob a checkpoint uses."""
    out: dict[str, int] = {}
    try:
        rows = conn.execute("SELECT rowid, payload, buffers FROM checkpoints").fetchall()
    except sqlite3.OperationalError:  # no checkpoint was ever written to this store
        return out
    for rowid, payload, buffers in rows:
        out[payload] = -int(rowid)
        for d, _size in json.loads(buffers or "[]"):
            out[d] = -int(rowid)
    return out


def clear(conn: sqlite3.Connection, fn: str | None = None) -> None:
    try:
        if fn is None:
            conn.execute("DELETE FROM checkpoints")
        else:
            conn.execute("DELETE FROM checkpoints WHERE fn=?", (fn,))
    except sqlite3.OperationalError:
        swallowed("store.checkpoints: clear")
