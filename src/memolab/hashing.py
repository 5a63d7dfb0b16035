"""Deterministic, type-tagged deep hashing of argument values.

Why not hash a pickle? Pickle bytes are not canonical (dict order, memo ids,
torch storage addresses, cloudpickle tracker ids), and pickling a large array
copies it. Instead we walk the value once and stream type-tagged tokens into
one hasher; large buffers are fed straight from memory, in fixed-size chunks
hashed on several threads (xxhash releases the GIL).

The canonical rules (pinned by tests, written down in docs/hashing.md):

* every token carries a type tag, so ``1``, ``1.0`` and ``True`` differ;
* floats are hashed by their IEEE bits: ``0.0 != -0.0`` and NaN payloads differ;
* plain ``dict`` order is ignored, ``OrderedDict`` order is not; sets are
  canonicalised by sorting their elements' digests;
* shared references and cycles are encoded by structure, so ``(a, a)`` differs
  from ``(a, copy(a))``;
* functions and classes are hashed by symbol and code digest (``codegraph``);
* plain objects by class code digest plus the state pickle would save
  (``__reduce_ex__``), so a class's own ``__getstate__``/``__reduce__`` is
  honoured, minus attributes a policy excludes (``register_policy``);
* large leaves (arrays, tensors) are hashed into a digest of their own, which
  the identity cache (``identity``) may reuse when that is provably safe;
* anything that cannot be hashed deterministically raises ``HashError`` naming
  its path; there is no silent fallback.

Dispatch is by exact ``type(obj)`` through a registry (never ``obj.__class__``,
which proxies override), with lazily registered handlers for third-party
modules so that ``import memolab`` imports neither numpy nor torch.
"""
from __future__ import annotations

import os
import struct
import sys
import threading
import types
from collections import OrderedDict
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

import xxhash

from . import codegraph, config, identity
from .errors import HashError

#: Bump SCHEMA when the encoding changes, so new keys can never collide with old
#: ones. h2: large buffers are hashed as a tree of CHUNK-byte chunks, large
#: leaves (arrays, tensors) enter their parent as their own digest.
SCHEMA = "h2"
ALGORITHM = "xxh3_128"
#: Chunk size of the buffer tree. Part of the encoding (a different size gives
#: different digests), hence part of KEY_SCHEMA; the thread count is not.
CHUNK = 4 << 20
#: Buffers at least this large are hashed as a tree (so they can use all cores).
TREE_MIN = 2 * CHUNK
KEY_SCHEMA = f"{SCHEMA}-{ALGORITHM}-c{CHUNK >> 20}m"
_KEY_SCHEMA_B = KEY_SCHEMA.encode()

_pack_q = struct.Struct("<q").pack
_pack_d = struct.Struct("<d").pack
_pack_Q = struct.Struct("<Q").pack

Handler = Callable[["Encoder", Any], None]

_dispatch: Dict[type, Handler] = {}
#: types whose ``_dispatch`` entry was resolved (inherited or generic), not registered
_resolved: set = set()
_lazy: Dict[str, Callable[[], None]] = {}


def _new_hasher():
    return xxhash.xxh3_128()


def _hexdigest_of(data: bytes) -> str:
    """``_new_hasher()`` fed ``data`` at once: its hex digest, in one call."""
    return xxhash.xxh3_128_hexdigest(data)


# -- buffers: chunk tree hashed on a thread pool -------------------------------------

_pool: Any = None
_pool_pid = 0
_pool_lock = threading.Lock()


def hash_threads() -> int:
    """Threads used for one large buffer.

    ``MEMOLAB_HASH_THREADS`` if set; otherwise the cores that are idle (at most
    8). Measured on 2 cores: two threads hash 1.5x faster than one on an idle
    machine, but 0.85x when the other core is busy, so we count the load
    average (which includes this process) instead of assuming the cores are
    ours. Only the speed depends on this, never the digest.
    """
    n = config.env_setting("MEMOLAB_HASH_THREADS")  # validated in one place (docs/settings.md)
    if n is not None:
        return n
    cores = os.cpu_count() or 1
    try:
        idle = cores - os.getloadavg()[0] + 1
    except (AttributeError, OSError):  # no load average on this platform
        idle = cores
    return max(1, min(8, cores, int(idle + 0.5)))


def _get_pool(n: int) -> Any:
    global _pool, _pool_pid
    # A forked child inherits the pool object but not its threads: make a new one.
    if _pool is None or _pool_pid != os.getpid() or _pool._max_workers < n:
        with _pool_lock:
            if _pool is None or _pool_pid != os.getpid() or _pool._max_workers < n:
                from concurrent.futures import ThreadPoolExecutor  # not at import: it costs `import memolab` time

                _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="memolab-hash")
                _pool_pid = os.getpid()
    return _pool


def _hash_chunks(mv: memoryview, starts: Sequence[int]) -> bytes:
    xxh = xxhash.xxh3_128
    return b"".join([xxh(mv[s:s + CHUNK]).digest() for s in starts])


