"""Why a stored result cannot be used, told without unpickling it: the code
references it was stored with (``check_refs``), and the miss an exception raised
while unpickling stands for (``load_error``)."""
from __future__ import annotations

from typing import Any

from ..errors import CodeChanged, StoreMiss, Unloadable
from .locate import code_digest, lookup_symbol
from .sources import source_changed


def load_error(e: Exception) -> StoreMiss:
    """The miss an exception raised while unpickling a stored result stands for.

    (The store unpickles with ``_pickle`` directly, so that a first hit need not
    import this module, and asks here only when loading failed.)"""
    if isinstance(e, (AttributeError, ImportError, ModuleNotFoundError)):
        # Pickled by name (library code) and now gone: a miss, not a crash.
        return CodeChanged(f"stored result refers to code that no longer loads: {e}")
    # A __setstate__ or reconstructor that rejects the stored state (a
    # library upgraded under it, a file it reopens gone): the result cannot
    # be rebuilt faithfully. That is a miss with its reason, never a crash
    # of the caller's call, which can simply recompute.
    return Unloadable(f"stored result cannot be rebuilt: {type(e).__name__}: {e}")


def check_refs(refs: dict[str, Any]) -> str | None:
    """Why the code references of a stored result no longer hold, or None.

    Cheap (no unpickling); used by ``explain``. Symbols of ``__main__`` that the
    running program lacks pass (the stored code travels by value) unless the
    file they came from is here and their definition in it changed."""
    for sym, ref in refs.items():
        # a plain digest, or [digest, source file, fingerprint] for by-value code
        digest, source = (ref, None) if isinstance(ref, str) else (ref[0], ref[1:])
        modname, _, qual = sym.partition(":")
        ok, obj = lookup_symbol(modname, qual, import_=modname != "__main__")
        if not ok:
            if modname == "__main__":
                why = source_changed(qual, source)
                if why:
                    return f"`{sym}` {why}"
                continue
            return f"`{sym}` no longer exists"
        try:
            if code_digest(obj) != digest:
                return f"`{sym}` changed since the result was stored"
        except Exception as e:  # a digest that fails is a change we cannot rule out
            return f"`{sym}` cannot be checked: {e}"
    return None
