"""``python -m memolab.cli.selftest`` (``make selftest``): the self-tests of every mechanism that
reads interpreter or library internals, run in a fresh process.

Each of these mechanisms runs its self-test at first use and, where it fails, falls back to
the slower or more conservative way (never a wrong result). This runs exactly those tests,
so that a new CPython or torch release is checked with one command (docs/architecture.md,
"What memolab installs in the process"):

* ``dict-version-tags``: PEP 509 version tags read at a fixed offset (``codegraph.dictversion``);
* ``function-slots``: a function's code and defaults pointers read at a fixed offset (the same);
* ``type-bases``: a class's ``__bases__`` and ``__mro__`` pointers read at a fixed offset (the same);
* ``threading-register-atexit``: ``threading._register_atexit``, where a team store drains its
  journal at exit (``team.layered``; ``atexit`` otherwise);
* ``torch-copy-on-write``: copy-on-write storages trusted by the identity cache (``torch.tensors``);
* ``torch-seed-queue``: torch's lazy CUDA seed queue, read to prove a generator unseeded
  (``torch.rng``).

A test whose library is not installed is skipped. Exit status 1 if any test failed.
"""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable


def _dictversion() -> bool:
    from ..codegraph import dictversion

    return dictversion.self_test()


def _function_slots() -> bool:
    from ..codegraph import dictversion

    return dictversion.self_test("function")


def _type_bases() -> bool:
    from ..codegraph import dictversion

    return dictversion.self_test("type")


def _register_atexit() -> bool:
    """It exists and takes a callable before shutdown (``RuntimeError`` once it began)."""
    import threading

    register = getattr(threading, "_register_atexit", None)
    if not callable(register):
        return False
    register(lambda: None)
    return True


def _cow() -> bool:
    from ..torch import tensors

    return tensors.cow_works()


def _seed_queue() -> bool:
    from ..torch import rng

    return rng.seed_queue_works()


#: name -> (the library it needs, or None, the test)
TESTS: dict[str, tuple[str | None, Callable[[], bool]]] = {
    "dict-version-tags": (None, _dictversion),
    "function-slots": (None, _function_slots),
    "type-bases": (None, _type_bases),
    "threading-register-atexit": (None, _register_atexit),
    "torch-copy-on-write": ("torch", _cow),
    "torch-seed-queue": ("torch", _seed_queue),
}


def run() -> dict[str, str]:
    """name -> "ok", "FAILED" or "skipped (<library> not installed)"."""
    out = {}
    for name, (library, test) in TESTS.items():
        if library is not None and importlib.util.find_spec(library) is None:
            out[name] = f"skipped ({library} not installed)"
            continue
        try:
            ok = test()
        except Exception as e:  # a test that cannot even run has failed
            ok = False
            out[name] = f"FAILED ({type(e).__name__}: {e})"
            continue
        out[name] = "ok" if ok else "FAILED"
    return out


def main() -> int:
    results = run()
    for name, verdict in results.items():
        print(f"{name:28} {verdict}")
    return 1 if any(v.startswith("FAILED") for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
