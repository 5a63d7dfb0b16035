"""Loaders that can stop mid-epoch, be stored, and resume with exactly the remaining batches.

Three kinds of loader are supported (docs/torch.md, "Resumable iteration"):

* ``resumable(DataLoader(...))``: a plain DataLoader cannot say where it is, so
  the wrapper records what decides an epoch — the random-number states
  (torch, ``random``, numpy, and every ``torch.Generator`` the loader holds)
  taken just before the epoch's ``iter()`` — and counts the batches it handed
  out. To resume, it restores those states, calls ``iter()`` and replays the
  counted batches (they are loaded and dropped). Replaying rather than skipping
  indices is what makes random augmentation in ``__getitem__`` come out the
  same, with ``num_workers`` 0 or more (measured, notes/pytorch-findings.md).
  After the replay the global generators are put where they were when the
  position was taken, as an uninterrupted run would have them. Between epochs
  (and before the first) the position is the random states themselves: the
  next epoch's order and seeds are drawn from them.
* torchdata's ``StatefulDataLoader``: stored as its configuration plus its
  ``state_dict()``, loaded back with ``load_state_dict`` (so the copy's next
  ``iter()`` resumes).
* ``torchdata.nodes``: a ``Loader`` is stored as its node graph plus its
  ``state_dict()`` (loaded back as a pending state); a node stored on its own
  keeps its position through ``get_state()``/``reset(initial_state)``.

A loader is always rebuilt from its configuration (dataset, sampler,
generator, collate code, ...), never from a position alone: a position only
means something for the configuration it was taken from, and both are in the
key.
"""
from __future__ import annotations

import copy
import random
import sys
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch

from ..errors import swallowed

# -- random-number states ------------------------------------------------------------------


def _generators(loader: Any) -> list[torch.Generator]:
    """The torch.Generators a DataLoader draws from (its own, its sampler's), each once."""
    found: dict[int, torch.Generator] = {}
    candidates = [getattr(loader, "generator", None)]
    for s in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        candidates.append(getattr(s, "generator", None))
        inner = getattr(s, "sampler", None)  # a BatchSampler wraps the sampler
        candidates.append(getattr(inner, "generator", None))
    for g in candidates:
        if isinstance(g, torch.Generator):
            found.setdefault(id(g), g)
    return list(found.values())


