"""The handler registry: which handler hashes which type, and the registrations
that feed it (lazy hooks for third-party modules, large leaves, attribute
policies). The handlers live in ``builtins``, ``objects`` and the integrations;
``objects.resolve`` finds the handler of a type not registered itself."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .. import codegraph
from ..settings.hooks import HOOK_WAIT
from . import identity

#: ``handler(enc, obj)``: ``enc`` is the ``Encoder`` (hashing.encoder), which imports this module,
#: so it is not named here: a handler may annotate it as the ``Encoder`` or as ``Encoding``; what it
#: returns is ignored (a lambda may return its writes' tuple)
Handler = Callable[[Any, Any], object]


class Encoding(Protocol):
    """What the generic rules (hashing.objects) use of the ``Encoder`` they are given."""

    buf: bytearray

    def write(self, data: bytes) -> None: ...
    def write_str(self, s: str) -> None: ...
    def memoize(self, obj: Any) -> bool: ...
    def encode(self, obj: Any) -> None: ...
    def encode_child(self, obj: Any, segment: str) -> None: ...

# -- registry ----------------------------------------------------------------------
#
# Handlers are found by exact type; a type without one is *resolved* once (its
# nearest registered base class, or a generic handler) and the result cached in
# ``dispatch``. ``resolved`` remembers which entries were resolved rather than
# registered, so that a later registration that could change the answer drops
# them (``forget_resolved``). Lazy registrations (numpy, torch, torch.optim)
# run before a type is resolved if any class in its MRO lives in their module:
# a user ``class Net(nn.Module)`` hashed first must get the module handler, not
# the generic one cached for good.


dispatch: dict[type, Handler] = {}
#: types whose ``dispatch`` entry was resolved (inherited or generic), not registered
resolved: set[type] = set()
lazy: dict[str, Callable[[], None]] = {}


def register_lazy(module: str, register: Callable[[], None]) -> None:
    """Run ``register()`` before the first type whose MRO has a class from ``module`` is hashed.

    ``module`` is a top-level package (``"numpy"``) or a dotted prefix
    (``"torch.optim"``): a class counts if its ``__module__`` is ``module`` or
    lies below it. The hook sees that module imported already (a class from it
    exists), so registering never imports anything the user did not.
    """
    lazy[module] = register
    forget_resolved(lambda t: any(_module_matches(module_of(b), module) for b in getattr(t, "__mro__", ())))


def module_of(t: type) -> str:
    m = getattr(t, "__module__", None)
    return m if isinstance(m, str) else ""


def _module_matches(name: str, prefix: str) -> bool:
    return name == prefix or (name.startswith(prefix) and name[len(prefix)] == ".")


def forget_resolved(affected: Callable[[type], bool]) -> None:
    # list() copies in one C call (no thread switch), so a concurrent resolve cannot break the loop
    for t in [t for t in list(resolved) if affected(t)]:
        resolved.discard(t)
        dispatch.pop(t, None)


#: held while a lazy registration runs (re-entrant: a registration may hash). A registration
#: leaves ``lazy`` as it starts, and its handlers exist only once it returns: a second thread
#: resolving a type meanwhile found nothing pending, hashed a numpy array generically (another
#: digest: another key, computed again under it) and cached that handler. It waits here instead.
_lazy_lock = threading.RLock()
#: how many lazy registrations are running, in all threads (``objects.resolve`` waits while any is)
lazy_running = [0]


def run_lazy(t: type) -> None:
    """Run every pending lazy registration that could apply to ``t`` (any class of its MRO),
    after any another thread is running.

    A registration may add further lazy hooks (torch adds ``torch.optim``), so
    this loops until none applies.
    """
    if not _lazy_lock.acquire(timeout=HOOK_WAIT):  # (a bound against a hang: a registration takes milliseconds)
        return
    try:
        while lazy:
            mods = {module_of(b) for b in getattr(t, "__mro__", (t,))}
            hit = next((p for p in lazy if any(_module_matches(m, p) for m in mods)), None)
            if hit is None:
                return
            register = lazy.pop(hit)
            lazy_running[0] += 1
            try:
                register()
            finally:
                lazy_running[0] -= 1
    finally:
        _lazy_lock.release()


class Leaf:
    """How to hash one kind of large leaf (an array, a tensor).

    ``digest(obj)`` returns the digest of the leaf's own encoding (bytes).
    ``stamp(obj)`` returns a cheap value that changes whenever the content can
    have changed, or ``None`` when a change could go unnoticed (then the leaf is
    always rehashed). ``loaded(obj)`` is ``stamp`` for a leaf just loaded from
    the store, whose memory the store vouches for (read-only blob mappings).
    ``pin(obj)``, if given, returns an object the identity entry keeps alive with
    it (a tensor's storage address, held so that no new storage can take it).
    ``track(obj)``, if given, is ``stamp`` after making ``obj``'s changes visible to
    it where that is possible (a tensor's storage made copy-on-write): called when
    the cache had no usable entry, before ``digest`` reads the content.
    """

    __slots__ = ("digest", "stamp", "loaded", "pin", "track")

    def __init__(self, digest: Callable[[Any], bytes], stamp: Callable[[Any], Any],
                 loaded: Callable[[Any], Any] | None = None, pin: Callable[[Any], Any] | None = None,
                 track: Callable[[Any], Any] | None = None) -> None:
        self.digest = digest
        self.stamp = stamp
        self.loaded = loaded or stamp
        self.pin = pin
        self.track = track or stamp

    def remember(self, obj: Any, stamp: Any, digest: bytes, origin: Any = None) -> None:
        """Record ``digest`` for ``obj`` under ``stamp`` in the identity cache (with its pin)."""
        if stamp is not None:
            identity.remember(obj, stamp, digest, origin, self.pin(obj) if self.pin is not None else None)


leaves: dict[type, Leaf] = {}


def register_leaf(type_: type, leaf: Leaf) -> None:
    """Declare ``type_`` a large leaf (see ``Leaf``); its handler calls ``Encoder.write_leaf``."""
    leaves[type_] = leaf


# -- attribute policies ---------------------------------------------------------------

policies: dict[type, frozenset[str]] = {}
_policy_cache: dict[type, frozenset[str]] = {}


def register_policy(type_: type, *, exclude: Iterable[str] = ()) -> None:
    """Leave the named attributes of ``type_`` instances (and subclasses') out of keys.

    For state that is not content: a sampler's generator handle, a live
    iterator, a cache filled lazily. Policies of all base classes add up.
    """
    policies[type_] = frozenset(exclude) | policies.get(type_, frozenset())
    _policy_cache.clear()


def excluded_attributes(t: type) -> frozenset[str]:
    got = _policy_cache.get(t)
    if got is None:
        got = frozenset()
        for base in getattr(t, "__mro__", (t,)):
            got = got | policies.get(base, frozenset())
        _policy_cache[t] = got
    return got


def type_name(t: type) -> str:
    # ``__mp_main__`` (a spawned child's copy of the script) keys as ``__main__``
    return f"{codegraph.key_module(t.__module__)}:{t.__qualname__}"


#: built-in value types whose handler writes the content but not the exact type:
#: a subclass (``class Config(OrderedDict)`` overriding ``__getitem__``) would
#: otherwise share keys with its base
TYPE_BLIND: set[type] = set()


#: built-in containers and scalars: a subclass never inherits their handler (it may carry attributes)
STRUCTURAL = frozenset((list, tuple, dict, set, frozenset, bytes, str, int, float))
