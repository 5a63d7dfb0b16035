"""``random``'s and numpy's global generators: how to read, digest and prove unseeded their
states, and which of their functions seed and draw (``rngwrap``). Each registers with
``globalrng`` once its module is imported (``hooks.LAZY_HOOKS["global_rng"]``, as torch's
does from ``torch/rng.py``); nothing here imports numpy before then.
"""
from __future__ import annotations

import struct
from typing import Any

import xxhash

from .globalrng import Generator, add_recorder, register
from .rngwrap import no_seed_given, original, patch, recording_class

__all__ = ["register_random", "register_numpy"]

_pack_I = struct.Struct("<625I").pack


def _random_digest(state: Any) -> str:
    version, internal, gauss = state
    return xxhash.xxh3_128_hexdigest(_pack_I(*internal) + repr((version, gauss)).encode())


def _itself(state: Any) -> Any:
    return state


#: ``random``'s module functions that draw from its global generator
_RANDOM_DRAWS = ["random", "uniform", "triangular", "randint", "choice", "randrange", "sample", "shuffle", "choices",
                 "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate", "gauss",
                 "betavariate", "paretovariate", "weibullvariate", "getrandbits", "randbytes", "binomialvariate"]


def register_random() -> None:
    import random

    register(Generator("random", original(random.getstate), original(random.setstate), _itself, _random_digest,
                       "random"))
    patch(random, ["seed"], "random", entropy=no_seed_given)
    patch(random, ["setstate"], "random")
    inst = getattr(random, "_inst", None)
    if type(inst) is not random.Random:  # replaced by the program: other threads' draws count as the body's
        patch(random, _RANDOM_DRAWS, "random", kind="draw")
        return
    import _random

    recorder = recording_class(random.Random, "random", ("random", "getrandbits"), _random.Random)
    add_recorder(inst, random.Random, recorder)
    patch(random, _RANDOM_DRAWS, "random", kind="draw", via=inst)


#: how many keys (624 draws of 32 bits each) a proof follows from the generator's first state
_PROOF_TWISTS = 64


def register_numpy() -> None:
    """numpy's legacy global ``RandomState`` (``np.random.rand``, ``np.random.seed``);
    ``np.random.default_rng()`` generators are objects passed as arguments."""
    import numpy as np
    import numpy.random.mtrand as mtrand

    get_state = original(np.random.get_state)

    def get() -> Any:
        return get_state(legacy=False)

    def token(state: Any) -> Any:
        # the cached second normal counts: a draw that uses it moves nothing else
        s = state["state"]
        return (state["bit_generator"], s["pos"], state["has_gauss"], state["gauss"], s["key"].tobytes())

    def digest(state: Any) -> str:
        t = token(state)
        return xxhash.xxh3_128_hexdigest(repr(t[:4]).encode() + t[4])

    def evidence() -> tuple[Any, ...] | None:
        # ``np.random.seed`` drops the ``SeedSequence`` the OS seeded the generator from
        bits = getattr(mtrand._rand, "_bit_generator", None)
        seq = getattr(bits, "_seed_seq", None)
        return None if seq is None else (bits, seq)

    def proof() -> bool:
        """Unseeded: the state is the one the generator's ``SeedSequence`` (from the OS) makes,
        or one that draws reach from it (a set state is not, but by chance: a 19968-bit key)."""
        bits = getattr(mtrand._rand, "_bit_generator", None)
        seq = getattr(bits, "_seed_seq", None)
        if type(bits) is not np.random.MT19937 or type(seq) is not np.random.SeedSequence:
            return False
        key = get()["state"]["key"]
        probe = np.random.MT19937(seq)
        for _ in range(_PROOF_TWISTS + 1):
            if np.array_equal(probe.state["state"]["key"], key):
                return True
            probe.random_raw(624)  # the draws of one whole key: the next key
        return False  # more draws than that before the first memoized call: its state counts

    register(Generator("numpy", get, original(np.random.set_state), token, digest, "numpy", proof=proof,
                       evidence=evidence))
    for module in (np.random, mtrand):
        patch(module, ["seed"], "numpy", entropy=no_seed_given)
        patch(module, ["set_state"], "numpy")