def capture_rng(generators: Sequence[torch.Generator] = ()) -> dict[str, Any]:
    """The global random states (torch CPU, CUDA where initialised, ``random``,
    numpy's legacy global) plus those of ``generators``, as plain data."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untested here: no GPU
        state["cuda"] = torch.cuda.get_rng_state_all()
    state["generators"] = [g.get_state() for g in generators]
    return state


def restore_rng(state: dict[str, Any], generators: Sequence[torch.Generator] = ()) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("generators", [])
    if len(saved) != len(generators):
        raise ValueError(f"the position was taken with {len(saved)} torch.Generator(s) in the loader, "
                         f"this loader has {len(generators)}: it is not the loader the position belongs to")
    for g, s in zip(generators, saved, strict=False):
        g.set_state(s)


# -- memolab.torch.resumable ------------------------------------------------------------------


class Resumable:
    """A DataLoader that knows where it is: ``get_state()``/``reset(state)``.

    ``iter()`` continues the epoch in progress if there is one (so a loader
    returned mid-epoch behaves the same whether it was just computed or loaded
    from the store), else starts the next epoch. ``reset()`` abandons the epoch
    in progress. One iteration at a time: iterators taken from the same
    ``Resumable`` share its position.
    """

    def __init__(self, loader: Any) -> None:
        if isinstance(loader, Resumable):
            loader = loader.loader  # type: ignore[has-type]  # a wrapped loader
        self.loader = loader
        self._snapshot: dict[str, Any] | None = None  # RNG states at the iter() of the epoch in progress
        self._consumed = 0
        self._live: Iterator[Any] | None = None
        self._pending: dict[str, Any] | None = None  # a mid-epoch position to resume at the next iter()
        # the next epoch must reuse a persistent-workers iterator that this process
        # does not have yet (a state taken between epochs by a loader that had one)
        self._restart_workers = False

    def __repr__(self) -> str:
        where = "idle"
        if self._pending is not None:
            where = f"resumes after batch {self._pending['consumed']}"
        elif self._live is not None:
            where = f"{self._consumed} batches into an epoch"
        return f"resumable({type(self.loader).__name__}, {where})"

    def __len__(self) -> int:
        return len(self.loader)

    # -- iteration ----------------------------------------------------------------------
    def __iter__(self) -> _ResumableIterator:
        if self._pending is not None:
            self._replay(self._pending)
        elif self._live is None:
            if self._restart_workers:
                self._start_persistent_iterator()
            self._snapshot = capture_rng(_generators(self.loader))
            # persistent workers: a later epoch reuses the loader's iterator, which
            # draws no new base seed, so its order comes from other generator states
            self._snapshot["reused"] = _reuses_iterator(self.loader)
            self._consumed = 0
            self._live = iter(self.loader)
        return _ResumableIterator(self)

    def _next(self) -> Any:
        if self._live is None:
            raise StopIteration
        try:
            batch = next(self._live)
        except StopIteration:
            self._end_epoch()
            raise
        self._consumed += 1
        return batch

    def _end_epoch(self) -> None:
        self._live = None
        self._snapshot = None
        self._consumed = 0

    def _start_persistent_iterator(self) -> None:
        """Create the loader's persistent iterator without moving any generator, so the
        epoch that follows reuses it (no new base seed) as in the process the state came from."""
        self._restart_workers = False
        if _reuses_iterator(self.loader):
            return
        gens = _generators(self.loader)
        now = capture_rng(gens)
        iter(self.loader)
        restore_rng(now, gens)

    def _replay(self, pos: dict[str, Any]) -> None:
        self._pending = None
        gens = _generators(self.loader)
        if pos["snapshot"].get("reused") and not _reuses_iterator(self.loader):
            iter(self.loader)  # start the persistent iterator first, as the interrupted run had it
        restore_rng(pos["snapshot"], gens)
        self._snapshot = pos["snapshot"]
        self._consumed = 0
        self._live = iter(self.loader)
        for _ in range(pos["consumed"]):
            try:
                next(self._live)
            except StopIteration:
                raise RuntimeError(f"cannot resume: the loader ended after {self._consumed} batches, the position says "
                                   f"{pos['consumed']} were consumed (is it the same dataset?)") from None
            self._consumed += 1
        # where the generators were when the position was taken (the loader's own are
        # part of it; the global ones are put back as an uninterrupted run has them)
        restore_rng(pos["now"], gens)

    # -- explicit state (the torchdata.nodes model) --------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Where the loader is: the RNG snapshot of the epoch in progress (None between
        epochs and before the first), the batches consumed, and the RNG states now."""
        if self._pending is not None:
            return self._pending
        now = capture_rng(_generators(self.loader))
        if self._live is None:
            # The next epoch's order, worker seeds and augmentation are drawn from
            # the states now, so they are the position; a rebuilt loader's
            # generators are at their seeds, not where this one's are.
            now["reused"] = self._restart_workers or _reuses_iterator(self.loader)
            return {"snapshot": None, "consumed": 0, "now": now}
        return {"snapshot": self._snapshot, "consumed": self._consumed, "now": now}

    def reset(self, state: dict[str, Any] | None = None) -> None:
        """Abandon the epoch in progress; with ``state``, resume there.

        A state taken within an epoch resumes at the next ``iter()``, which replays
        the epoch and then sets the random states as they were when it was taken:
        whatever a restarted script does before its loop (seeding, building the
        model, the epoch's preamble) ran before that state too. A state taken
        between epochs sets them now: what runs before the next epoch ran after the
        state in the uninterrupted run as well."""
        self._end_epoch()
        self._pending = None
        if state is None:
            return
        state = _checked(state)
        self._restart_workers = False
        if state["snapshot"] is not None:
            self._pending = state
            return
        restore_rng(state["now"], _generators(self.loader))
        self._restart_workers = bool(state["now"].get("reused"))

    # torch's Stateful protocol (torch.distributed.checkpoint, StatefulDataLoader users)
    def state_dict(self) -> dict[str, Any]:
        return {"position": self.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset(state.get("position"))  # None: a state saved before between-epoch positions existed

    # -- storing and keying ---------------------------------------------------------------------
    def __reduce__(self) -> Any:
        # Between epochs the stored loader is its configuration: its generators are
        # stored with their states, and the global ones are the loading process's
        # business, as they are the live object's (loading a result sets no RNG).
        position = self._pending
        if position is None and self._live is not None:
            position = self.get_state()
        restart = self._restart_workers or (self._live is None and _reuses_iterator(self.loader))
        return _rebuild_resumable, (_without_iterator(self.loader), position, restart)

    def __memo_hash__(self) -> Any:
        # The loader's configuration, and where the next iter() starts: a pending
        # position also decides the global RNG states after the replay; a live
        # epoch continues with whatever they are then, so they are not its state.
        pos: Any = None
        if self._pending is not None:
            pos = ("pending", self._pending["consumed"], self._pending["snapshot"], self._pending["now"])
        elif self._live is not None:
            pos = ("live", self._consumed, self._snapshot)
        return (self.loader, pos)


class _ResumableIterator:
    __slots__ = ("_owner",)

    def __init__(self, owner: Resumable) -> None:
        self._owner = owner

    def __iter__(self) -> _ResumableIterator:
        return self

    def __next__(self) -> Any:
        return self._owner._next()

    def __len__(self) -> int:
        return len(self._owner.loader)


def _reuses_iterator(loader: Any) -> bool:
    """Will the loader's next iter() reuse its live iterator (persistent workers)?"""
    return (bool(getattr(loader, "persistent_workers", False)) and getattr(loader, "num_workers", 0) > 0
            and getattr(loader, "_iterator", None) is not None)


def _checked(state: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(state, dict) or not {"snapshot", "consumed", "now"} <= set(state):
        raise ValueError("not a position of memolab.torch.resumable (expected what get_state() returns)")
    return state


def _rebuild_resumable(loader: Any, position: dict[str, Any] | None, restart_workers: bool = False) -> Resumable:
    r = Resumable(loader)
    if position is not None:
        r.reset(position)
    r._restart_workers = restart_workers and position is None
    return r


def _without_iterator(loader: Any) -> Any:
    """``loader`` without a live iterator (persistent workers keep one on it): a copy if needed."""
    if getattr(loader, "_iterator", None) is None:
        return loader
    c = copy.copy(loader)
    c.__dict__["_iterator"] = None
    return c


def resumable(loader: Any) -> Resumable:
    """Wrap a ``torch.utils.data.DataLoader`` so it can stop mid-epoch, be stored, and resume exactly.

    ``for batch in resumable(loader)`` iterates as the loader does. Stopped
    mid-epoch, the wrapper (returned from a memoized function, or its
    ``get_state()`` saved by ``memolab.checkpoint``) resumes at its next
    ``iter()`` with exactly the remaining batches: same order, same random
    augmentation, for any ``num_workers``. Resuming replays the consumed batches.
    """
    return Resumable(loader)


# -- torchdata: StatefulDataLoader and torchdata.nodes ------------------------------------------


def _stateful_position(dl: Any) -> dict[str, Any] | None:
    """A StatefulDataLoader's position: a loaded state not yet used, or its live iteration's."""
    if getattr(dl, "next_iter_state", None) is not None:
        return cast("dict[str, Any]", dl.next_iter_state)
    if getattr(dl, "_iterator", None) is not None:
        return cast("dict[str, Any]", dl.state_dict())
    return None


def _reduce_stateful_dataloader(p: Any, dl: Any) -> Any:
    state = dict(dl.__dict__)
    position = _stateful_position(dl)
    state["_iterator"] = None
    state["_initial_iter_for_state_dict"] = False
    state["next_iter_state"] = None
    return _rebuild_stateful_dataloader, (type(dl), state, position)


def _rebuild_stateful_dataloader(cls: type, state: dict[str, Any], position: dict[str, Any] | None) -> Any:
    dl = cls.__new__(cls)  # type: ignore[call-overload]  # any class
    dl.__dict__.update(state)  # DataLoader.__setattr__ refuses some names after init: bypass it, as pickle does
    if position is not None:
        dl.load_state_dict(position)
    return dl


# A position is applied from the top: ``reset(state)`` on a node resets its
# sources in turn. So within one stored graph only the outermost node (or the
# Loader) carries a position; the nodes under it are stored as configuration
# (plus, for a SamplerWrapper, its generator rewound to the epoch's start) and
# are positioned by that one reset when the graph is loaded.

def _inner_nodes(p: Any) -> set[Any]:
    s = getattr(p, "_memolab_inner_nodes", None)
    if s is None:
        s = set()
        p._memolab_inner_nodes = s
    return s


def _mark_descendants(p: Any, node: Any) -> None:
    inner = _inner_nodes(p)
    # ids are safe: every node here is reachable from the object being pickled,
    # so alive for the whole dump
    stack = [v for v in node.__dict__.values() if _is_node(v)]
    while stack:
        n = stack.pop()
        if id(n) in inner:
            continue
        inner.add(id(n))
        stack.extend(v for v in n.__dict__.values() if _is_node(v))


def _reduce_nodes_loader(p: Any, loader: Any) -> Any:
    _mark_descendants(p, loader)
    pending = loader._next_iter_state_dict
    live = None
    if pending is None and loader._it is not None:
        live = loader._it.state_dict()
    return _rebuild_nodes_loader, (type(loader), loader.root, loader.restart_on_stop_iteration, pending, live)


def _rebuild_nodes_loader(cls: type, root: Any, restart: bool, pending: dict[str, Any] | None,
                          live: dict[str, Any] | None = None) -> Any:
    loader = cls(root, restart_on_stop_iteration=restart)
    if pending is not None:
        loader.load_state_dict(pending)
    elif live is not None:
        # What ``state_dict()`` leaves on a fresh Loader: an iterator that the
        # next iter() hands out as it is, here positioned where the stored one was.
        from torchdata.nodes.loader import LoaderIterator

        it = LoaderIterator(loader)
        it.reset(live)
        loader._it = it
        loader._iter_for_state_dict = True
    return loader


def _node_started(node: Any) -> bool:
    return bool(node.__dict__.get("_BaseNode__initialized", False))


def _node_config(node: Any) -> dict[str, Any]:
    """A node's attributes minus the live iteration (iterators, threads): what
    ``reset()`` rebuilds. Child nodes stay (they are configuration), reduced in turn."""
    from torchdata.nodes import BaseNode

    out = {}
    for k, v in node.__dict__.items():
        if isinstance(v, BaseNode) or not hasattr(v, "__next__"):
            out[k] = v
        else:
            out[k] = None  # an iterator of the running epoch: reset() makes a new one
    out["_BaseNode__initialized"] = False
    return out


def _reduce_node(p: Any, node: Any) -> Any:
    outermost = id(node) not in _inner_nodes(p)
    if outermost:
        _mark_descendants(p, node)
    position = node.get_state() if outermost and _node_started(node) else None
    return _rebuild_node, (type(node), _node_config(node), position, _epoch_start_generator(node))


def _rebuild_node(cls: type, state: dict[str, Any], position: dict[str, Any] | None,
                  rewind: torch.Tensor | None = None) -> Any:
    node = cls.__new__(cls)  # type: ignore[call-overload]  # any class
    node.__dict__.update(state)
    if rewind is not None:
        node.sampler.generator.set_state(rewind)
    if position is not None:
        node.reset(position)
    return node


def _epoch_start_generator(node: Any) -> torch.Tensor | None:
    """For a SamplerWrapper part-way through an epoch: its sampler's generator state
    at the start of the epoch, which resuming needs (``reset(state)`` draws the
    epoch's order again, then skips what was yielded). torchdata's own
    RandomSampler records it in its iterator; torch's samplers do not, and a
    position over them cannot be resumed exactly: refused rather than stored wrong."""
    from torchdata.nodes import SamplerWrapper

    if not isinstance(node, SamplerWrapper) or node.__dict__.get("_it") is None:
        return None
    it = node._it
    state = it.state_dict() if hasattr(it, "state_dict") else None
    if isinstance(state, dict) and isinstance(state.get("generator"), torch.Tensor):
        return cast(torch.Tensor, state["generator"])
    sampler = node.sampler
    if getattr(sampler, "generator", None) is not None or type(sampler).__name__ in _RANDOM_SAMPLERS:
        import pickle

        raise pickle.PicklingError(
            f"a torchdata.nodes.SamplerWrapper over {type(sampler).__qualname__} cannot be stored mid-epoch: the "
            "order of the epoch came from a random generator whose state at the epoch's start is gone, so it could not "
            "be resumed exactly. Use torchdata.stateful_dataloader.sampler.RandomSampler (its iterator records that "
            "state), or store the loader between epochs.")
    return None


#: torch's samplers that draw an epoch's order from a generator (the global one when none is given)
_RANDOM_SAMPLERS = frozenset({"RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler"})


def _hash_nodes_loader(loader: Any) -> Any:
    # What the next iter() yields: the graph, a loaded state not yet used, and an
    # iterator that iter() hands out as it is (after state_dict(), or a stored
    # loader that was mid-epoch). A live epoch otherwise does not matter: iter()
    # starts the next one from the graph.
    handed = loader._it.state_dict() if loader._iter_for_state_dict and loader._it is not None else None
    return (loader.root, loader.restart_on_stop_iteration, loader._next_iter_state_dict, handed)


def _hash_node(node: Any) -> Any:
    public = {k: v for k, v in node.__dict__.items() if not k.startswith("_")}
    children = {k: v for k, v in node.__dict__.items() if k.startswith("_") and _is_node(v)}
    return (public, children, node.get_state() if _node_started(node) else None)


def _is_node(v: Any) -> bool:
    from torchdata.nodes import BaseNode

    return isinstance(v, BaseNode)


def _node_classes() -> list[type]:
    import torchdata.nodes as tn
    from torchdata.nodes import loader as tl, map as tm

    seen: dict[type, None] = {}
    for name in tn.__all__:
        c = getattr(tn, name)
        if isinstance(c, type) and issubclass(c, tn.BaseNode):
            seen[c] = None
    for c in (tl.LoaderIterator, getattr(tm, "_ParallelMapperImpl", None)):
        if isinstance(c, type):
            seen[c] = None
    return list(seen)


def register_pickling(register_reducer: Any) -> None:
    """Reducers for torchdata's loaders (exact types, as memolab's pickler dispatches)."""
    try:
        import torchdata.nodes as tn
        from torchdata.stateful_dataloader import StatefulDataLoader
    except Exception:  # torchdata too old or broken for this torch: pickle's own handling
        swallowed("torch.iteration: register_pickling")
        return
    register_reducer(StatefulDataLoader, _reduce_stateful_dataloader)
    register_reducer(tn.Loader, _reduce_nodes_loader)
    for c in _node_classes():
        register_reducer(c, _reduce_node)


def register_hashing() -> None:
    """Key rules for torchdata.nodes (StatefulDataLoader's are with the DataLoader's)."""
    from .. import hashing

    try:
        import torchdata.nodes as tn
    except Exception:  # torchdata too old or broken for this torch: its import fails in any way
        swallowed("torch.iteration: register_hashing")
        return
    hashing.register_handler(tn.Loader, _handler(tn.Loader, _hash_nodes_loader))
    for c in _node_classes():
        hashing.register_handler(c, _handler(c, _hash_node))


def _handler(cls: type, substitute: Any) -> Any:
    """Hash a node as its class plus ``substitute(node)``; a node reached again (a
    bound ``epoch_updater`` points back at its node) is a back-reference."""

    tag = f"{cls.__module__}:{cls.__qualname__}"

    def handler(enc: Any, obj: Any) -> None:
        if enc.memoize(obj):
            return
        enc.write(b"U")
        enc.write_str(tag)
        enc.encode_child(substitute(obj), "")

    return handler


# -- Accelerate ------------------------------------------------------------------------------------


def _reduce_gradient_state(p: Any, state: Any) -> Any:
    # Accelerate's GradientState is process-wide (every instance shares one dict)
    # and, during an epoch, holds weak references to the loaders iterating: it is
    # not data of the loader. A loaded loader joins the loading process's state.
    return type(state), ()


def register_accelerate_pickling(register_reducer: Any) -> None:
    try:
        from accelerate.state import GradientState
    except Exception:  # accelerate, a third party: its import fails in any way where broken
        swallowed("torch.iteration: register_accelerate_pickling")
        return
    register_reducer(GradientState, _reduce_gradient_state)
