"""memolab: persistent, code-aware memoization for machine-learning work.

``import memolab`` stays cheap: numpy and torch support is registered lazily,
the first time a value from those libraries is hashed or stored.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .config import configure
from .errors import CodeChanged, CorruptBlob, HashError, MemolabError, MemolabWarning, StoreMiss
from .files import Dir, File
from .hashing import register_hasher, register_opaque, register_policy
from .memo import MemoFunction, memo

__all__ = [
    "memo", "MemoFunction", "configure",
    "register_hasher", "register_opaque", "register_policy", "File", "Dir",
    "HashError", "StoreMiss", "CodeChanged", "CorruptBlob", "MemolabError", "MemolabWarning",
    "__version__",
]
