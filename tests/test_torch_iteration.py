"""Loaders stopped mid-epoch: stored, loaded, resumed with exactly the remaining batches.

The reference is always an uninterrupted run of the same loader; batches are
compared bitwise, augmentation included.
"""
from __future__ import annotations

import random
import warnings

import pytest

from conftest import require

torch = require("torch")
np = require("numpy")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from memolab import hashing, memo, pickling  # noqa: E402
from memolab.torch import resumable  # noqa: E402


class Augmenting(Dataset):
    """Random augmentation in __getitem__, from all three global generators."""

    def __init__(self, n: int = 20) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]) + torch.rand(1) + random.random() + float(np.random.rand())


def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def _loader(workers: int) -> DataLoader:
    return DataLoader(Augmenting(), batch_size=3, shuffle=True, num_workers=workers,
                      generator=torch.Generator().manual_seed(5))


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=False))


def _roundtrip(obj):
    data, buffers = pickling.dumps(obj)
    return pickling.loads(data, [bytes(b) for b in buffers])


@pytest.mark.parametrize("workers", [0, 2])
def test_resumable_stored_mid_epoch_resumes_exactly(workers):
    _seed()
    r = resumable(_loader(workers))
    ref = []
    for _ in range(2):
        for b in r:
            ref.append(b)
            torch.rand(1)  # the training loop draws too (dropout)
    _seed()
    r = resumable(_loader(workers))
    it = iter(r)
    got = []
    for _ in range(3):
        got.append(next(it))
        torch.rand(1)
    copy = _roundtrip(r)
    torch.manual_seed(123)  # whatever happens in between...
    random.seed(9)
    for _ in range(2):
        for b in copy:  # ...the first iter() resumes: the rest of epoch 1, then epoch 2
            got.append(b)
            torch.rand(1)
    assert _same(got, ref)


def test_resumable_with_persistent_workers_resumes_a_later_epoch_exactly():
    def make():
        return resumable(DataLoader(list(range(12)), batch_size=2, shuffle=True, num_workers=2, persistent_workers=True,
                                    generator=torch.Generator().manual_seed(3)))

    r = make()
    ref = [b.tolist() for _ in range(3) for b in r]
    r = make()
    got = [b.tolist() for b in r]  # epoch 1 done: epoch 2 reuses the workers' iterator (no new base seed)
    it = iter(r)
    got.append(next(it).tolist())
    copy = _roundtrip(r)
    got += [b.tolist() for _ in range(2) for b in copy]
    assert got == ref


def test_resumable_iter_continues_the_epoch_in_progress_and_reset_abandons_it():
    r = resumable(DataLoader(list(range(10)), batch_size=2))
    it = iter(r)
    assert next(it).tolist() == [0, 1]
    assert [b.tolist() for b in r] == [[2, 3], [4, 5], [6, 7], [8, 9]]  # the live object behaves as its stored copy
    assert [b.tolist() for b in r][0] == [0, 1]  # then a new epoch
    it = iter(r)
    next(it)
    r.reset()
    assert next(iter(r)).tolist() == [0, 1]  # a new epoch
    it = iter(r)  # continues it
    assert [next(it).tolist(), next(it).tolist()] == [[2, 3], [4, 5]]
    other = resumable(DataLoader(list(range(10)), batch_size=2))
    other.reset(r.get_state())
    assert [b.tolist() for b in other] == [[6, 7], [8, 9]]
    with pytest.raises(ValueError):
        other.reset({"consumed": 3})


def test_resumable_key_is_configuration_plus_position():
    def fresh():
        return resumable(DataLoader(list(range(10)), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1)))

    a, b = fresh(), fresh()
    assert hashing.hash_value(a) == hashing.hash_value(b)
    it = iter(a)
    next(it)
    assert hashing.hash_value(a) != hashing.hash_value(b)  # the next iter() continues where a stopped
    copy = _roundtrip(a)
    assert hashing.hash_value(copy) == hashing.hash_value(_roundtrip(a))
    other = resumable(DataLoader(list(range(10)), batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1)))
    other.reset(copy.get_state())
    assert hashing.hash_value(other) != hashing.hash_value(copy)  # same position, other configuration


