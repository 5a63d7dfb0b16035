"""A stored row as one call writes and reads it, and a hit on this process's memory.

The fields of an evaluation's row that a call makes (``arg_snapshot``: each argument's digest
and short repr, ``versions_json``, ``json_text``) and reads back on a hit (``state_deps``: the
global generator states it was made in, ``result_token``: the result's digests for the result
walk), with ``states_named`` (a generator state as an argument is shown); and ``memory_hit``,
which serves a call from the results this process holds, judged as a store hit is. The steps of
a call that use them are ``calls/call.py``'s ``Call``.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .. import hashing
from ..errors import swallowed
from ..inputs import globalrng, implicit, mutations, reads, upstream
from ..settings.text import mask_args
from ..store import Key, signing
from .summary import text


def arg_snapshot(named: list[tuple[str, Any]], per_arg: dict[str, str]) -> dict[str, list[str]]:
    """Per argument (and pseudo-argument: a callable's state, a global switch, a generator
    state): its digest and a short repr (the key's arguments as shown and explained).
    Secrets are masked: an argument whose name says it is one (``hub_token``, ``api_key``) shows
    ``<masked>``, and the repr of any other masks its secret-named fields (``short_repr``)."""
    values = dict(named)
    # a tensor, a model, a frame: a typed summary (``tensor(float32, 3×224×224)``), not its repr
    return mask_args({n: [d, text(values.get(n))] for n, d in per_arg.items()})


def memory_hit(store: Any, key: Key, fresh: Callable[[dict[str, Any]], bool] | None = None,
               named: list[tuple[str, Any]] | None = None, seen: list[Any] | None = None) -> tuple[bool, Any]:
    """(True, value) if this process holds ``key``'s result in memory and may use it.

    A result made from global generator states (``globalrng``) serves only a call made
    from the same states; for another, the copy of the key those states route to is
    looked at instead (``Call.reroute`` does the same against the store). A hit restores
    the generators to where the body left them. ``fresh(row)``: False for a copy that
    expired (``expiry``): the call then goes to the store, which recomputes it. The arguments the
    body changed are put back into ``named``'s objects, as a hit from the store does. ``seen``: a
    hit appends (the key served, its row, the value held no arguments to put back) to it."""
    if not store.has_copy(key):
        # (no copy of the key: ``fits`` would never run, so no routed key either; a call past
        # memory, every store hit, then skips making the closure and taking the memory's lock)
        return False, None
    now: dict[str, str] | None = None
    used: dict[str, Any] = {}

    def fits(row: dict[str, Any]) -> bool:
        nonlocal now, used
        used = row
        if fresh is not None and not fresh(row):
            return False
        if row.get("reads", True) and reads.stale(row) is not None:  # (the lookup's empty column: nothing read)
            return False  # a file it read changed: the store path recomputes it and says why
        if row.get("state_deps", True) is None:
            return True  # (the lookup's empty column, the common case: ``state_deps`` says None without a call)
        deps = state_deps(row)
        if deps is None:
            return True
        now = implicit.mismatch(deps)
        return now is None

    found, value = store.load_from_memory(key, fits)
    if not found and now is not None:
        fn, code, args, schema = key
        key, now = Key(fn, code, implicit.routed(args, now), schema), None
        found, value = store.load_from_memory(key, fits)
    if not found:
        return False, None
    value, post = served(store, key, value, used, named)
    if seen is not None:
        seen.append((key, used, post))
    return True, value


def served(store: Any, key: Key, value: Any, row: dict[str, Any],
           named: list[tuple[str, Any]] | None) -> tuple[Any, bool]:
    """An in-memory copy of ``key``'s result (``row``), unpickled: restore what the body left
    (generators, arguments changed in place: into ``named``'s objects), remember its digests,
    mark its lineage and tell a body in progress it used it. (The value, whether it had arguments
    to put back.) A hit through ``calls/fasthits`` ends here too."""
    value, post = mutations.split(globalrng.restore(value))
    hashing.remember_loaded(value, key)
    value = mutations.restore(value, post, named)
    upstream.mark(value, store, row["id"], key)
    if reads.active():
        used_by_body(key, row)
    return value, post is not None


def used_by_body(key: Key, row: dict[str, Any]) -> None:
    """The body running in this context (``reads.active()``) used the evaluation ``row`` of ``key``."""
    reads.consumed(key, row.get("started"), row.get("finished"), row["id"], reads.record_text(row))


class _State:
    """A global generator's state as the snapshot shows it (its digest, shortened)."""

    __slots__ = ("digest",)

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def __repr__(self) -> str:
        return f"<state {self.digest[:12]}>"


def states_named(per_arg: dict[str, str]) -> list[tuple[str, Any]]:
    """(pseudo-argument, value as shown) of each global generator state in ``per_arg``."""
    return [(n, _State(d)) for n, d in per_arg.items() if implicit.is_pseudo_argument(n)]


def state_deps(row: dict[str, Any]) -> dict[str, str] | None:
    """The states a stored row was made in (``snapshot.state_deps``: generator states, library
    versions), or None. A value that is not a mapping of names to digests (damage) matches no state."""
    if "state_deps" in row:  # extracted by the lookup (JSON1): no snapshot to parse
        text = row["state_deps"]
        if not text:
            return None  # the common case, on every hit: nothing to parse
    import json

    try:
        if "state_deps" in row:
            deps = json.loads(row["state_deps"])
        else:
            snap = row.get("snapshot")
            deps = json.loads(snap).get("state_deps") if snap and '"state_deps"' in snap else None
    except (ValueError, AttributeError):
        deps = {"?": "damaged"}
    if deps is not None and not (isinstance(deps, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in deps.items())):
        deps = {"?": "damaged"}
    return deps or None


def result_token(row: dict[str, Any]) -> list[str] | None:
    if "result_token" in row and not signing.keyed():  # (``secret() is None``)
        # the two answers of most small results, without parsing: no token recorded
        # (nothing the result walk remembers) or one without arrays or tensors
        text = row["result_token"]
        if text is None:
            return None
        if text == "[]":
            return []
    import json

    if not signing.snapshot_trusted(row):
        return None  # a signed store's older rows: their snapshot is not signed, so not believed
    try:
        if "result_token" in row:  # extracted by the lookup: a hit parses a short list, not the snapshot
            token = json.loads(row["result_token"]) if row["result_token"] else None
        else:
            token = json.loads(row.get("snapshot") or "{}").get("result_digest")
        if token is not None:
            for d in token:  # a damaged snapshot must cost the O(1) re-hash, never the call
                bytes.fromhex(d)
        return token
    except (ValueError, TypeError, AttributeError):  # a damaged snapshot (not JSON, not a list of hex digests)
        swallowed("call: _result_token")
        return None


def json_text(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)  # insertion order: arguments stay in signature order


_VERSIONS: dict[tuple[str, ...], str] = {}


def versions_json(memolab_version: str) -> str:
    """``{"memolab": ..., "numpy": ..., "torch": ...}`` as JSON, made once per set of versions."""
    loaded = _loaded_versions()
    k = (memolab_version, *loaded.items())
    text = _VERSIONS.get(k)  # type: ignore[arg-type]
    if text is None:
        text = _VERSIONS[k] = json_text({"memolab": memolab_version, **loaded})  # type: ignore[index]
    return text


def _loaded_versions() -> dict[str, str]:
    out = {}
    for name in ("numpy", "torch"):
        m = sys.modules.get(name)
        if m is not None:
            out[name] = getattr(m, "__version__", "?")
    return out