def chunk_digests(mv: memoryview) -> bytes:
    """The concatenated digests of ``mv``'s CHUNK-byte chunks (``mv`` is 1-D bytes).

    The result depends only on the bytes, never on how many threads did the
    work: each thread takes a contiguous run of chunks and the runs are joined
    in order. The calling thread hashes the first run itself.
    """
    starts = range(0, mv.nbytes, CHUNK)
    workers = min(hash_threads(), len(starts))
    if workers <= 1:
        return _hash_chunks(mv, starts)
    per = -(-len(starts) // workers)
    runs = [starts[i:i + per] for i in range(0, len(starts), per)]
    pool = _get_pool(len(runs) - 1)
    futures = [pool.submit(_hash_chunks, mv, r) for r in runs[1:]]
    first = _hash_chunks(mv, runs[0])
    return first + b"".join([f.result() for f in futures])


class Encoder:
    """Streams type-tagged tokens of one or more values into a hasher.

    ``memo`` maps ``id(obj)`` of containers already seen to their visit index,
    so cycles terminate and shared references are encoded as back-references.
    ``keep`` holds every memoised object alive while we hash: a temporary
    (a ``__getstate__`` dict, say) freed mid-walk could otherwise hand its id to
    a new object and turn into a false back-reference.
    """

    __slots__ = ("h", "buf", "memo", "keep", "untrusted", "config_only")

    def __init__(self) -> None:
        self.h = _new_hasher()
        self.buf = bytearray()
        self.memo: Dict[int, int] = {}
        self.keep: List[Any] = []
        #: > 0 while encoding state whose leaves may change behind their
        #: mutation detectors (a Module's buffers): the identity cache is off there.
        self.untrusted = 0
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
        self.write(_pack_Q(len(b)) + b)

    def write_uint(self, n: int) -> None:
        """An unsigned 64-bit integer (a length, a count)."""
        self.write(_pack_Q(n))

    def write_ints(self, xs: Iterable[int]) -> None:
        """A sequence of signed 64-bit integers (a shape, strides), prefixed by its length."""
        xs = tuple(xs)
        self.write(_pack_Q(len(xs)) + b"".join([_pack_q(x) for x in xs]))

    def write_type(self, t: type) -> None:
        """A type by its qualified name (not its code: see ``encode_class``)."""
        self.write_str(_type_name(t))

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
            self.h.update(b"#" + _pack_Q(n))
            self.h.update(chunk_digests(mv))
        else:
            self.h.update(_pack_Q(n))
            self.h.update(mv)

    def write_leaf(self, obj: Any, leaf: "Leaf") -> None:
        """Write a large leaf (array, tensor) as the digest of its own encoding.

        The digest comes from the identity cache when ``leaf.stamp`` vouches that
        ``obj`` cannot have changed since it was recorded; otherwise it is computed
        and, if a stamp exists, recorded for next time.
        """
        stamp = None if self.untrusted or not identity.enabled else leaf.stamp(obj)
        d = identity.lookup(obj, stamp) if stamp is not None else None
        if d is None:
            d = leaf.digest(obj)
            if stamp is not None:
                identity.remember(obj, stamp, d)
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
        self.h = _new_hasher()

    # -- traversal ----------------------------------------------------------
    def seen(self, obj: Any) -> bool:
        """Has ``obj`` been encoded already in this value (``memoize`` would write a back-reference)?"""
        return id(obj) in self.memo

    def memoize(self, obj: Any) -> bool:
        """Record ``obj``; if it was seen before write a back-reference and return True."""
        i = id(obj)
        n = self.memo.get(i)
        if n is not None:
            self.write(b"R" + _pack_q(n))
            return True
        self.memo[i] = len(self.memo)
        self.keep.append(obj)
        return False

    def encode(self, obj: Any) -> None:
        t = type(obj)
        handler = _dispatch.get(t)
        if handler is None:
            handler = _resolve(t)
        handler(self, obj)

    def encode_child(self, obj: Any, segment: str) -> None:
        try:
            self.encode(obj)
        except HashError as e:
            raise e.at(segment)
        except RecursionError:
            raise HashError("value is nested too deeply to hash", segment, obj) from None

    def encode_class(self, t: type) -> None:
        """A class by symbol and code digest: editing its code changes the key."""
        _encode_class(self, t)

    def encode_object(self, obj: Any, exclude: Iterable[str] = ()) -> None:
        """The generic rule: class by code + what pickle would save, minus policy-excluded and ``exclude`` attributes."""
        _encode_object(self, obj, frozenset(exclude))

    def encode_extra_state(self, obj: Any) -> None:
        """The attributes (``__dict__``) an instance of a value type carries besides its value."""
        _encode_extra_state(self, obj)


# -- registry ----------------------------------------------------------------------
#
# Handlers are found by exact type; a type without one is *resolved* once (its
# nearest registered base class, or a generic handler) and the result cached in
# ``_dispatch``. ``_resolved`` remembers which entries were resolved rather than
# registered, so that a later registration that could change the answer drops
# them (``_forget_resolved``). Lazy registrations (numpy, torch, torch.optim)
# run before a type is resolved if any class in its MRO lives in their module:
# a user ``class Net(nn.Module)`` hashed first must get the module handler, not
# the generic one cached for good.

def register_hasher(type_: type, fn: Callable[[Any], Any]) -> None:
    """Hash instances of ``type_`` as ``fn(obj)`` (any hashable-by-memolab value).

    The type's qualified name is mixed in, so two types mapping to equal
    substitutes still hash differently.
    """
    tag = _type_name(type_)

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
    tag = _type_name(type_)

    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"Q")
        enc.write_str(tag)

    register_handler(type_, handler)


def register_handler(type_: type, handler: Handler) -> None:
    """Low-level: register a streaming handler ``handler(encoder, obj)`` for ``type_`` and its subclasses.

    Subclasses whose handler was already resolved (inherited or generic) are
    resolved again on their next use, so registration order never matters.
    """
    global _registry_generation
    _dispatch[type_] = handler
    _resolved.discard(type_)
    _forget_resolved(lambda t: type_ in getattr(t, "__mro__", ()))
    _registry_generation += 1  # remembered scalar digests (``_scalar_digests``) no longer believed


def register_lazy(module: str, register: Callable[[], None]) -> None:
    """Run ``register()`` before the first type whose MRO has a class from ``module`` is hashed.

    ``module`` is a top-level package (``"numpy"``) or a dotted prefix
    (``"torch.optim"``): a class counts if its ``__module__`` is ``module`` or
    lies below it. The hook sees that module imported already (a class from it
    exists), so registering never imports anything the user did not.
    """
    _lazy[module] = register
    _forget_resolved(lambda t: any(_module_matches(_module_of(b), module) for b in getattr(t, "__mro__", ())))


def _module_of(t: type) -> str:
    m = getattr(t, "__module__", None)
    return m if isinstance(m, str) else ""