RESUME_SCRIPT = """
import json, random, sys
import numpy as np, torch
from torch.utils.data import DataLoader, Dataset
from memolab import memo
from memolab.torch import resumable

class Augmenting(Dataset):
    def __len__(self):
        return 20
    def __getitem__(self, i):
        return torch.tensor([float(i)]) + torch.rand(1) + random.random() + float(np.random.rand())

def loader(workers):
    torch.manual_seed(0); random.seed(0); np.random.seed(0)
    return resumable(DataLoader(Augmenting(), batch_size=3, shuffle=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(5)))

@memo
def warm_up(workers, k):
    r = loader(workers)
    it = iter(r)
    for _ in range(k):
        next(it)
    return r

out = {}
for workers in (0, 2):
    full = [b.tolist() for b in loader(workers)]
    rest = [b.tolist() for b in warm_up(workers, 3)]
    out[workers] = rest == full[3:]
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.preload("torch", "numpy")  # its script imports torch (numpy) before memolab: forked runs (tests/zygote.py)
def test_resumable_returned_mid_epoch_resumes_in_a_new_process(project):
    project.write("resume.py", RESUME_SCRIPT)
    assert project.run_json("resume.py") == {"0": True, "2": True}  # computed (the live object)
    assert project.run_json("resume.py") == {"0": True, "2": True}  # loaded from the store


# -- torchdata ----------------------------------------------------------------------------------

def _torchdata():
    require("torchdata")
    warnings.filterwarnings("ignore", module="torchdata")


class StatefulNoisy(Dataset):
    """Augments with its own generator and says so through state_dict (torchdata's contract)."""

    def __init__(self, n: int = 24) -> None:
        self.n = n
        self.g = torch.Generator().manual_seed(3)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]) + torch.rand(1, generator=self.g)

    def state_dict(self):
        return {"g": self.g.get_state()}

    def load_state_dict(self, s) -> None:
        self.g.set_state(s["g"])


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_stored_mid_epoch_resumes_the_epoch(workers, tmp_store):
    _torchdata()
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return StatefulDataLoader(StatefulNoisy(), batch_size=3, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(5))

    ref = list(make())

    @memo
    def partly(workers, k):
        dl = make()
        it = iter(dl)
        for _ in range(k):
            next(it)
        return dl

    partly(workers, 3)
    stored = partly(workers, 3)  # a hit: unpickled from the stored bytes
    assert stored.next_iter_state is not None
    assert _same(ref[:3] + list(stored), ref)


def test_resumable_stateful_dataloader_is_exact_across_epochs():
    _torchdata()
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        _seed()
        return resumable(StatefulDataLoader(Augmenting(24), batch_size=3, shuffle=True,
                                            generator=torch.Generator().manual_seed(5)))

    r = make()
    ref = list(r) + list(r)
    r = make()
    it = iter(r)
    got = [next(it) for _ in range(3)]
    copy = _roundtrip(r)
    got += list(copy) + list(copy)  # the next epoch too, and global-RNG augmentation (StatefulDataLoader alone: neither)
    assert _same(got, ref)


def _nodes_loader(parallel: int = 0):
    import torchdata.nodes as tn
    from torchdata.stateful_dataloader.sampler import RandomSampler

    def augment(i):
        # randomness as a function of the item, the way torchdata.nodes resumes exactly
        return float(i) + torch.rand(1, generator=torch.Generator().manual_seed(1000 + i)).item()

    node = tn.SamplerWrapper(RandomSampler(range(20), generator=torch.Generator().manual_seed(7)))
    node = tn.ParallelMapper(node, augment, num_workers=parallel, method="thread") if parallel else tn.Mapper(node, augment)
    return tn.Loader(tn.Batcher(node, batch_size=3))


@pytest.mark.parametrize("workers", [0, 2])
def test_nodes_loader_stored_mid_epoch_resumes_exactly(workers):
    _torchdata()
    loader = _nodes_loader(workers)
    ref = list(loader) + list(loader)
    loader = _nodes_loader(workers)
    it = iter(loader)
    got = [next(it) for _ in range(2)]
    key = hashing.hash_value(loader)
    copy = _roundtrip(loader)
    assert hashing.hash_value(copy) != key  # its next iter() resumes; the live one's starts the next epoch
    assert hashing.hash_value(copy) == hashing.hash_value(_roundtrip(loader))
    got += list(copy) + list(copy)
    assert got == ref
    fresh = [hashing.hash_value(_nodes_loader(workers)) for _ in range(2)]
    assert fresh[0] == fresh[1]


def test_nodes_node_stored_mid_iteration_resumes_exactly():
    _torchdata()
    ref = list(_nodes_loader().root)
    node = _nodes_loader().root
    got = [next(node) for _ in range(2)]
    assert got + list(_roundtrip(node)) == ref


def test_nodes_position_that_cannot_be_resumed_exactly_is_not_stored():
    _torchdata()
    import pickle

    import torchdata.nodes as tn
    from torch.utils.data import RandomSampler

    loader = tn.Loader(tn.Batcher(tn.SamplerWrapper(RandomSampler(range(20), generator=torch.Generator().manual_seed(7))), 3))
    it = iter(loader)
    next(it)
    with pytest.raises(pickle.PicklingError, match="cannot be stored mid-epoch"):
        pickling.dumps(loader)


# -- Accelerate ---------------------------------------------------------------------------------

def test_resumable_accelerate_loader_stored_mid_epoch_resumes_exactly():
    require("accelerate")
    from accelerate import Accelerator

    warnings.filterwarnings("ignore", module="accelerate")
    acc = Accelerator(cpu=True)

    def make():
        _seed()
        return resumable(acc.prepare(DataLoader(Augmenting(), batch_size=3, shuffle=True,
                                                generator=torch.Generator().manual_seed(5))))

    r = make()
    ref = list(r) + list(r)
    r = make()
    it = iter(r)
    got = [next(it) for _ in range(3)]  # mid-epoch, Accelerate's GradientState holds a weakref to the loader
    copy = _roundtrip(r)
    got += list(copy) + list(copy)
    assert _same(got, ref)
