"""The ``Encoder`` (one value's token stream into one hasher), the public entry
points ``hash_value`` and ``hash_arguments`` (with the remembered digests of
scalar-only calls), and the registration functions that change handlers."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import HashError
from . import identity
from .objects import encode_class, encode_extra_state, encode_object, resolve
from .primitives import KEY_SCHEMA_B, TREE_MIN, chunk_digests, hexdigest_of, new_hasher, pack_d, pack_Q, pack_q
from .registry import Handler, Leaf, dispatch, forget_resolved, resolved, type_name


class Encoder:
    """Streams type-tagged tokens of one or more values into a hasher.

    ``memo`` maps ``id(obj)`` of containers already seen to their visit index,
    so cycles terminate and shared references are encoded as back-references.
    ``keep`` holds every memoised object alive while we hash: a temporary
    (a ``__getstate__`` dict, say) freed mid-walk could otherwise hand its id to
    a new object and turn into a false back-reference.
    """

    __slots__ = ("h", "buf", "memo", "keep", "config_only")

    def __init__(self) -> None:
        self.h = new_hasher()
        self.buf = bytearray()
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []
        #: > 0 while encoding an object whose key is its configuration (a data
        #: loader, a sampler, a dataset): handlers leave out running state there,
        #: e.g. a seeded generator counts by its seed, not its position.
        self.config_only = 0

    # -- low-level output -------------------------------------------------
    def write(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 1 << 16:
            self.h.update(self.buf)
            self.buf.clear()

    def write_str(self, s: str) -> None:
        b = s.encode("utf-8", "surrogatepass")
        self.write(pack_Q(len(b)) + b)

    def write_uint(self, n: int) -> None:
        """An unsigned 64-bit integer (a length, a count)."""
        self.write(pack_Q(n))

    def write_ints(self, xs: Iterable[int]) -> None:
        """A sequence of signed 64-bit integers (a shape, strides), prefixed by its length."""
        xs = tuple(xs)
        self.write(pack_Q(len(xs)) + b"".join([pack_q(x) for x in xs]))

    def write_type(self, t: type) -> None:
        """A type by its qualified name (not its code: see ``encode_class``)."""
        self.write_str(type_name(t))

    def write_buffer(self, mv: memoryview) -> None:
        """Feed a contiguous buffer (1-D, bytes) without copying it.

        From TREE_MIN bytes on, the buffer enters as the digests of its chunks,
        computed on all cores; below, it is fed directly.
        """
        n = mv.nbytes
        if self.buf:
            self.h.update(self.buf)
            self.buf.clear()
        if n >= TREE_MIN:
            self.h.update(b"#" + pack_Q(n))
            self.h.update(chunk_digests(mv))
        else:
            self.h.update(pack_Q(n))
            self.h.update(mv)

    def write_leaf(self, obj: Any, leaf: Leaf) -> None:
        """Write a large leaf (array, tensor) as the digest of its own encoding.

        The digest comes from the identity cache when ``leaf.stamp`` vouches that
        ``obj`` cannot have changed since it was recorded; otherwise it is computed
        and, if a stamp exists, recorded for next time.
        """
        trusted = identity.enabled
        stamp = leaf.stamp(obj) if trusted else None
        d = identity.lookup(obj, stamp) if stamp is not None else None
        if d is None:
            stamp = leaf.track(obj) if trusted else None  # before the content is read
            d = leaf.digest(obj)
            leaf.remember(obj, stamp, d)
        self.write(b"H" + d)

    def flush(self) -> None:
        if self.buf:
            self.h.update(self.buf)
            self.buf.clear()

    def digest(self) -> bytes:
        self.flush()
        return self.h.digest()

    def hexdigest(self) -> str:
        self.flush()
        return self.h.hexdigest()

    def restart(self) -> None:
        """Start a new digest but keep the memo (used for per-argument digests)."""
        self.buf.clear()
        self.h = new_hasher()

    # -- traversal ----------------------------------------------------------
    def seen(self, obj: Any) -> bool:
        """Has ``obj`` been encoded already in this value (``memoize`` would write a back-reference)?"""
        return id(obj) in self.memo

    def memoize(self, obj: Any) -> bool:
        """Record ``obj``; if it was seen before write a back-reference and return True."""
        i = id(obj)
        n = self.memo.get(i)
        if n is not None:
            self.write(b"R" + pack_q(n))
            return True
        self.memo[i] = len(self.memo)
        self.keep.append(obj)
        return False

    def encode(self, obj: Any) -> None:
        t = type(obj)
        handler = dispatch.get(t)
        if handler is None:
            handler = resolve(t)
        handler(self, obj)

    def encode_child(self, obj: Any, segment: str) -> None:
        try:
            self.encode(obj)
        except HashError as e:
            e.at(segment)  # the same error, its path completed
            raise
        except RecursionError:
            raise HashError("value is nested too deeply to hash", segment, obj) from None

    def encode_class(self, t: type) -> None:
        """A class by symbol and code digest: editing its code changes the key."""
        encode_class(self, t)

    def encode_object(self, obj: Any, exclude: Iterable[str] = ()) -> None:
        """The generic rule: class by code + what pickle would save, minus policy-excluded and ``exclude`` attributes."""
        encode_object(self, obj, frozenset(exclude))

    def encode_extra_state(self, obj: Any) -> None:
        """The attributes (``__dict__``) an instance of a value type carries besides its value."""
        encode_extra_state(self, obj)


# -- registration ------------------------------------------------------------------

def register_hasher(type_: type, fn: Callable[[Any], Any]) -> None:
    """Hash instances of ``type_`` as ``fn(obj)`` (any hashable-by-memolab value).

    The type's qualified name is mixed in, so two types mapping to equal
    substitutes still hash differently.
    """
    tag = type_name(type_)

    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"U")
        enc.write_str(tag)
        enc.encode_child(fn(obj), "")

    register_handler(type_, handler)


def register_opaque(type_: type) -> None:
    """Leave instances of ``type_`` (loggers, clients, progress bars) out of keys.

    They hash to a constant that depends only on the type, so changing one never
    causes a miss. Use this only for objects that cannot affect a result.
    """
    tag = type_name(type_)

    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"Q")
        enc.write_str(tag)

    register_handler(type_, handler)


def register_handler(type_: type, handler: Handler) -> None:
    """Low-level: register a streaming handler ``handler(encoder, obj)`` for ``type_`` and its subclasses.

    Subclasses whose handler was already resolved (inherited or generic) are
    resolved again on their next use, so registration order never matters.
    """
    dispatch[type_] = handler
    resolved.discard(type_)
    forget_resolved(lambda t: type_ in getattr(t, "__mro__", ()))
    REGISTRY_GENERATION[0] += 1  # remembered scalar digests (``_scalar_digests``) no longer believed


# -- public API --------------------------------------------------------------------

def hash_value(obj: Any, path: str = "") -> str:
    """The hex digest of ``obj``; raises ``HashError`` naming ``path`` + the inner path."""
    enc = Encoder()
    try:
        enc.encode(obj)
    except HashError as e:
        e.at(path)  # the same error, its path completed
        raise
    except RecursionError:
        raise HashError("value is nested too deeply to hash", path, obj) from None
    return enc.hexdigest()


# -- digests of plain scalar arguments, remembered ------------------------------------
#
# Most calls pass a few small scalars (a seed, a learning rate, a name). Their
# encoding is a pure function of (type, value): the handlers of these exact types
# write bytes and never back-references, so equal arguments of equal types
# encode alike whatever their identity. A call whose every argument is one of
# them (exact type, not a subclass) is looked up by that (name, type, value)
# tuple instead of being encoded: 0.3 µs instead of 1.5 µs for one argument, 3.5
# µs for three. Floats enter by their bytes, so 0.0 and -0.0, and NaNs, stay
# apart as their encodings do. Any handler registered (``register_handler``)
# moves ``REGISTRY_GENERATION`` on, and an entry made under another generation
# is not believed: an override of ``int``'s encoding is seen by the next call.
_SCALARS = frozenset((int, str, bytes, bool, type(None)))
_SCALAR_MAX = 256  # characters or bytes: longer values are encoded (and not kept here)
_SCALAR_ENTRIES = 4096
_scalar_digests: dict[tuple[Any, ...], tuple[int, str, dict[str, str]]] = {}
#: moves on with every handler registered: a digest remembered under another generation (of
#: plain scalars: ``_scalar_digests``, ``calls/fasthits``) is not believed. One item read in
#: place, so that a repeat hit asks it with no call.
REGISTRY_GENERATION = [0]


def registry_generation() -> int:
    """``REGISTRY_GENERATION``'s value now."""
    return REGISTRY_GENERATION[0]


