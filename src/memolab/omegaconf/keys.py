"""How OmegaConf configs are keyed: by what the function reading them sees.

A ``DictConfig`` went through the generic object rule, so its key was OmegaConf's
internal state: an interpolation by its *text* (``${oc.env:SCALE}`` keyed the same
after ``SCALE=3``: the ``SCALE=1`` result came back, wrong), and the root's
``_metadata.resolver_cache``, where ``compose()`` and ``@hydra.main`` leave the
time they ran at (``${now:...}`` of Hydra's own run dir), so a composed config never
hit. Now a container node is keyed by:

* its kind (``DictConfig`` or ``ListConfig``) and, for a structured config, its
  object type (the dataclass or attrs class, by code: editing it is a miss);
  the declared key, element and reference types, whether it may be None, and its
  effective ``readonly``, ``struct`` and ``allow_objects`` flags (they decide what
  writing to it does);
* each child by its key (a dict's order does not count, as for a ``dict``), the
  class of its node (``IntegerNode``, ``AnyNode``, ...: what assigning to it
  accepts) and its **resolved value** as reading it would return it: an
  interpolation by what it resolves to now (an environment variable's value, a
  ``${now:...}`` by the time it resolves to, which the resolver cache then pins
  for that config) *and* by its text (``OmegaConf.to_yaml`` shows the text), a
  nested config by the same rule, ``???`` as missing. An interpolation that
  cannot be resolved now (an unset variable, a key that does not exist) is keyed
  by its text and the kind of error: reading it would raise, and once it resolves
  the key changes.

Left out: the resolver cache, the node's key in its parent and its parent (a
sub-config keys by its own content, wherever it sits; interpolations that reach
outside it enter by their values).

Resolving runs the resolvers, as reading the config would: a resolver with side
effects or a random result is run by keying too (docs/hashing.md).
"""
from __future__ import annotations

from typing import Any

from .. import hashing
from ..hashing import Encoder

#: lead byte of tokens of a library object keyed by its integration's own rule (0x1c),
#: then the kind's name; see docs/hashing.md
LEAD = b"\x1c"
#: the flags that change what a function may do with a config (write to it, add keys, hold objects)
FLAGS = ("readonly", "struct", "allow_objects")


def register() -> None:
    """The ``omegaconf`` hashing hook (``memolab/settings/hooks.py``)."""
    from omegaconf import DictConfig, ListConfig

    hashing.register_handler(DictConfig, encode_config)
    hashing.register_handler(ListConfig, encode_config)


def encode_config(enc: Encoder, cfg: Any) -> None:
    if enc.memoize(cfg):
        return
    from omegaconf import DictConfig

    if cfg._is_interpolation():  # a container node that is itself ``${...}``: its text and its target
        enc.write(LEAD)
        enc.write_str("omegaconf.interpolation")
        enc.write_str(str(cfg._value()))
        enc.encode_child(resolved_or_error(lambda: cfg._dereference_node(), cfg), "")
        return
    meta = cfg._metadata
    enc.write(LEAD)
    enc.write_str(f"omegaconf.{'DictConfig' if isinstance(cfg, DictConfig) else 'ListConfig'}")
    write_type(enc, meta.object_type if isinstance(cfg, DictConfig) else list)
    for t in (meta.ref_type, meta.key_type, meta.element_type):
        write_type(enc, t)
    enc.write(b"T" if meta.optional else b"F")
    enc.encode_child(tuple(cfg._get_flag(f) for f in FLAGS), "")
    if cfg._is_none():
        enc.write(b"N")
        return
    if cfg._is_missing():
        enc.write(b"?")
        return
    enc.write(b"+")
    if isinstance(cfg, DictConfig):
        enc.encode_child({k: child_entry(cfg, k) for k in cfg.keys()}, "")
    else:
        enc.encode_child([child_entry(cfg, i) for i in range(len(cfg))], "")


def child_entry(cfg: Any, key: Any) -> tuple[str, Any, Any]:
    """(the node's class, an interpolation's text or None, the value reading ``cfg[key]`` returns or a
    marker of why it has none). The text counts too: ``OmegaConf.to_yaml(cfg)`` and
    ``to_container(cfg)`` show it, so a function may return it."""
    node = cfg._get_node(key)
    kind = type(node).__name__
    if node._is_missing():
        return kind, None, Missing()
    text = str(node._value()) if node._is_interpolation() else None
    return kind, text, resolved_or_error(lambda: cfg[key], node)


def resolved_or_error(read: Any, node: Any) -> Any:
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    try:
        return read()
    except MissingMandatoryValue:  # an interpolation to a ``???``
        return Unresolved(str(node._value()), "MissingMandatoryValue")
    except InterpolationResolutionError as e:
        return Unresolved(str(node._value()), type(e).__name__)


class Missing:
    """A ``???`` value (keyed by its class alone: it holds nothing)."""


class Unresolved:
    """An interpolation that does not resolve now: its text and the kind of error reading it raises."""

    def __init__(self, text: str, error: str) -> None:
        self.text = text
        self.error = error


def write_type(enc: Encoder, t: Any) -> None:
    """A declared type: a class by its code (a structured config's dataclass), a typing form by its text."""
    if isinstance(t, type):
        enc.encode_class(t)  # a token of its own lead byte, C
    else:
        enc.write(b"t")
        enc.write_str(repr(t))

