"""The byte-level building blocks of the encoding: schema constants, packers, the
hasher, the chunk tree for large buffers (hashed on a thread pool) and the caches
of string tokens. Everything else in ``hashing`` writes through these."""
from __future__ import annotations

import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

import xxhash

from ..settings import config

#: Bump SCHEMA when the encoding changes, so new keys can never collide with old
#: ones. h2: large buffers are hashed as a tree of CHUNK-byte chunks, large
#: leaves (arrays, tensors) enter their parent as their own digest. h3 (memolab
#: 0.2): a key may carry pseudo-arguments (the state of a global random generator
#: the body drew from, torch switches not at their default, ``@memo(env=...)``),
#: and a row records the generator states it was made from: an h2 row may have
#: drawn from a generator without saying so, so none is used again. h4: what a
#: callable argument runs, not its name: a memoized function by its code digest,
#: an ``lru_cache`` function by the one it wraps, a user singleton pickled by name
#: by its state, a module's hooks (issue 47).
SCHEMA = "h4"
ALGORITHM = "xxh3_128"
#: Chunk size of the buffer tree. Part of the encoding (a different size gives
#: different digests), hence part of KEY_SCHEMA; the thread count is not.
CHUNK = 4 << 20
#: Buffers at least this large are hashed as a tree (so they can use all cores).
TREE_MIN = 2 * CHUNK
KEY_SCHEMA = f"{SCHEMA}-{ALGORITHM}-c{CHUNK >> 20}m"
KEY_SCHEMA_B = KEY_SCHEMA.encode()

pack_q = struct.Struct("<q").pack
pack_d = struct.Struct("<d").pack
pack_Q = struct.Struct("<Q").pack


def new_hasher() -> xxhash.xxh3_128:
    return xxhash.xxh3_128()


def hexdigest_of(data: bytes) -> str:
    """``new_hasher()`` fed ``data`` at once: its hex digest, in one call."""
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
        return int(n)  # (an int already: validated)
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


#: str -> its encoding (``encode_str`` / ``write_str`` bytes) for the strings a
#: config walk repeats on every call: attribute names, class symbols, code
#: digests. Keyed by value (strings are immutable, so an entry never goes stale);
#: bounded, short strings only.
NAME_TOKENS: dict[str, bytes] = {}
STR_TOKENS: dict[str, bytes] = {}
TOKEN_CACHE_MAX = 4096


def name_token(k: str) -> bytes:
    b = NAME_TOKENS.get(k)
    if b is None:
        b = k.encode("utf-8", "surrogatepass")
        b = b"s" + pack_Q(len(b)) + b
        if len(k) <= 256:
            if len(NAME_TOKENS) >= TOKEN_CACHE_MAX:
                NAME_TOKENS.clear()
            NAME_TOKENS[k] = b
    return b


def str_token(k: str) -> bytes:
    b = STR_TOKENS.get(k)
    if b is None:
        b = k.encode("utf-8", "surrogatepass")
        b = pack_Q(len(b)) + b
        if len(k) <= 256:
            if len(STR_TOKENS) >= TOKEN_CACHE_MAX:
                STR_TOKENS.clear()
            STR_TOKENS[k] = b
    return b
