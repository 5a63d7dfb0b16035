"""Torch hashing rules (docs/torch.md): registration order, what a key holds, what it leaves out.

Registration-order bugs only show in a process where the user's object is the
first of its library to be hashed, so those tests run in fresh interpreters.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import zygote
from conftest import require
from memolab import hashing
from memolab.hashing import hash_value as H

SRC = str(Path(__file__).resolve().parents[1] / "src")


#: what a script that imports torch before memolab may fork from (tests/zygote.py): memolab, its
#: registrations and the user's classes are still the new process's own, so the first object it hashes
#: is the first; each real start spent ~1.5 s of CPU importing torch
TORCH = ("torch", "numpy")


def fresh(code: str, timeout: float = 120, preload: tuple[str, ...] = ()) -> dict:
    """Run ``code`` in a new interpreter; its last stdout line is JSON. With ``preload`` (for code
    that imports those modules before memolab) forked from a server that imported them."""
    env = dict(os.environ, PYTHONPATH=SRC)
    if preload:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "fresh.py").write_text(textwrap.dedent(code))
            cp = zygote.run([os.path.join(d, "fresh.py")], d, env, preload, timeout)
    else:
        cp = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def optional(name: str):
    """A test dependency (pinned in the dev extra): skipped where it cannot be imported, never under CI."""
    return require(name)


# -- registration: the first object hashed may be a user subclass --------------------------------

_FIRST = {
    "numpy": ("import numpy as np\nclass Sub(np.ndarray): pass\nx = np.arange(6.0).view(Sub)", "enc_array"),
    "tensor": ("import torch\nclass Sub(torch.Tensor): pass\nx = torch.arange(6.0).as_subclass(Sub)",
               "encode_tensor"),
    "module": ("import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
               "        self.lin = torch.nn.Linear(2, 2)\n        self.register_buffer('b', torch.zeros(2))\n"
               "        self.register_forward_hook(lambda *a: None)\nx = Net()", "encode_module"),
    "dataset": ("import torch\nclass DS(torch.utils.data.Dataset):\n    def __init__(self): self.t = torch.zeros(3)\n"
                "x = DS()", "encode_data"),
    "optimizer": ("import torch\nclass Opt(torch.optim.SGD): pass\nx = Opt([torch.zeros(2, requires_grad=True)], lr=0.1)",
                  "encode_optimizer"),
    "torchdata loader": ("import torch\nfrom torchdata.stateful_dataloader import StatefulDataLoader\n"
                         "class Mine(StatefulDataLoader): pass\n"
                         "x = Mine(torch.utils.data.TensorDataset(torch.zeros(4)), batch_size=2)",
                         "encode_stateful_loader"),
}


@pytest.mark.parametrize("family", sorted(_FIRST))
def test_user_subclass_hashed_first_gets_its_family_handler(family):
    make, handler = _FIRST[family]
    if family == "torchdata loader":
        optional("torchdata")
    got = fresh(make + """
