"""Signed index entries: a store shared with others can refuse forged ones.

When ``$MEMOLAB_HMAC_KEY`` is set, every evaluation written gets an
HMAC-SHA256 over its key and everything that decides what loading it does (the
payload digest and size, the buffer digests and sizes, the code references).
Blobs are content-addressed, so signing their digests covers their bytes: the
payload is re-hashed on every load, and so are buffers while a key is set
(``Store._unpickle``: a stat stamp is no proof against someone who can edit
blobs). On read,
with the key set, an unsigned or mis-signed entry is refused as a miss; without
the key nothing is checked (and nothing signed).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence

ENV = "MEMOLAB_HMAC_KEY"
_PREFIX = "hmac-sha256:"
_SIGNED = ("payload", "payload_size", "buffers", "code_refs")


def secret() -> Optional[bytes]:
    k = os.environ.get(ENV)
    return k.encode("utf-8") if k else None


def _message(key: Sequence[str], row: Dict[str, Any]) -> bytes:
    return json.dumps([list(key), [row.get(f) for f in _SIGNED]], separators=(",", ":")).encode("utf-8")


def _mac(secret_: bytes, key: Sequence[str], row: Dict[str, Any]) -> str:
    # imported here: only stores that sign pay for hashlib and hmac
    import hashlib
    import hmac

    return _PREFIX + hmac.new(secret_, _message(key, row), hashlib.sha256).hexdigest()


def sign(key: Sequence[str], row: Dict[str, Any]) -> Optional[str]:
    s = secret()
    if s is None:
        return None
    return _mac(s, key, row)


def problem(key: Sequence[str], row: Dict[str, Any]) -> Optional[str]:
    """Why ``row`` must be refused under the current key, or None."""
    s = secret()
    if s is None:
        return None
    sig = row.get("signature")
    if not sig:
        return f"entry is unsigned and ${ENV} requires signed entries"
    import hmac

    if not hmac.compare_digest(str(sig), _mac(s, key, row)):
        return "entry signature does not match (tampered, or signed with another key)"
    return None
