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
modules (``memolab.settings.hooks``) so that ``import memolab`` imports neither numpy nor
torch, and this package never imports an integration.

The package, bottom up: ``primitives`` (constants, packers, the chunk tree),
``registry`` (handlers by type, lazy hooks, leaves, policies), ``objects`` (the
generic rules and the resolution of unregistered types), ``encoder`` (``Encoder``,
``hash_value``, ``hash_arguments``), ``builtins`` (built-in and stdlib types),
``arrays`` (numpy, registered lazily) and ``results`` (results loaded from the
store). Every public name is re-exported here.
"""
from __future__ import annotations

from .. import codegraph
from ..settings.hooks import LAZY_HOOKS, hook
from .builtins import encode_str, register_builtins
from .encoder import (
    Encoder,
    hash_arguments,
    hash_arguments_uncached,
    hash_value,
    register_handler,
    register_hasher,
    register_opaque,
    registry_generation,
)
from .objects import encode_object
from .primitives import (
    ALGORITHM,
    CHUNK,
    KEY_SCHEMA,
    NAME_TOKENS,
    SCHEMA,
    STR_TOKENS,
    TOKEN_CACHE_MAX,
    TREE_MIN,
    chunk_digests,
    hash_threads,
    name_token,
    pack_Q,
    str_token,
)
from .registry import (
    Handler,
    Leaf,
    dispatch,
    excluded_attributes,
    lazy,
    leaves,
    register_lazy,
    register_leaf,
    register_policy,
    resolved,
)
from .results import note_result, register_result_walk, remember_loaded, result_digests, result_token

__all__ = [
    "ALGORITHM", "CHUNK", "KEY_SCHEMA", "SCHEMA", "TREE_MIN", "Encoder", "Handler", "Leaf", "chunk_digests",
    "excluded_attributes", "hash_arguments", "hash_threads", "hash_value", "note_result", "register_handler",
    "register_hasher", "register_lazy", "register_leaf", "register_opaque", "register_policy",
    "register_result_walk", "registry_generation", "remember_loaded", "result_digests", "result_token",
]

# The names this module had when it was one file, for code and tests that reach
# into it: the same objects, so mutating them (a test popping a dispatch entry)
# acts on the live tables.
_dispatch, _resolved, _lazy, _leaves = dispatch, resolved, lazy, leaves
_NAME_TOKENS, _STR_TOKENS, _TOKEN_CACHE_MAX = NAME_TOKENS, STR_TOKENS, TOKEN_CACHE_MAX
_name_token, _str_token, _encode_str, _encode_object = name_token, str_token, encode_str, encode_object
_hash_arguments, _pack_Q = hash_arguments_uncached, pack_Q

register_result_walk(encode_object)
# code values hash their arguments' defaults and bound globals with this package;
# handing it over here (rather than codegraph importing us) keeps the import graph acyclic
codegraph.set_value_hasher(hash_value)
register_builtins()
for _module, _target in LAZY_HOOKS["hashing"].items():
    register_lazy(_module, hook(_target))
