"""A memoized result passed on keys the same where it was computed and wherever it was loaded (issue 22).

``key(x) == key(load(store(x)))``, in fresh processes, for every type memolab
has a handler for: otherwise the next step recomputes once on every machine.
Process 1 computes each value (a miss: built and stored) and keys it as the
argument of another memoized function; process 2, fresh, loads every value (a
hit) and keys it the same way. Each key is taken twice: as a call's key (where
the identity cache hands a loaded array or tensor the digest it was stored
under) and hashed afresh with the identity cache off (the content alone: what a
copy, or any later process, gets). Two processes for all the types.
"""
from __future__ import annotations

import pytest

from conftest import Project, require

require("torch")
require("pyarrow")
require("datasets")

VALUES = r'''
import dataclasses, enum, os

import attrs
import numpy as np
import pyarrow as pa
import torch
import torch.nn as nn

import memolab
from memolab import memo


class Built(list):
    """What this process computed: opaque, so that appending to it is no code change of ``make``."""


memolab.register_opaque(Built)
BUILT = Built()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.l2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))


class Rows(torch.utils.data.Dataset):
    def __init__(self, x):
        self.x = x
        self.tag = "rows"

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i]


@dataclasses.dataclass
class Cfg:
    lr: float
    arr: object
    t: object


@attrs.define
class ACfg:
    a: int
    arr: object


class Plain:
    def __init__(self, a):
        self.a = a
        self.b = {"k": [1, 2]}


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a
        self.b = 2


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def trained():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    for _ in range(3):
        loss = net(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return net, opt, sched


def gen(seed):
    return torch.Generator().manual_seed(seed)


def hf(name, a, big):
    import datasets

    if name == "hf_small":
        return datasets.Dataset.from_dict({"x": a, "y": np.arange(6)})
    if name == "hf_numpy":  # the case of the issue: large columns come back over read-only blobs
        return datasets.Dataset.from_dict({"x": big, "y": np.arange(len(big))})
    if name == "hf_strings":
        return datasets.Dataset.from_dict({"t": [f"row {i} " * 3 for i in range(20_000)], "n": list(range(20_000))})
    if name == "hf_map":
        ds = datasets.Dataset.from_dict({"n": np.arange(20_000)})
        return ds.map(lambda r: {"m": [v * 2 for v in r["n"]]}, batched=True)
    if name == "hf_select":
        return datasets.Dataset.from_dict({"x": big}).shuffle(seed=0).select(range(500))
    if name == "hf_csv":
        p = os.path.abspath("rows.csv")
        with open(p, "w") as f:
            f.write("a,b\n" + "".join(f"{i},{i * 0.5}\n" for i in range(30_000)))
        return datasets.load_dataset("csv", data_files=p, split="train")
    if name == "hf_dict":
        return datasets.DatasetDict({"train": datasets.Dataset.from_dict({"x": big}),
                                     "test": datasets.Dataset.from_dict({"x": a})})
    raise KeyError(name)


def build(name):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5))
    big = rng.standard_normal((20_000, 8))  # above the out-of-band size: its own blob
    if name.startswith("hf_"):
        return hf(name, a, big)
    return {
        "np_c": lambda: a,
        "np_f": lambda: np.asfortranarray(big),
        "np_readonly": lambda: readonly(big.copy()),
        "np_view": lambda: big[100:4000:3, 1:],
        "np_views_shared": lambda: [big, big[5:], big.T],
        "np_object": lambda: np.array([1, "a", None], dtype=object),
        "np_structured": lambda: np.array([(i, i * 0.5) for i in range(10_000)], dtype=[("x", "<i4"), ("y", "<f8")]),
        "np_scalar": lambda: np.float32(1.5),
        "np_memmap": lambda: memmap(big),
        "t_small": lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "t_big": lambda: torch.randn(200_000, generator=gen(1)),
        "t_view": lambda: torch.arange(200_000.0).reshape(400, 500)[10:200, 3:],
        "t_noncontiguous": lambda: torch.randn(300, 400, generator=gen(2)).t(),
        "t_views_shared": lambda: views(torch.arange(100_000.0)),
        "t_requires_grad": lambda: torch.ones(20_000, requires_grad=True),
        "t_bf16": lambda: torch.randn(200, 200, generator=gen(3)).to(torch.bfloat16),
        "t_sparse": lambda: torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2)),
        "t_parameter": lambda: nn.Parameter(torch.ones(20_000)),
        "t_attribute": lambda: tagged(torch.ones(20_000)),
        "module": lambda: trained()[0],
        "module_big": lambda: nn.Linear(300, 300),
        "optimizer": lambda: trained()[1],
        "scheduler": lambda: trained()[2],
        "train_state": lambda: trained(),
        "generator": lambda: advanced(gen(5)),
        "tensor_dataset": lambda: torch.utils.data.TensorDataset(torch.randn(20_000, 4, generator=gen(6)),
                                                                  torch.arange(20_000)),
        "user_dataset": lambda: Rows(torch.randn(20_000, 3, generator=gen(7))),
        "user_dataset_numpy": lambda: Rows(big),
        "loader": lambda: torch.utils.data.DataLoader(Rows(big), batch_size=2),
        "loader_generator": lambda: torch.utils.data.DataLoader(Rows(big), batch_size=2, shuffle=True,
                                                                generator=gen(8)),
        "loader_sampler": lambda: sampled(Rows(torch.randn(20_000, 3, generator=gen(9)))),
        "pa_small": lambda: pa.table({"a": np.arange(5), "b": ["x", "y", "z", "w", "v"]}),
        "pa_numpy": lambda: pa.table({"x": big[:, 0].copy(), "y": big[:, 1].copy()}),
        "pa_strings": lambda: pa.table({"s": [str(i) for i in range(50_000)]}),
        "pa_sliced": lambda: pa.table({"a": np.arange(200_000)}).slice(5, 100_000),
        "pa_chunked": lambda: pa.concat_tables([pa.table({"a": np.arange(30_000)}),
                                                pa.table({"a": np.arange(30_000, 60_000)})]),
        "pa_batch": lambda: pa.record_batch({"a": np.arange(20_000)}),
        "pa_array": lambda: pa.array(np.arange(20_000)),
        "dataclass": lambda: Cfg(0.1, big, torch.ones(20_000)),
        "attrs": lambda: ACfg(1, big),
        "plain_object": lambda: Plain(big),
        "slots_object": lambda: Slotted(big),
        "enum": lambda: Color.BLUE,
        "nested": lambda: {"arr": [big, big[1:]], "t": (torch.ones(20_000), Rows(big)),
                           "cfg": Cfg(1.0, None, Color.RED), "table": pa.table({"x": big[:, 2].copy()})},
    }[name]()


def memmap(x):
    m = np.memmap(os.path.abspath("mm.bin"), dtype=x.dtype, mode="w+", shape=x.shape)
    m[:] = x
    m.flush()
    return m


def readonly(x):
    x.flags.writeable = False
    return x


def views(t):
    return (t, t[10:20], t.view(100, 1000))


def tagged(t):
    t.note = "hi"
    return t


def advanced(g):
    torch.rand(3, generator=g)
    return g


def sampled(ds):
    sampler = torch.utils.data.RandomSampler(ds, generator=gen(4))
    return torch.utils.data.DataLoader(ds, batch_size=3, sampler=sampler, drop_last=True)


@memo
def make(name):
    BUILT.append(name)
    return build(name)


@memo
def use(x):
    return 0
'''

