"""Signed index entries: a store shared with others can refuse forged ones.

When ``$MEMOLAB_HMAC_KEY`` is set, every evaluation written gets an
HMAC-SHA256 over its key and everything that decides what loading it does (the
payload digest and size, the buffer digests and sizes, the code references,
and the snapshot, whose result digests decide how the loaded value hashes).
Blobs are content-addressed, so signing their digests covers their bytes: the
payload is re-hashed on every load, and so are buffers while a key is set
(``Store._unpickle``: a stat stamp is no proof against someone who can edit
blobs). On read, with the key set, an unsigned or mis-signed entry is refused
as a miss; without the key nothing is checked (and nothing signed).
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..settings.config import environ_bytes

ENV = "MEMOLAB_HMAC_KEY"
#: set to 1 to load a team store's results without a key (docs/team.md, "Trust"): an explicit opt-in
UNSIGNED_ENV = "MEMOLAB_TEAM_UNSIGNED"
_PREFIX = "hmac-sha256:"
_SIGNED = ("payload", "payload_size", "buffers", "code_refs")
# Version 2 also signs the snapshot: its result_digest is how a loaded array
# is hashed when passed to another memoized function, so a forged one picks
# that function's key (it answered with another input's result).
_V2 = "v2:"
_SIGNED_V2 = _SIGNED + ("snapshot",)


_ENV_B = ENV.encode("ascii")


def secret() -> bytes | None:
    """The key's bytes (as the environment holds them), or None when unset or empty.
    Read afresh on every call (through ``config.environ_bytes``, 30 ns)."""
    return environ_bytes(_ENV_B) or None


#: ``secret()`` without a Python call (a partial of ``environ_bytes``, a dict's ``get`` on POSIX):
#: the key's bytes, b"" or None, so false exactly when ``secret()`` is None. What a store hit asks
#: (whether its lookup may be lean, whether a row's signature is checked, whether its snapshot is
#: believed): 600 instructions less each time.
keyed: Callable[[], bytes | None] = functools.partial(environ_bytes, _ENV_B)


def _message(key: Sequence[str], row: dict[str, Any], fields: Sequence[str]) -> bytes:
    return json.dumps([list(key), [row.get(f) for f in fields]], separators=(",", ":")).encode("utf-8")


def _mac(secret_: bytes, key: Sequence[str], row: dict[str, Any], v2: bool = True) -> str:
    # imported here: only stores that sign pay for hashlib and hmac
    import hashlib
    import hmac

    mac = hmac.new(secret_, _message(key, row, _SIGNED_V2 if v2 else _SIGNED), hashlib.sha256).hexdigest()
    return _PREFIX + (_V2 if v2 else "") + mac


def sign(key: Sequence[str], row: dict[str, Any]) -> str | None:
    s = secret()
    if s is None:
        return None
    return _mac(s, key, row)


def snapshot_trusted(row: dict[str, Any]) -> bool:
    """May the row's snapshot (its result digests) be believed? Always without
    a key (nothing is checked then); with one, only under a version-2 signature
    (older signatures, still accepted for the result itself, do not cover it)."""
    if secret() is None:
        return True
    return str(row.get("signature") or "").startswith(_PREFIX + _V2)


def problem(key: Sequence[str], row: dict[str, Any]) -> str | None:
    """Why ``row`` must be refused under the current key, or None."""
    s = secret()
    if s is None:
        return None
    sig = row.get("signature")
    if not sig:
        return f"entry is unsigned and ${ENV} requires signed entries"
    import hmac

    if not hmac.compare_digest(str(sig), _mac(s, key, row, v2=str(sig).startswith(_PREFIX + _V2))):
        return "entry signature does not match (tampered, or signed with another key)"
    return None


def key_check() -> str | None:
    """A check value of the current key (an HMAC of a fixed text: it tells nothing of the key
    but, like any signature, lets a weak key be guessed offline: use a long random one). The
    team's is recorded in its index by ``memolab remote upgrade`` (``set_team_key``), never by
    whoever publishes first: a teammate with a mistyped key used to fix the team's identity so.
    A machine whose check differs has another key: every row it verifies looks forged to it, so
    it never replaces one (``replaces``) and publishes nothing (``key_refusal``)."""
    s = secret()
    if s is None:
        return None
    import hashlib
    import hmac

    return _PREFIX + "check:" + hmac.new(s, b"memolab key check", hashlib.sha256).hexdigest()


KEY_CHECK = "hmac_check"  # the name a key check is kept under in an index's meta table


def replaces(key: Sequence[str], old: dict[str, Any], new: dict[str, Any], recorded_check: str | None) -> bool:
    """May ``new``, a row being published for ``key``, replace ``old``, the row stored for it?
    Only when ``old`` is refused (unsigned, or a signature that does not match: forged, or
    published by a machine without the key), ``new`` verifies, and this machine's key is
    the one the index recorded (``key_check``): judged here, where the key is, on exactly
    the values ``old`` holds, which the index then replaces only if they are unchanged."""
    mine = key_check()
    return (mine is not None and recorded_check == mine and problem(key, new) is None
            and problem(key, old) is not None)


def key_refusal(recorded: str | None) -> str | None:
    """Why this machine must not publish into a team index whose key check is ``recorded``
    (None: none recorded, nothing to compare: it may), or None when it may."""
    if recorded is None:
        return None
    mine = key_check()
    if mine == recorded:
        return None
    if mine is None:
        return (f"the team store's rows are signed (`memolab remote upgrade` recorded the team's key) and ${ENV} "
                "is not set here: results computed here are not published (set the team's key)")
    return (f"${ENV} here is not the team's key (its check value differs from the one `memolab remote upgrade` "
            "recorded in the team store, check " + recorded.rpartition(":")[2][:12] + "...): results computed here "
            "are not published and team rows are not replaced; set the team's key, or make this key the team's "
            "with `memolab remote upgrade --set-key`")


#: what a keyless machine says when the team signs (``load_refusal``)
TEAM_SIGNS = f"the team signs its results; set {ENV} to use them (computing locally)"


def unsigned_allowed() -> bool:
    """Has the user said, with ``$MEMOLAB_TEAM_UNSIGNED=1``, that an unsigned team store may be
    loaded without a key? Exactly ``1``: a security choice is never guessed from a typo."""
    import os

    return os.environ.get(UNSIGNED_ENV, "").strip() == "1"


def load_refusal(recorded: str | None) -> str | None:
    """Why this machine must not load (unpickle) any row of a team store whose recorded key check
    is ``recorded`` (``memolab remote upgrade``; None: none recorded), or None when it may.

    With a key every row is verified on its own (``problem``): nothing to refuse wholesale.
    Without one, nothing can be verified: a team that signs (a check is recorded) is never
    loaded, whatever the user opts into (a row without a valid signature is, for this team,
    a forgery or a mistake: the keyed machines refuse it too); an unsigned team only with
    ``$MEMOLAB_TEAM_UNSIGNED=1``, the user's statement that everyone who can write the team
    store may run code in this process."""
    if secret() is not None:
        return None
    if recorded is not None:
        return TEAM_SIGNS
    if unsigned_allowed():
        return None
    return (f"the team store is unsigned and {ENV} is not set here: its results are not loaded, since anyone "
            f"who can write the team store could run code in this process (computing locally); set the team's "
            f"{ENV}, or {UNSIGNED_ENV}=1 to trust an unsigned team store (docs/team.md, Trust)")
