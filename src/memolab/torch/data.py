"""Datasets, samplers and data loaders: their key is their *configuration*.

A loader's key is what decides the batches a fresh ``iter()`` yields: the
dataset, the sampler / batch sampler (class and settings), the generator's seed,
``batch_size``, ``drop_last``, ``collate_fn`` / ``worker_init_fn`` (by code),
``num_workers`` (with random augmentation in ``__getitem__`` the batches depend
on it) and ``in_order``. Left out: transient state (the live ``_iterator`` —
worker processes —, datapipe iteration counters, Accelerate's ``iteration``
counter and shared ``GradientState``, Lightning's record of its patched
``__init__``) and settings that change speed, not
batches (``pin_memory``, ``timeout``, ``prefetch_factor``,
``persistent_workers``, the multiprocessing context, ``snapshot_every_n_steps``).

A seeded generator anywhere in a data object counts by its seed
(``rng.encode_generator`` under ``Encoder.config_only``), so a shuffling
loader keeps its key from one epoch to the next; ``configure(rng="exact")``
hashes its running state instead.

The one exception is a *pending resume position*: a torchdata
``StatefulDataLoader`` after ``load_state_dict`` (or whose ``state_dict()``
prepared an iterator that the next ``iter()`` continues) yields the rest of an
epoch, not a fresh one, so a function iterating it sees different batches — the
position is part of its key. Every rule is written down in docs/torch.md.
"""
from __future__ import annotations

import sys
from typing import Any

import torch.utils.data as tud

from .. import hashing
from ..distributed import keying_collective
from ..errors import HashError
from ..hashing import Encoder

#: a loader's settings that change speed, not batches, and its transient state
LOADER_EXCLUDE = frozenset({
    "_iterator", "_DataLoader__initialized", "_DataLoader__multiprocessing_context", "_IterableDataset_len_called",
    "pin_memory", "pin_memory_device", "timeout", "prefetch_factor", "persistent_workers",
    # torchdata's StatefulDataLoader: the resume position is hashed on its own (see encode_stateful_loader)
    "next_iter_state", "_initial_iter_for_state_dict", "snapshot_every_n_steps",
})

#: what Lightning's patched ``__init__``/``__setattr__`` (``_replace_dunder_methods``, in force while
#: ``train_dataloader()`` runs under ``Trainer.fit``) records on a loader or batch sampler: a copy of its
#: arguments (``pin_memory`` with them; the dataset again as ``__dataset``) and the state of the call in
#: progress. The object's own attributes hold the configuration; the copy would make it key apart from
#: the identical plain one.
LIGHTNING_PATCH = frozenset({"__pl_saved_args", "__pl_saved_kwargs", "__pl_saved_arg_names",
                             "__pl_saved_default_kwargs", "__pl_inside_init", "__pl_current_call",
                             "__pl_attrs_record", "__dataset"})

#: a datapipe's iteration counters (reset by the next ``iter()``)
DATAPIPE_EXCLUDE = frozenset({"_number_of_samples_yielded", "_snapshot_state", "_valid_iterator_id",
                              "_fast_forward_iterator"})

#: Accelerate's DataLoaderShard/Dispatcher: position in the epoch, end-of-epoch flags, and the
#: process-wide GradientState singleton (which references every active loader)
ACCELERATE_EXCLUDE = frozenset({"iteration", "end_of_dataloader", "remainder", "gradient_state", "_non_blocking"})


def encode_data(enc: Encoder, obj: Any) -> None:
    enc.config_only += 1
    try:
        enc.encode_object(obj)
    finally:
        enc.config_only -= 1


def _yielded(state: Any) -> int | None:
    """Batches already yielded in the epoch a StatefulDataLoader state describes (None if unknown)."""
    if not isinstance(state, dict):
        return None
    if state.get("_iterator_finished"):
        return 0  # the next iter() starts a new epoch
    if "_num_yielded" in state:
        return state["_num_yielded"]
    snap = state.get("_snapshot")
    if isinstance(snap, dict) and isinstance(snap.get("_main_snapshot"), dict):
        return snap["_main_snapshot"].get("_num_yielded")
    return None


def pending_resume(dl: Any) -> Any:
    """The position the next ``iter(dl)`` resumes from, or None when it starts a fresh epoch."""
    state = getattr(dl, "next_iter_state", None)
    if state is None and getattr(dl, "_initial_iter_for_state_dict", False) and dl._iterator is not None:
        try:
            state = dl._iterator.state_dict()  # state_dict() built the iterator that iter() will return
        except Exception as e:  # the user's loader (dead workers, say): no position we could key on
            raise HashError(f"cannot read the loader's pending resume position ({e})", "", dl) from None
    if state is None or _yielded(state) == 0:
        return None
    return state


def encode_stateful_loader(enc: Encoder, dl: Any) -> None:
    if enc.seen(dl):
        enc.memoize(dl)
        return
    encode_data(enc, dl)
    state = pending_resume(dl)
    if state is None:
        enc.write(b"-")
    else:
        enc.write(b"\x10r")  # the position, RNG states included: it decides the next batches
        enc.encode_child(state, ".<resume position>")


def encode_distributed_sampler(enc: Encoder, sampler: Any) -> None:
    """``num_replicas`` (the world size) is in the key like every setting; ``rank`` too, except in
    a collective call (docs/distributed.md), where a sampler of this very rank keys alike on every
    rank: each rank's key is then the same call's."""
    if enc.seen(sampler):
        enc.memoize(sampler)
        return
    encode_data(enc, sampler)
    rank = getattr(sampler, "rank", None)
    if keying_collective() and _own_rank() == rank:
        rank = "<this rank>"
    enc.encode_child(rank, ".rank")


def _own_rank() -> int | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank()


def register() -> None:
    for t in (tud.Dataset, tud.Sampler, tud.DataLoader):
        hashing.register_handler(t, encode_data)
    hashing.register_handler(tud.DistributedSampler, encode_distributed_sampler)
    hashing.register_policy(tud.DistributedSampler, exclude={"rank"})
    # a memoized dataset or loader hands its tensors' digests to the identity cache
    hashing.register_result_walk(encode_data)
    hashing.register_policy(tud.DataLoader, exclude=LOADER_EXCLUDE | LIGHTNING_PATCH)
    hashing.register_policy(tud.BatchSampler, exclude=LIGHTNING_PATCH)
    from torch.utils.data.datapipes.datapipe import IterDataPipe

    hashing.register_policy(IterDataPipe, exclude=DATAPIPE_EXCLUDE)


def register_torchdata() -> None:
    import sys

    sdl = sys.modules.get("torchdata.stateful_dataloader.stateful_dataloader")
    if sdl is not None:
        hashing.register_handler(sdl.StatefulDataLoader, encode_stateful_loader)


def register_accelerate() -> None:
    import sys

    dl = sys.modules.get("accelerate.data_loader")
    if dl is not None:
        for name in ("DataLoaderShard", "DataLoaderDispatcher", "DataLoaderAdapter"):
            t = getattr(dl, name, None)
            if t is not None:
                hashing.register_policy(t, exclude=ACCELERATE_EXCLUDE)