NAMES = [
    "np_c", "np_f", "np_readonly", "np_view", "np_views_shared", "np_object", "np_structured", "np_scalar",
    "np_memmap",
    "t_small", "t_big", "t_view", "t_noncontiguous", "t_views_shared", "t_requires_grad", "t_bf16", "t_sparse",
    "t_parameter", "t_attribute",
    "module", "module_big", "optimizer", "scheduler", "train_state", "generator",
    "tensor_dataset", "user_dataset", "user_dataset_numpy", "loader", "loader_generator", "loader_sampler",
    "pa_small", "pa_numpy", "pa_strings", "pa_sliced", "pa_chunked", "pa_batch", "pa_array",
    "hf_small", "hf_numpy", "hf_strings", "hf_map", "hf_select", "hf_csv", "hf_dict",
    "dataclass", "attrs", "plain_object", "slots_object", "enum", "nested",
]

KEYS = r'''
import json, sys

from memolab.hashing import identity

import values

out = {}
for name in sys.argv[1].split(","):
    x = values.make(name)
    key = values.use.key(x)[2]
    identity.enabled = False
    try:
        fresh = values.use.key(x)[2]
    finally:
        identity.enabled = True
    out[name] = {"key": key, "fresh": fresh, "type": type(x).__name__}
print(json.dumps({"built": values.BUILT, "keys": out}))
'''


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """(computed, loaded): each value's keys in the process that computed it and in a fresh one that loaded it."""
    root = tmp_path_factory.mktemp("roundtrip")
    proj = Project(root / "proj")
    proj.write("values.py", VALUES)
    proj.write("keys.py", KEYS)
    hf = root / "hf"
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf),
           "HF_DATASETS_CACHE": str(hf / "datasets"), "MEMOLAB_HASH_THREADS": "1"}
    names = ",".join(NAMES)
    computed = proj.run_json("keys.py", names, env=env, timeout=300)
    loaded = proj.run_json("keys.py", names, env=env, timeout=300)
    assert computed["built"] == NAMES
    assert loaded["built"] == [], "the second process must load every value, not compute it"
    return computed["keys"], loaded["keys"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_loaded_result_keys_as_the_computed_one(keyed, name):
    computed, loaded = keyed
    c, ld = computed[name], loaded[name]
    assert ld["type"] == c["type"] or (name == "np_memmap" and ld["type"] == "ndarray")
    assert ld["key"] == c["key"], f"{name}: a call's key changed once the value was loaded"
    assert ld["fresh"] == c["fresh"], f"{name}: the value's content digest changed once it was loaded"
    assert c["fresh"] == c["key"]  # the identity cache never changes a key, it only skips work
