"""transformers objects keyed by what the library declares to be their content.

Measured (two fresh processes of different PYTHONHASHSEEDs; each object keyed
before and after it was used: a forward pass, ``generate``, a padded and
truncated tokenizer call, ``args.device``), the generic rule keyed two kinds of
state that is no content:

* **values salted per process**: ``GenerationConfig._original_object_hash`` is
  Python's ``hash()`` of the config's JSON (str hashes are salted per process), set
  by ``from_model_config``: every model built by the caller keyed apart in every
  process, so nothing taking a model ever hit in a new process;
* **state filled as the object is used**: a fast tokenizer's backend keeps the
  padding and truncation of its last call (set by the call itself), so a
  tokenizer keyed differently once called; values a ``functools.cached_property``
  stored (models such as Chameleon and Emu3 derive vocabulary maps that way,
  ``TrainingArguments`` its device setup).

The general rule, rather than two names: an object is keyed by the content the
library itself declares, so whatever it keeps beside that, whatever its name,
stays out:

* a ``GenerationConfig`` by its ``to_dict()``, what ``save_pretrained`` writes
  (transformers leaves its bookkeeping out there: the salted hash, the hub commit);
* a fast tokenizer by its settings and its backend's ``tokenizer.json`` content
  (vocabulary, merges, normalizer, pre-tokenizer, post-processor, decoder, added
  tokens), less the padding and truncation that each call of the tokenizer sets
  from its own settings and the call's arguments (a bare ``tokenizers.Tokenizer``
  keeps them: its ``encode`` uses them);
* a model as any ``nn.Module`` (class by code, weights, buffers, submodules,
  attributes: its config and generation config by these rules), without the
  values its ``cached_property`` attributes stored (derived by the class's code,
  which is keyed), and a ``PretrainedConfig`` the same way;
* ``TrainingArguments`` by the settings that change results: its dataclass fields
  less ``NOT_RESULTS`` (where outputs and logs go, who reports, hub pushes, speed
  settings, which rank a process is), plus what it derives from the machine that
  does change results (``n_gpu``, ``world_size``, the device type).

A ``Trainer`` is refused, as Lightning's is: it is a run, not a value.

A ``PretrainedConfig`` keys by the generic rule (less its cached properties): every attribute it holds was
measured stable, and ``to_dict()`` would drop settings that change what a model
computes (the attention implementation).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Any

from .. import hashing
from ..handles import refuse_live
from ..hashing import Encoder

#: lead byte of a library object keyed by its integration's own rule (docs/hashing.md)
LEAD = b"\x1c"

#: ``TrainingArguments`` fields that do not change what training computes (docs/hashing.md)
NOT_RESULTS = frozenset({
    # where outputs, checkpoints and logs go, under which names
    "output_dir", "logging_dir", "overwrite_output_dir", "run_name", "project", "trackio_space_id",
    "trackio_bucket_id", "trackio_static_space_id", "save_on_each_node",
    # who reports, and how much is printed
    "report_to", "disable_tqdm", "log_level", "log_level_replica", "log_on_each_node",
    # pushes to the Hub (the token is a secret: never keyed)
    "push_to_hub", "hub_token", "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push",
    "hub_revision",
    # speed and memory only: the same batches, the same numbers (as torch's DataLoader, docs/torch.md)
    "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor", "torch_empty_cache_steps",
    "ddp_timeout",
    # which rank this process is: every rank of one job must key alike
    "local_rank",
})

#: a fast tokenizer backend's state that each call of the tokenizer sets (``set_truncation_and_padding``)
PER_CALL = ("truncation", "padding")

_derived: dict[type, frozenset[str]] = {}


def derived(t: type) -> frozenset[str]:
    """The attribute names under which ``functools.cached_property`` attributes of ``t`` store their values."""
    got = _derived.get(t)
    if got is None:
        got = frozenset(v.attrname for base in t.__mro__ for v in vars(base).values()
                        if isinstance(v, functools.cached_property) and v.attrname)
        _derived[t] = got
    return got


def encode_object(enc: Encoder, obj: Any) -> None:
    """The generic rule, without what ``cached_property`` attributes stored."""
    enc.encode_object(obj, exclude=derived(type(obj)))


def encode_generation_config(enc: Encoder, g: Any) -> None:
    if enc.memoize(g):
        return
    enc.write(LEAD)
    enc.write_str("transformers.GenerationConfig")
    enc.encode_class(type(g))
    enc.encode_child(g.to_dict(), "")


def encode_fast_tokenizer(enc: Encoder, tok: Any) -> None:
    seen = enc.seen(tok)
    enc.encode_object(tok, exclude=derived(type(tok)) | {"_tokenizer"})
    if seen:
        return  # a back-reference: the object was keyed in full where it was first met
    backend = getattr(tok, "_tokenizer", None)
    enc.write(LEAD)
    enc.write_str("transformers.backend")
    if backend is None:
        enc.write(b"-")
        return
    content = json.loads(backend.to_str())
    for k in PER_CALL:
        content.pop(k, None)
    enc.write(b"+")
    enc.write_str(json.dumps(content, ensure_ascii=False, separators=(",", ":")))


def encode_training_arguments(enc: Encoder, args: Any) -> None:
    if enc.memoize(args):
        return
    enc.write(LEAD)
    enc.write_str("transformers.TrainingArguments")
    enc.encode_class(type(args))
    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.name not in NOT_RESULTS}
    enc.encode_child(settings, "")
    enc.encode_child({"n_gpu": args.n_gpu, "world_size": args.world_size, "device": args.device.type}, "")


def register() -> None:
    """The ``transformers`` hashing hook (``memolab/settings/hooks.py``). The model's family registers when
    ``transformers.modeling_utils`` is imported (it imports torch), the others the same way: each
    on its own module, so registering imports nothing the user did not."""
    for module, fn in (("transformers.configuration_utils", _configs),
                       ("transformers.generation.configuration_utils", _generation),
                       ("transformers.tokenization_utils_tokenizers", _tokenizers),
                       ("transformers.training_args", _training_args),
                       ("transformers.modeling_utils", _models),
                       ("transformers.trainer", _trainer)):
        if module in sys.modules:
            fn()
        else:
            hashing.register_lazy(module, fn)


def _configs() -> None:
    hashing.register_handler(sys.modules["transformers.configuration_utils"].PretrainedConfig, encode_object)


def _generation() -> None:
    hashing.register_handler(sys.modules["transformers.generation.configuration_utils"].GenerationConfig,
                             encode_generation_config)


def _tokenizers() -> None:
    hashing.register_handler(sys.modules["transformers.tokenization_utils_tokenizers"].TokenizersBackend,
                             encode_fast_tokenizer)


def _training_args() -> None:
    hashing.register_handler(sys.modules["transformers.training_args"].TrainingArguments, encode_training_arguments)


def encode_model(enc: Encoder, m: Any) -> None:
    """A model as any ``nn.Module`` (its hooks included), without what ``cached_property`` attributes stored."""
    from ..torch.modules import encode_module

    encode_module(enc, m, derived(type(m)))


def _models() -> None:
    hashing.register_handler(sys.modules["transformers.modeling_utils"].PreTrainedModel, encode_model)


def _trainer() -> None:
    # a Trainer is a run: its state (log history with run times, global step), callbacks, optimizer,
    # accelerator; as Lightning's Trainer (memolab.lightning.keys), it is refused
    hashing.register_handler(sys.modules["transformers.trainer"].Trainer, refuse_live(
        "a transformers Trainer", "it carries the state of a run (its log history with run times, step, "
        "callbacks, optimizer, accelerator)", "what it is built from (the model, TrainingArguments, datasets: "
        "they are keyed) and build the Trainer inside the memoized function"))