def _module_matches(name: str, prefix: str) -> bool:
    return name == prefix or (name.startswith(prefix) and name[len(prefix)] == ".")


def _forget_resolved(affected: Callable[[type], bool]) -> None:
    # list() copies in one C call (no thread switch), so a concurrent resolve cannot break the loop
    for t in [t for t in list(_resolved) if affected(t)]:
        _resolved.discard(t)
        _dispatch.pop(t, None)


def _run_lazy(t: type) -> None:
    """Run every pending lazy registration that could apply to ``t`` (any class of its MRO).

    A registration may add further lazy hooks (torch adds ``torch.optim``), so
    this loops until none applies.
    """
    while _lazy:
        mods = {_module_of(b) for b in getattr(t, "__mro__", (t,))}
        hit = next((p for p in _lazy if any(_module_matches(m, p) for m in mods)), None)
        if hit is None:
            return
        _lazy.pop(hit)()


class Leaf:
    """How to hash one kind of large leaf (an array, a tensor).

    ``digest(obj)`` returns the digest of the leaf's own encoding (bytes).
    ``stamp(obj)`` returns a cheap value that changes whenever the content can
    have changed, or ``None`` when a change could go unnoticed (then the leaf is
    always rehashed). ``loaded(obj)`` is ``stamp`` for a leaf just loaded from
    the store, whose memory the store vouches for (read-only blob mappings).
    """

    __slots__ = ("digest", "stamp", "loaded")

    def __init__(self, digest: Callable[[Any], bytes], stamp: Callable[[Any], Any],
                 loaded: Optional[Callable[[Any], Any]] = None) -> None:
        self.digest = digest
        self.stamp = stamp
        self.loaded = loaded or stamp


_leaves: Dict[type, Leaf] = {}


def register_leaf(type_: type, leaf: Leaf) -> None:
    """Declare ``type_`` a large leaf (see ``Leaf``); its handler calls ``Encoder.write_leaf``."""
    _leaves[type_] = leaf


# -- attribute policies ---------------------------------------------------------------

_policies: Dict[type, FrozenSet[str]] = {}
_policy_cache: Dict[type, FrozenSet[str]] = {}


def register_policy(type_: type, *, exclude: Iterable[str] = ()) -> None:
    """Leave the named attributes of ``type_`` instances (and subclasses') out of keys.

    For state that is not content: a sampler's generator handle, a live
    iterator, a cache filled lazily. Policies of all base classes add up.
    """
    _policies[type_] = frozenset(exclude) | _policies.get(type_, frozenset())
    _policy_cache.clear()


def excluded_attributes(t: type) -> FrozenSet[str]:
    got = _policy_cache.get(t)
    if got is None:
        got = frozenset()
        for base in getattr(t, "__mro__", (t,)):
            got = got | _policies.get(base, frozenset())
        _policy_cache[t] = got
    return got


def _type_name(t: type) -> str:
    # ``__mp_main__`` (a spawned child's copy of the script) keys as ``__main__``
    return f"{codegraph.key_module(t.__module__)}:{t.__qualname__}"


def _resolve(t: type) -> Handler:
    if _lazy:
        _run_lazy(t)
        h = _dispatch.get(t)
        if h is not None:
            return h
    # Inherit the handler of the nearest registered base class, except for the
    # built-in containers: a subclass of dict may carry attributes of its own.
    h = None
    for base in getattr(t, "__mro__", (t,))[1:]:
        bh = _dispatch.get(base)
        if bh is not None and base not in _STRUCTURAL and base not in _resolved:
            h = _subclass_of(bh) if base in _TYPE_BLIND else bh
            break
    if h is None:
        if hasattr(t, "__memo_hash__"):
            h = _encode_protocol
        elif isinstance(t, type) and issubclass(t, type):
            h = _encode_class
        else:
            h = _encode_object
    _dispatch[t] = h
    _resolved.add(t)
    return h


#: built-in value types whose handler writes the content but not the exact type:
#: a subclass (``class Config(OrderedDict)`` overriding ``__getitem__``) would
#: otherwise share keys with its base
_TYPE_BLIND: set = set()


def _subclass_of(base_handler: Handler) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"\x1a")  # a subclass of a value type: its class (by code) comes first
        _encode_class(enc, type(obj))
        base_handler(enc, obj)

    return handler


# -- atoms -------------------------------------------------------------------------

# Atoms append to ``enc.buf`` directly (a method call per token is most of the
# cost of a small config); containers flush it (``Encoder.write``) as they go.

def _encode_none(enc: Encoder, obj: Any) -> None:
    enc.buf += b"N"


def _encode_bool(enc: Encoder, obj: bool) -> None:
    enc.buf += b"T" if obj else b"F"


def _encode_int(enc: Encoder, obj: int) -> None:
    if -(1 << 63) <= obj < (1 << 63):
        enc.buf += b"i" + _pack_q(obj)
    else:
        b = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
        enc.write(b"I" + _pack_Q(len(b)) + b)


def _encode_float(enc: Encoder, obj: float) -> None:
    enc.buf += b"f" + _pack_d(obj)


def _encode_complex(enc: Encoder, obj: complex) -> None:
    enc.write(b"c" + _pack_d(obj.real) + _pack_d(obj.imag))


#: str -> its encoding (``_encode_str`` / ``write_str`` bytes) for the strings a
#: config walk repeats on every call: attribute names, class symbols, code
#: digests. Keyed by value (strings are immutable, so an entry never goes stale);
#: bounded, short strings only.
_NAME_TOKENS: Dict[str, bytes] = {}
_STR_TOKENS: Dict[str, bytes] = {}
_TOKEN_CACHE_MAX = 4096


def _name_token(k: str) -> bytes:
    b = _NAME_TOKENS.get(k)
    if b is None:
        b = k.encode("utf-8", "surrogatepass")
        b = b"s" + _pack_Q(len(b)) + b
        if len(k) <= 256:
            if len(_NAME_TOKENS) >= _TOKEN_CACHE_MAX:
                _NAME_TOKENS.clear()
            _NAME_TOKENS[k] = b
    return b