def _scalar_key(named: Sequence[tuple[str, Any]]) -> tuple[Any, ...] | None:
    parts = []
    for name, v in named:
        t = type(v)
        if t is float:
            parts.append((name, t, pack_d(v)))
        elif t in _SCALARS and (len(v) <= _SCALAR_MAX if t is str or t is bytes
                                else t is not int or -(1 << 63) <= v < (1 << 63)):
            parts.append((name, t, v))
        else:
            return None
    return tuple(parts)


def hash_arguments(named: Sequence[tuple[str, Any]], root: str = "args",
                   visit: list[Any] | None = None) -> tuple[str, dict[str, str]]:
    """Digest bound arguments: (combined digest, {name: per-argument digest}).

    One memo spans all arguments so ``f(a, a)`` and ``f(a, copy(a))`` differ;
    per-argument digests let ``explain`` say which argument changed.
    ``visit``: a list to which the objects the walk went through are appended, as
    ``(objects in visit order, [where each argument's objects end])`` (nothing for a call of
    plain scalars): where a miss looks for results of other evaluations (``memolab.inputs.upstream``).
    """
    k = _scalar_key(named)
    if k is None:
        return hash_arguments_uncached(named, root, visit)
    gen = REGISTRY_GENERATION[0]
    hit = _scalar_digests.get(k)
    if hit is not None and hit[0] == gen:
        return hit[1], dict(hit[2])
    digest, per = hash_arguments_uncached(named, root)
    if len(_scalar_digests) >= _SCALAR_ENTRIES:
        _scalar_digests.clear()
    _scalar_digests[k] = (gen, digest, dict(per))
    return digest, per


def hash_arguments_uncached(named: Sequence[tuple[str, Any]], root: str,
                            visit: list[Any] | None = None) -> tuple[str, dict[str, str]]:
    enc = Encoder()
    per: dict[str, str] = {}
    ends: list[int] | None = None
    if visit is not None:
        ends = []
        visit.append((enc.keep, ends))
    for name, value in named:
        if per:
            enc.restart()
        try:
            enc.encode(value)
        except HashError as e:
            e.at(f"{root}[{name!r}]")  # the same error, its path completed
            raise
        except RecursionError:
            raise HashError("value is nested too deeply to hash", f"{root}[{name!r}]", value) from None
        per[name] = enc.hexdigest()
        if ends is not None:
            ends.append(len(enc.keep))
    top = [KEY_SCHEMA_B]
    for name, d in per.items():
        top.append(pack_Q(len(name)) + name.encode() + d.encode())
    return hexdigest_of(b"".join(top)), per