from memolab import hashing
import json
a, b = hashing.hash_value(x), hashing.hash_value(x)
print(json.dumps({"same": a == b, "handler": hashing._dispatch[type(x)].__name__}))
""", preload=() if family == "numpy" else TORCH)  # (numpy's script never imports torch)
    assert got == {"same": True, "handler": handler}


def test_module_hashed_first_keys_its_hooks_and_sees_buffer_updates():
    got = fresh("""
        import json, torch
        import torch.nn.functional as F
        from memolab import hashing
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mean", torch.zeros(4))
                self.register_buffer("var", torch.ones(4))
        m = Net()
        d0 = hashing.hash_value(m)
        h = m.register_forward_hook(lambda *a: None)
        d1 = hashing.hash_value(m)
        h.remove()
        d0b = hashing.hash_value(m)
        F.batch_norm(torch.randn(8, 4), m.mean, m.var, training=True)  # in place, version counter unmoved
        d2 = hashing.hash_value(m)
        print(json.dumps({"hook": d0 != d1, "removed": d0b == d0, "buffers": d2 != d0b}))
    """, preload=TORCH)
    assert got == {"hook": True, "removed": True, "buffers": True}


@pytest.mark.preload(*TORCH)  # bn.py imports torch before memolab: a forked run (tests/zygote.py)
def test_memoized_module_with_batchnorm_style_buffers_misses_after_update(project):
    project.write("bn.py", """
        import json, sys, torch
        import torch.nn.functional as F
        import memolab

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mean", torch.zeros(4))
                self.register_buffer("var", torch.ones(4))

        @memolab.memo
        def stats(m):
            return m.mean.sum().item()

        torch.manual_seed(0)
        m = Net()
        first = stats(m)                      # the user module is the first torch object hashed
        stats(m)                              # a hit: same module, same key
        hits = len(stats.evaluations())
        F.batch_norm(torch.randn(8, 4) + 3, m.mean, m.var, training=True)
        second = stats(m)                     # must be a miss: the buffers changed
        print(json.dumps({"first": first, "second": second, "true": m.mean.sum().item(),
                          "hits": hits, "runs": len(stats.evaluations())}))
    """)
    got = project.run_json("bn.py")
    assert got["first"] == 0.0
    assert got["second"] == pytest.approx(got["true"]) and got["second"] != 0.0
    assert got["hits"] == 1 and got["runs"] == 2


def test_registering_drops_handlers_resolved_before():
    class Base:
        pass

    class Child(Base):
        def __init__(self):
            self.v = 1

    before = H(Child())
    assert hashing._dispatch[Child] is hashing._encode_object

    def handler(enc, obj):
        enc.write(b"\x7fBase")

    try:
        hashing.register_handler(Base, handler)
        assert H(Child()) != before  # re-resolved: the base's handler now applies
        assert hashing._dispatch[Child] is handler
    finally:
        hashing._dispatch.pop(Base, None)
        hashing._dispatch.pop(Child, None)


def test_register_lazy_runs_for_a_base_class_module_and_drops_resolved(tmp_path, monkeypatch):
    (tmp_path / "lazylib").mkdir()
    (tmp_path / "lazylib" / "__init__.py").write_text("")
    (tmp_path / "lazylib" / "core.py").write_text("class Thing:\n    def __init__(self):\n        self.v = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from lazylib.core import Thing

    class Mine(Thing):  # a user subclass: its own module is this test's
        pass

    H(Mine())  # resolved before the hook exists
    ran = []

    def hook():
        ran.append(1)
        hashing.register_handler(Thing, lambda enc, obj: enc.write(b"\x7fThing"))

    try:
        hashing.register_lazy("lazylib.core", hook)
        assert Mine not in hashing._dispatch  # dropped: the hook could apply to it
        H(Mine())
        assert ran == [1]
    finally:
        hashing._lazy.pop("lazylib.core", None)
        hashing._dispatch.pop(Thing, None)
        hashing._dispatch.pop(Mine, None)


def test_hashing_tensors_modules_and_loaders_imports_no_compiler_stack():
    got = fresh("""
        import json, sys, torch
        from memolab import hashing
        before = {m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules}
        m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
        dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 3)), batch_size=2)
        hashing.hash_value((m, torch.ones(3), dl))
        after = [m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules and m not in before]
        optim = any(getattr(t, "__module__", "").startswith("torch.optim") for t in hashing._dispatch)
        print(json.dumps({"before": sorted(before), "after": after, "optim_registered": optim}))
    """)
    assert got["before"] == [] and got["after"] == []
    assert not got["optim_registered"]  # the optimizer family waits for its first optimizer


# -- optimizers -----------------------------------------------------------------------------

torch = require("torch")


def test_adam_state_is_keyed_by_position_not_by_hashing_parameters(leaf_digests):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))  # 4 parameters
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    counts = leaf_digests(torch.zeros(1))
    H(opt)
    # 4 parameters + per parameter exp_avg, exp_avg_sq, step = 16; hashing the state's
    # keys would hash each parameter a second time (20)
    assert counts["n"] == 16


def test_optimizer_key_follows_state_and_order():
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(3))
    o1 = torch.optim.Adam([a, b], lr=0.1)
    o2 = torch.optim.Adam([b, a], lr=0.1)
    assert H(o1) != H(o2)  # positions differ: state_dict() would differ too
    d = H(o1)
    (a.sum() * 2 + b.sum()).backward()
    o1.step()
    assert H(o1) != d
    sched = torch.optim.lr_scheduler.StepLR(o1, 2)
    assert H(sched) == H(sched) and H(o1) == H(o1)


def test_optimizer_subclass_attributes_count():
    class Scaled(torch.optim.SGD):
        def __init__(self, params, lr, scale):
            super().__init__(params, lr=lr)
            self.scale = scale  # read by its step: must be in the key

    p = torch.nn.Parameter(torch.ones(2))
    a, b = Scaled([p], 0.1, 1.0), Scaled([p], 0.1, 2.0)
    assert H(a) != H(b)
    c1, c2 = Scaled([p], 0.1, 1.0), Scaled([p], 0.1, 1.0)
    torch.optim.lr_scheduler.StepLR(c1, 2)
    torch.optim.lr_scheduler.StepLR(c2, 2)
    assert "step" in vars(c1)  # the scheduler's counting wrapper: bookkeeping, left out
    assert H(c1) == H(c2)


# -- data: a loader's key is its configuration ----------------------------------------------

from torch.utils.data import DataLoader, Dataset, RandomSampler, TensorDataset  # noqa: E402

import memolab.torch as mtorch  # noqa: E402


class Noisy(Dataset):
    """Random augmentation in __getitem__: batches depend on num_workers."""

    def __init__(self, n):
        self.x = torch.arange(float(n))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + torch.rand(1)


@pytest.fixture
def rng_mode():
    yield mtorch.configure
    mtorch.configure(rng="seed")


def _loader(**kw):
    kw.setdefault("batch_size", 4)
    return DataLoader(TensorDataset(torch.arange(32.0)), **kw)


def test_seeded_shuffling_loader_key_is_stable_across_epochs():
    dl = _loader(shuffle=True, generator=torch.Generator().manual_seed(7))
    d = H(dl)
    orders = [[b[0].tolist() for b in dl] for _ in range(2)]
    assert orders[0] != orders[1]  # the generator advanced...
    assert H(dl) == d  # ...but the key is the configuration
    assert H(_loader(shuffle=True, generator=torch.Generator().manual_seed(7))) == d
    assert H(_loader(shuffle=True, generator=torch.Generator().manual_seed(8))) != d  # the seed counts


def test_exact_rng_policy_hashes_the_running_generator_state(rng_mode):
    rng_mode(rng="exact")
    dl = _loader(shuffle=True, generator=torch.Generator().manual_seed(7))
    d = H(dl)
    list(dl)
    assert H(dl) != d
    with pytest.raises(ValueError):
        rng_mode(rng="sometimes")


def test_generator_on_its_own_counts_by_running_state():
    g = torch.Generator().manual_seed(1)
    d = H(g)
    torch.rand(2, generator=g)
    assert H(g) != d  # a function drawing from it would see other numbers


def test_sampler_generator_is_configuration_too():
    ds = TensorDataset(torch.arange(8.0))
    s = RandomSampler(ds, generator=torch.Generator().manual_seed(3))
    d = H(s)
    list(s)
    assert H(s) == d
    assert H(RandomSampler(ds, generator=torch.Generator().manual_seed(4))) != d


def test_loader_settings_that_change_batches_count_and_speed_settings_do_not():
    base = H(_loader())
    assert H(_loader(batch_size=8)) != base
    assert H(_loader(drop_last=True)) != base
    assert H(_loader(num_workers=2)) != base  # random augmentation would differ (documented)
    assert H(_loader(collate_fn=lambda b: b)) != base
    assert H(_loader(shuffle=True)) != base
    assert H(_loader(pin_memory=True)) == base
    assert H(_loader(timeout=5)) == base
    assert H(_loader(num_workers=2, prefetch_factor=4)) == H(_loader(num_workers=2))


def test_num_workers_changes_augmented_batches():
    """Why num_workers is in the key: with randomness in __getitem__ the batches differ."""
    def batches(workers):
        torch.manual_seed(0)
        dl = DataLoader(Noisy(8), batch_size=4, num_workers=workers)
        return [b.tolist() for b in dl]

    assert batches(0) != batches(2)


def test_persistent_workers_loader_hashes_after_an_epoch():
    dl = _loader(shuffle=True, generator=torch.Generator().manual_seed(1), num_workers=2, persistent_workers=True)
    d = H(dl)
    list(dl)
    assert dl._iterator is not None  # live worker processes: transient, not content
    assert H(dl) == d


def test_datapipe_iteration_counters_are_not_content():
    from torch.utils.data.datapipes.iter import IterableWrapper

    dp = IterableWrapper(list(range(10))).batch(3)
    d = H(dp)
    list(dp)
    assert H(dp) == d
    assert H(IterableWrapper(list(range(10))).batch(4)) != d


def test_stateful_loader_hashes_after_iter_and_its_resume_position_counts():
    optional("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return StatefulDataLoader(TensorDataset(torch.arange(32.0)), batch_size=4, shuffle=True,
                                  generator=torch.Generator().manual_seed(5))

    dl = make()
    d = H(dl)
    it = iter(dl)
    next(it)
    assert H(dl) == d  # mid-epoch, but the next iter() starts a fresh epoch
    state = dl.state_dict()
    rest = [b[0].tolist() for b in it]

    resumed = make()
    resumed.load_state_dict(state)
    assert H(resumed) != d  # a pending resume position decides the next batches
    assert [b[0].tolist() for b in resumed] == rest
    assert H(resumed) == d  # resumed epoch done: back to its configuration
    assert H(make()) == d


def test_accelerate_shard_iteration_counter_is_not_content():
    optional("accelerate")
    from accelerate.data_loader import DataLoaderShard

    sh = DataLoaderShard(TensorDataset(torch.arange(16.0)), batch_size=4)
    d = H(sh)
    for _ in sh:
        pass
    assert sh.iteration == 1
    assert H(sh) == d
    assert H(DataLoaderShard(TensorDataset(torch.arange(16.0)), batch_size=8)) != d


def test_import_graph_hashing_codegraph_is_one_way():
    import ast

    pkg = Path(SRC) / "memolab" / "codegraph"
    for f in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not any(n == "hashing" or n.endswith(".hashing") for n in names), f