def _str_token(k: str) -> bytes:
    b = _STR_TOKENS.get(k)
    if b is None:
        b = k.encode("utf-8", "surrogatepass")
        b = _pack_Q(len(b)) + b
        if len(k) <= 256:
            if len(_STR_TOKENS) >= _TOKEN_CACHE_MAX:
                _STR_TOKENS.clear()
            _STR_TOKENS[k] = b
    return b


def _encode_str(enc: Encoder, obj: str) -> None:
    b = obj.encode("utf-8", "surrogatepass")
    if len(b) > 1 << 16:
        enc.write(b"s" + _pack_Q(len(b)))
        enc.write(b)
    else:
        enc.buf += b"s" + _pack_Q(len(b)) + b


def _encode_bytes(enc: Encoder, obj: bytes) -> None:
    enc.write(b"b")
    if len(obj) > 1 << 16:
        enc.write_buffer(memoryview(obj))
    else:
        enc.write(_pack_Q(len(obj)) + obj)


def _encode_bytearray(enc: Encoder, obj: bytearray) -> None:
    enc.write(b"y")
    enc.write_buffer(memoryview(obj))


def _encode_memoryview(enc: Encoder, obj: memoryview) -> None:
    enc.write(b"m")
    enc.write_str(obj.format)
    enc.write(_pack_Q(obj.ndim) + b"".join(_pack_q(s) for s in obj.shape or ()))
    if obj.c_contiguous:
        enc.write_buffer(obj.cast("B") if obj.ndim else obj)
    else:
        enc.write_buffer(memoryview(obj.tobytes()))


# -- containers --------------------------------------------------------------------

def _child_error(e: BaseException, segment: str, obj: Any) -> HashError:
    """Turn a failure below a container into a HashError whose path names the child.

    Containers build the segment only on failure: formatting ``[i]`` for every
    element would cost more than hashing it.
    """
    if isinstance(e, HashError):
        return e.at(segment)
    return HashError("value is nested too deeply to hash", segment, obj)


def _encode_seq(tag: bytes, int_tag: bytes, float_tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Sequence) -> None:
        if enc.memoize(obj):
            return
        n = len(obj)
        if n >= 16:
            # A run of plain ints or floats is packed in one call (20x faster
            # than element by element). Its own tag keeps the grammar
            # unambiguous; which form is used depends only on the value.
            types = set(map(type, obj))
            if len(types) == 1:
                t = types.pop()
                packed = None
                if t is int:
                    try:
                        packed = struct.pack(f"<{n}q", *obj)
                    except struct.error:  # an int beyond 64 bits: element by element
                        pass
                    ptag = int_tag
                elif t is float:
                    packed = struct.pack(f"<{n}d", *obj)  # IEEE bits, like single floats
                    ptag = float_tag
                if packed is not None:
                    enc.write(ptag + _pack_Q(n))
                    enc.flush()
                    enc.h.update(packed)
                    return
        enc.write(tag + _pack_Q(n))
        i = 0
        get = _dispatch.get
        buf = enc.buf
        try:
            for i, x in enumerate(obj):
                h = get(type(x))
                if h is None:
                    h = _resolve(type(x))
                h(enc, x)
                if len(buf) > 1 << 16:
                    enc.flush()
        except (HashError, RecursionError) as e:
            raise _child_error(e, f"[{i}]", obj) from None

    return handler


def _sort_key_digest(x: Any) -> str:
    return hash_value(x)


def _encode_dict(enc: Encoder, obj: dict) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"d" + _pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=False)


def _encode_ordered_dict(enc: Encoder, obj: OrderedDict) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"o" + _pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=True)
    _encode_extra_state(enc, obj)


def _first(kv: Tuple[Any, Any]) -> Any:
    return kv[0]


def _encode_items(enc: Encoder, items: Iterable[Tuple[Any, Any]], ordered: bool) -> None:
    items = list(items)
    if not ordered:
        if all([type(kv[0]) is str for kv in items]):
            items.sort(key=_first)
        else:
            # Mixed or non-string keys: order by the key's own digest, which is
            # canonical whatever the keys' types and insertion order.
            items = [kv for _, kv in sorted(((_sort_key_digest(k), (k, v)) for k, v in items), key=lambda p: p[0])]
    encode = enc.encode
    for k, v in items:
        tk = type(k)
        if tk is str:
            _encode_str(enc, k)
        else:
            try:
                encode(k)
            except (HashError, RecursionError) as e:
                raise _child_error(e, "[<key>].<key>", k) from None
        try:
            encode(v)
        except (HashError, RecursionError) as e:
            raise _child_error(e, f"[{k!r}]" if tk in (str, int) else "[<key>]", v) from None


