"""What a miss or an error tells the user to do, where memolab's own words would not (the state of
a global random generator in a key: issue 53)."""
from __future__ import annotations

#: how each global generator memolab keys is seeded (``globalrng``, ``torch.rng``)
_SEED = {"torch": "torch.manual_seed(0)", "torch.cuda": "torch.manual_seed(0)",
         "numpy": "np.random.seed(0)", "random": "random.seed(0)"}


def rng_reason(name: str, old: str, new: str) -> str | None:
    """The reason for a miss whose pseudo-argument ``name`` (``<global rng torch>``) changed from
    ``old`` to ``new``, with the two remedies; None for any other argument."""
    if not (name.startswith("<global rng ") and name.endswith(">")):
        return None
    gen = name[len("<global rng "):-1]
    seed = _SEED.get(gen, f"seed {gen}")
    return (f"the global random generator {gen} was in another state than at the stored call: seed it the same way "
            f"before the call ({seed}) to reuse results, or @memo(global_rng=False) if any draws will do (global "
            "generators then stay out of the key). "
            f"The body draws from it, so its state is part of the key: {name} {old} -> {new} "
            "(docs/cache-rules.md, 'Global random generators')")