def _encode_set(tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        if enc.memoize(obj):
            return
        enc.write(tag + _pack_Q(len(obj)))
        try:
            digests = sorted(hash_value(x) for x in obj)
        except HashError as e:
            raise e.at("{<element>}")
        for d in digests:
            enc.write(d.encode("ascii"))

    return handler


def _encode_extra_state(enc: Encoder, obj: Any) -> None:
    """Attributes that a subclass instance carries besides its container data."""
    d = getattr(obj, "__dict__", None)
    if d:
        enc.write(b"+")
        enc.encode_child(d, "")
    else:
        enc.write(b"-")  # explicit, so an optional part can never be confused with what follows


# -- code and modules -------------------------------------------------------------

def _encode_function(enc: Encoder, obj: Any) -> None:
    enc.write(b"P")
    enc.write_str(codegraph.symbol_of(obj))
    enc.write_str(codegraph.object_digest(obj))
    # A closure's captured values and a function's defaults are part of what it does.
    cells = getattr(obj, "__closure__", None)
    if cells:
        enc.write(b"(")
        for name, cell in zip(obj.__code__.co_freevars, cells):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (variable not yet bound)
                enc.write(b"-")
                continue
            if value is obj:
                enc.write(b"@")
                continue
            if type(value) is types.FunctionType and value.__closure__ and not codegraph.is_user_code(value):
                # library code captured by a closure (singledispatch's ``dispatch``) counts by
                # its digest; its own captured state is library bookkeeping (weak caches)
                enc.write(b"p")
                enc.write_str(codegraph.symbol_of(value))
                enc.write_str(codegraph.object_digest(value))
                continue
            enc.encode_child(value, f".<closure {name}>")
        enc.write(b")")
    if getattr(obj, "__defaults__", None):
        enc.encode_child(obj.__defaults__, ".__defaults__")
    if getattr(obj, "__kwdefaults__", None):
        enc.encode_child(obj.__kwdefaults__, ".__kwdefaults__")


def _encode_builtin_function(enc: Encoder, obj: Any) -> None:
    enc.write(b"B")
    self_ = getattr(obj, "__self__", None)
    if self_ is not None and not isinstance(self_, type(sys)):
        # a bound method of a builtin object, e.g. ``[].append``
        enc.write_str(getattr(obj, "__qualname__", obj.__name__))
        enc.encode_child(self_, ".__self__")
        return
    enc.write_str(f"{getattr(obj, '__module__', None)}:{getattr(obj, '__qualname__', obj.__name__)}")


def _encode_method(enc: Encoder, obj: Any) -> None:
    enc.write(b"W")
    enc.encode_child(obj.__func__, ".__func__")
    enc.encode_child(obj.__self__, ".__self__")


def _encode_class(enc: Encoder, obj: type) -> None:
    # same bytes as write(b"C"), write_str(symbol), write_str(digest); both are
    # recomputed on every call (a class's code can change), only their encodings are cached
    enc.write(b"C" + _str_token(codegraph.symbol_of(obj)) + _str_token(codegraph.object_digest(obj)))


def _encode_module(enc: Encoder, obj: Any) -> None:
    enc.write(b"M")
    enc.write_str(obj.__name__)
    # A module held as a value (``MODS = {"ops": ops}``, an argument, a submodule
    # bound after the graph was built) runs the code it binds: a name alone would
    # keep the key when that code is edited.
    enc.write_str(codegraph.object_digest(obj))


def _encode_protocol(enc: Encoder, obj: Any) -> None:
    enc.write(b"X")
    enc.write_str(_type_name(type(obj)))
    enc.encode_child(obj.__memo_hash__(), ".__memo_hash__()")


def _refuse(reason: str) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        raise HashError(reason, "", obj)

    return handler


# -- generic objects ---------------------------------------------------------------

def _encode_object(enc: Encoder, obj: Any, exclude: FrozenSet[str] = frozenset()) -> None:
    """Class identity (symbol + code digest) plus what pickle would save."""
    if enc.memoize(obj):
        return
    t = type(obj)
    try:
        rv = obj.__reduce_ex__(4)
    except Exception as e:  # the object says it cannot be pickled
        raise HashError(f"cannot hash {t.__qualname__} object ({e})", "", obj) from None
    if isinstance(rv, str):  # a global singleton, pickled by name
        enc.write(b"G")
        enc.write_str(f"{codegraph.key_module(t.__module__)}:{rv}")
        return
    # b"O" + the class token (``_encode_class``) in one write
    enc.write(b"OC" + _str_token(codegraph.symbol_of(t)) + _str_token(codegraph.object_digest(t)))
    func, args = rv[0], rv[1]
    state = rv[2] if len(rv) > 2 else None
    listitems = rv[3] if len(rv) > 3 else None
    dictitems = rv[4] if len(rv) > 4 else None
    # copyreg.__newobj__(cls) is the common case: the class is already hashed.
    if getattr(func, "__name__", "") in ("__newobj__", "__newobj_ex__") and args and args[0] is t:
        enc.buf += b"n"  # an atom: the next write flushes
        if len(args) > 1:
            enc.encode_child(args[1:], ".<new args>")
    else:
        enc.encode_child(func, ".<reduce>")
        enc.encode_child(args, ".<reduce args>")
    if state is not None:
        excluded = excluded_attributes(t) if _policies else exclude
        if exclude and excluded is not exclude:
            excluded = excluded | exclude
        _encode_state(enc, state, excluded)
    if listitems is not None:
        enc.write(b"L")
        enc.encode_child(list(listitems), "")
    if dictitems is not None:
        enc.write(b"D")
        ordered = isinstance(obj, OrderedDict)
        items = list(dictitems)
        tmp = OrderedDict(items) if ordered else dict(items)
        enc.encode_child(tmp, "")


def _encode_state(enc: Encoder, state: Any, excluded: FrozenSet[str] = frozenset()) -> None:
    enc.buf += b"S"  # an atom: the next write flushes
    if type(state) is dict:
        # attributes: path segments read as ``.name``
        if enc.memoize(state):
            return
        names = sorted([k for k in state if k not in excluded], key=str) if excluded else sorted(state, key=str)
        enc.write(b"d" + _pack_Q(len(names)))
        encode = enc.encode
        for k in names:
            if type(k) is str:  # attribute names: the bytes _encode_str writes, cached by value
                enc.buf += _NAME_TOKENS.get(k) or _name_token(k)
            else:
                encode(k)
            try:
                encode(state[k])
            except (HashError, RecursionError) as e:
                raise _child_error(e, f".{k}", state[k]) from None
    elif type(state) is tuple and len(state) == 2 and (state[0] is None or type(state[0]) is dict) and type(state[1]) is dict:
        # (__dict__, __slots__ values)
        enc.write(b"2")
        _encode_state(enc, state[0] or {}, excluded)
        _encode_state(enc, state[1], excluded)
    else:
        enc.encode_child(state, ".<state>")


# -- public API --------------------------------------------------------------------

def hash_value(obj: Any, path: str = "") -> str:
    """The hex digest of ``obj``; raises ``HashError`` naming ``path`` + the inner path."""
    enc = Encoder()
    try:
        enc.encode(obj)
    except HashError as e:
        raise e.at(path)
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
# moves ``_registry_generation`` on, and an entry made under another generation
# is not believed: an override of ``int``'s encoding is seen by the next call.
_SCALARS = frozenset((int, str, bytes, bool, type(None)))
_SCALAR_MAX = 256  # characters or bytes: longer values are encoded (and not kept here)
_SCALAR_ENTRIES = 4096
_scalar_digests: Dict[tuple, Tuple[int, str, Dict[str, str]]] = {}
_registry_generation = 0


def _scalar_key(named: Sequence[Tuple[str, Any]]) -> Optional[tuple]:
    parts = []
    for name, v in named:
        t = type(v)
        if t is float:
            parts.append((name, t, _pack_d(v)))
        elif t in _SCALARS and (len(v) <= _SCALAR_MAX if t is str or t is bytes
                                else t is not int or -(1 << 63) <= v < (1 << 63)):
            parts.append((name, t, v))
        else:
            return None
    return tuple(parts)


def hash_arguments(named: Sequence[Tuple[str, Any]], root: str = "args") -> Tuple[str, Dict[str, str]]:
    """Digest bound arguments: (combined digest, {name: per-argument digest}).

    One memo spans all arguments so ``f(a, a)`` and ``f(a, copy(a))`` differ;
    per-argument digests let ``explain`` say which argument changed.
    """
    k = _scalar_key(named)
    if k is None:
        return _hash_arguments(named, root)
    gen = _registry_generation
    hit = _scalar_digests.get(k)
    if hit is not None and hit[0] == gen:
        return hit[1], dict(hit[2])
    digest, per = _hash_arguments(named, root)
    if len(_scalar_digests) >= _SCALAR_ENTRIES:
        _scalar_digests.clear()
    _scalar_digests[k] = (gen, digest, dict(per))
    return digest, per


def _hash_arguments(named: Sequence[Tuple[str, Any]], root: str) -> Tuple[str, Dict[str, str]]:
    enc = Encoder()
    per: Dict[str, str] = {}
    for name, value in named:
        if per:
            enc.restart()
        try:
            enc.encode(value)
        except HashError as e:
            raise e.at(f"{root}[{name!r}]")
        except RecursionError:
            raise HashError("value is nested too deeply to hash", f"{root}[{name!r}]", value) from None
        per[name] = enc.hexdigest()
    top = [_KEY_SCHEMA_B]
    for name, d in per.items():
        top.append(_pack_Q(len(name)) + name.encode() + d.encode())
    return _hexdigest_of(b"".join(top)), per


# -- results loaded from the store -------------------------------------------------------
#
# A memoized result passed on to another memoized function should cost O(1) to
# hash. At save time ``result_token`` records the digests of the result's large
# leaves; when the result is loaded, ``remember_loaded`` enters the fresh
# objects into the identity cache under those digests — but only through the
# leaf's ``loaded`` stamp, i.e. only where a later change would be detected.

_MAX_TOKENS = 4096
_result_tokens: "OrderedDict[Any, Tuple[List[str], Any]]" = OrderedDict()
_tokens_lock = threading.Lock()


#: handlers whose objects a result walk enters (attribute by attribute): plain
#: objects and, registered by torch support, datasets, samplers and loaders
_walk_handlers: set = set()


def register_result_walk(handler: Handler) -> None:
    """Let result walks (``result_token``/``remember_loaded``) enter objects hashed by ``handler``.

    Only for handlers that hash an object as its attributes (``Encoder.encode_object``);
    never for state no stamp can vouch for (modules, optimizers).
    """
    _walk_handlers.add(handler)


def _plain_pickled(t: type) -> bool:
    """Does unpickling restore exactly the instance ``__dict__`` that was saved?

    Only then do the leaves of a loaded object stand where the saved object's
    did, so the stored digests can be handed to them in walk order. A class of
    its own ``__reduce__``/``__getstate__``/``__setstate__`` may rebuild its
    attributes differently (scale them, drop them): not entered, nor is a type
    memolab's own pickler has a reducer for.
    """
    pickling = sys.modules.get("memolab.pickling")
    if pickling is not None and pickling._reducers.get(t) is not None:
        return False  # memolab's own pickler rebuilds it its way (a registered reducer)
    got = _plain_cache.get(t)
    if got is None:
        got = (getattr(t, "__reduce_ex__", None) is object.__reduce_ex__
               and getattr(t, "__reduce__", None) is object.__reduce__
               and getattr(t, "__getstate__", object.__getstate__) is object.__getstate__
               and not hasattr(t, "__setstate__")
               and "__slots__" not in vars(t))
        _plain_cache[t] = got
    return got


_plain_cache: Dict[type, bool] = {}


def _walk_leaves(value: Any, out: List[Tuple[Any, Leaf]], depth: int = 0, seen: Optional[set] = None) -> None:
    """The large leaves of a result, in a deterministic order: inside lists, tuples,
    dicts and objects with plain pickling whose handler allows it (``register_result_walk``)."""
    t = type(value)
    h = _dispatch.get(t)
    if h is None:
        h = _resolve(t)  # runs lazy registrations (numpy, torch) for this type
    lf = _leaves.get(t)
    if lf is not None:
        out.append((value, lf))
    elif depth < 8 and len(out) < 10000:
        if t is list or t is tuple:
            for x in value:
                _walk_leaves(x, out, depth + 1, seen)
        elif t is dict:
            for x in value.values():
                _walk_leaves(x, out, depth + 1, seen)
        elif h in _walk_handlers and _plain_pickled(t):
            d = getattr(value, "__dict__", None)
            if type(d) is not dict:
                return
            if seen is None:
                seen = set()
            if id(value) in seen:  # shared (a loader's dataset and its sampler's data_source)
                return
            seen.add(id(value))
            excluded = excluded_attributes(t)
            for k in sorted(d, key=str):
                if k not in excluded:
                    _walk_leaves(d[k], out, depth + 1, seen)


def _leaf_digest(x: Any, lf: Leaf) -> bytes:
    """``x``'s digest through the identity cache, recording it where a stamp vouches for ``x``."""
    stamp = lf.stamp(x) if identity.enabled else None
    d = identity.lookup(x, stamp) if stamp is not None else None
    if d is None:
        d = lf.digest(x)
        if stamp is not None:
            identity.remember(x, stamp, d)
    return d


def result_token(value: Any) -> Optional[List[str]]:
    """Digests of ``value``'s large leaves (arrays, tensors; see ``_walk_leaves``), or None.

    The computed value's leaves are entered into the identity cache on the way
    (where their stamp allows): passing a fresh result on to another memoized
    function costs O(1) in the process that computed it too.
    """
    try:
        leaves: List[Tuple[Any, Leaf]] = []
        _walk_leaves(value, leaves)
        return [_leaf_digest(x, lf).hex() for x, lf in leaves] or None
    except Exception:  # a result we cannot hash is still a result
        return None


def note_result(key: Any, token: Optional[List[str]], origin: Any = None) -> None:
    if not token:
        return
    with _tokens_lock:
        _result_tokens[key] = (token, origin)
        _result_tokens.move_to_end(key)
        while len(_result_tokens) > _MAX_TOKENS:
            _result_tokens.popitem(last=False)


def remember_loaded(value: Any, key: Any = None, token: Optional[List[str]] = None, origin: Any = None) -> None:
    """Record a value just loaded from the store under the digests it was stored with."""
    if token is None:
        got = _result_tokens.get(key)
        if got is None:
            return
        token, origin = got
    elif key is not None:
        note_result(key, token, origin)
    if not identity.enabled:
        return
    leaves: List[Tuple[Any, Leaf]] = []
    _walk_leaves(value, leaves)
    if len(leaves) != len(token):
        return  # not the shape we saved: trust nothing
    for (x, lf), d in zip(leaves, token):
        identity.remember(x, lf.loaded(x), bytes.fromhex(d), origin)


def _register_builtins() -> None:
    import datetime
    import decimal
    import enum
    import fractions
    import pathlib
    import types
    import uuid

    reg = _dispatch
    reg[type(None)] = _encode_none
    reg[bool] = _encode_bool
    reg[int] = _encode_int
    reg[float] = _encode_float
    reg[complex] = _encode_complex
    reg[str] = _encode_str
    reg[bytes] = _encode_bytes
    reg[bytearray] = _encode_bytearray
    reg[memoryview] = _encode_memoryview
    # Lead bytes below 0x20 are the multi-byte and packed forms; every token's
    # first byte decides how the rest is read, so no two encodings can collide.
    reg[list] = _encode_seq(b"l", b"\x14", b"\x16")
    reg[tuple] = _encode_seq(b"t", b"\x15", b"\x17")
    reg[dict] = _encode_dict
    reg[OrderedDict] = _encode_ordered_dict
    reg[set] = _encode_set(b"{")
    reg[frozenset] = _encode_set(b"}")
    reg[types.FunctionType] = _encode_function
    reg[types.BuiltinFunctionType] = _encode_builtin_function
    reg[types.MethodType] = _encode_method
    reg[types.ModuleType] = _encode_module
    reg[type] = _encode_class
    reg[type(Ellipsis)] = lambda enc, obj: enc.write(b".")
    reg[type(NotImplemented)] = lambda enc, obj: enc.write(b"!")
    reg[range] = lambda enc, obj: enc.write(b"r" + _pack_q(obj.start) + _pack_q(obj.stop) + _pack_q(obj.step))
    reg[slice] = lambda enc, obj: (enc.write(b":"), enc.encode_child((obj.start, obj.stop, obj.step), ""))
    for t in (pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath, pathlib.PureWindowsPath):
        reg[t] = (lambda tag: lambda enc, obj: (enc.write(b"p"), enc.write_str(tag), enc.write_str(str(obj))))(t.__name__)
    reg[decimal.Decimal] = lambda enc, obj: (enc.write(b"$"), enc.write_str(str(obj)))
    reg[fractions.Fraction] = lambda enc, obj: (enc.write(b"/"), _encode_int(enc, obj.numerator), _encode_int(enc, obj.denominator))
    reg[uuid.UUID] = lambda enc, obj: enc.write(b"u" + obj.bytes)
    for t in (datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone):
        reg[t] = (lambda tag: lambda enc, obj: (enc.write(b"z"), enc.write_str(tag), enc.write_str(repr(obj))))(t.__name__)

    live = "cannot hash a live {} (its position is hidden state); pass what creates it instead"
    reg[types.GeneratorType] = _refuse(live.format("generator"))
    reg[types.CoroutineType] = _refuse(live.format("coroutine"))
    reg[types.AsyncGeneratorType] = _refuse(live.format("async generator"))
    reg[types.FrameType] = _refuse("cannot hash a stack frame")
    reg[types.TracebackType] = _refuse("cannot hash a traceback")

    import io
    import threading

    for t in (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO):
        reg[t] = _refuse("cannot hash an open file; pass its path (or memolab.File(path)) instead")
    reg[type(threading.Lock())] = _refuse("cannot hash a lock")
    reg[type(threading.RLock())] = _refuse("cannot hash a lock")

    # Enum members are singletons: class identity plus member name.
    def enc_enum(enc: Encoder, obj: Any) -> None:
        enc.write(b"E")
        _encode_class(enc, type(obj))
        if obj.name is None:
            # a Flag with no named bits set (P(0)) or bits no member names (IntFlag(8)):
            # its value is what it is
            enc.write(b"\x00")
            enc.encode_child(obj._value_, "._value_")
        else:
            enc.write_str(obj.name)

    reg[enum.Enum] = enc_enum
    reg[enum.IntEnum] = enc_enum
    reg[enum.Flag] = enc_enum
    reg[enum.IntFlag] = enc_enum

    import functools

    def enc_partial(enc: Encoder, obj: Any) -> None:
        enc.write(b"~")
        enc.encode_child(obj.func, ".func")
        enc.encode_child(obj.args, ".args")
        enc.encode_child(obj.keywords, ".keywords")

    reg[functools.partial] = enc_partial
    _TYPE_BLIND.update((OrderedDict, functools.partial, decimal.Decimal, fractions.Fraction, uuid.UUID,
                        pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath,
                        datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone))


def _register_numpy() -> None:
    import mmap

    import numpy as np

    def dtype_str(d: Any) -> str:
        return d.str if d.fields is None else repr(d.descr)

    def array_digest(arr: Any) -> bytes:
        sub = Encoder()
        sub.write_str(dtype_str(arr.dtype))
        sub.write(_pack_Q(arr.ndim) + b"".join(_pack_q(s) for s in arr.shape))
        a = np.ascontiguousarray(arr)  # C order: views and transposes hash by value
        sub.write_buffer(memoryview(a.reshape(-1)).cast("B"))
        return sub.digest()

    def exporter(arr: Any) -> Any:
        """The object that owns ``arr``'s memory, or None if an ndarray owns it."""
        base = arr.base
        while isinstance(base, np.ndarray):
            base = base.base
        return base

    def immutable_memory(base: Any) -> bool:
        if type(base) is bytes:
            return True
        if type(base) is memoryview:
            return base.readonly and (type(base.obj) is bytes or identity.is_trusted_exporter(base.obj))
        return base is not None and identity.is_trusted_exporter(base)

    def array_stamp(arr: Any) -> Any:
        # A read-only flag alone proves nothing: an array that owns its memory
        # can be made writeable again, and a read-only view may share memory
        # with a writeable array. Only memory nobody can write qualifies.
        if arr.flags.writeable or arr.dtype.hasobject:
            return None
        if not immutable_memory(exporter(arr)):
            return None
        # in-place ``arr.shape = ...`` / ``arr.dtype = ...`` change the stamp
        return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype)

    def array_loaded(arr: Any) -> Any:
        base = exporter(arr)
        if type(base) is memoryview and base.readonly and type(base.obj) is mmap.mmap:
            identity.trust_exporter(base.obj)  # a read-only mapping of a store blob
        return array_stamp(arr)

    leaf = Leaf(array_digest, array_stamp, array_loaded)

    def enc_array(enc: Encoder, arr: Any) -> None:
        if enc.memoize(arr):
            return
        # A memmap is the array it maps (a stored one loads as a plain array over
        # its blob, and must key the same there); other subclasses (matrix, masked,
        # a user's) behave differently from a plain array, so their type counts.
        plain = type(arr) is np.ndarray or type(arr) is np.memmap
        if not plain:
            enc.write(b"\x18")
            enc.write_str(_type_name(type(arr)))
        if arr.dtype.hasobject:
            enc.write(b"\x19")
            enc.write_str(dtype_str(arr.dtype))
            enc.write(_pack_Q(arr.ndim) + b"".join(_pack_q(s) for s in arr.shape))
            enc.encode_child(arr.tolist(), "")
        else:
            enc.write(b"a")
            enc.write_leaf(arr, leaf)
        if not plain:
            subclass_state(enc, arr)

    def subclass_state(enc: Encoder, arr: Any) -> None:
        """What a subclass holds besides its data: a masked array's mask, a user subclass's attributes."""
        ma = sys.modules.get("numpy.ma")
        if ma is not None and isinstance(arr, ma.MaskedArray):
            # masked values are still in the data; which ones are masked is what counts
            enc.write(b"k")
            enc.encode_child(ma.getmaskarray(arr), ".mask")
            enc.encode_child(arr.fill_value, ".fill_value")
            enc.write(b"T" if arr.hardmask else b"F")
        elif type(arr).__module__.split(".", 1)[0] != "numpy":
            # a user or third-party subclass (units, tags) may carry state and override behaviour
            _encode_class(enc, type(arr))
            _encode_extra_state(enc, arr)

    def enc_scalar(enc: Encoder, x: Any) -> None:
        enc.write(b"g")
        enc.write_str(x.dtype.str)
        if x.dtype.hasobject:
            enc.encode_child(x.item(), "")
        else:
            enc.write(x.tobytes())

    def enc_dtype(enc: Encoder, d: Any) -> None:
        enc.write(b"e")
        enc.write_str(dtype_str(d))

    _dispatch[np.ndarray] = enc_array
    _leaves[np.ndarray] = leaf
    for t in set(np.sctypeDict.values()):
        _dispatch[t] = enc_scalar
    _dispatch[np.dtype] = enc_dtype
    for t in set(type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDGSUVOMm"):
        _dispatch[t] = enc_dtype


def _register_torch() -> None:
    from .torch import registry

    registry.register()


register_result_walk(_encode_object)
# code values hash their arguments' defaults and bound globals with this module;
# handing it over here (rather than codegraph importing us) keeps the import graph acyclic
codegraph.set_value_hasher(hash_value)

_STRUCTURAL = frozenset((list, tuple, dict, set, frozenset, bytes, str, int, float))
_register_builtins()
register_lazy("numpy", _register_numpy)
register_lazy("torch", _register_torch)


def _register_torchdata() -> None:
    # torchdata.nodes loaders and nodes (memolab/torch/iteration.py)
    from .torch import iteration

    iteration.register_hashing()


register_lazy("torchdata", _register_torchdata)


def _register_arrow() -> None:
    # pyarrow tables, batches and arrays by content (memolab/arrow.py)
    from . import arrow

    arrow.register_arrow(register_handler)


def _register_datasets() -> None:
    # Hugging Face datasets: their tables by content, whether in memory or memory-mapped
    from . import arrow

    arrow.register_datasets(register_handler, register_policy)


register_lazy("pyarrow", _register_arrow)
register_lazy("datasets", _register_datasets)
