"""Torch objects: tensors by value, modules/optimizers/generators by state."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import require

torch = require("torch")

from memolab.hashing import hash_value as H  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_tensor_metadata_is_content():
    t = torch.arange(6.0)
    assert H(t.reshape(2, 3)) != H(t.reshape(3, 2))
    assert H(torch.ones(3)) != H(torch.ones(3, dtype=torch.float64))
    assert H(torch.tensor([1.0])) != H(torch.tensor([1065353216], dtype=torch.int32))  # same bytes
    assert H(torch.zeros(3)) != H(torch.zeros(3, requires_grad=True))
    assert H(torch.zeros(3)) != H(torch.nn.Parameter(torch.zeros(3)))
    assert H(torch.tensor(0.0)) != H(torch.tensor(-0.0))


def test_views_hash_by_value():
    a = torch.arange(12.0).reshape(3, 4)
    assert H(a.T) == H(a.T.contiguous())
    assert H(a[:, 1]) == H(a[:, 1].clone())
    assert H(a[1:]) != H(a)


def test_awkward_tensors_hash():
    assert H(torch.tensor(3.0)) == H(torch.tensor(3.0))  # 0-dim
    assert H(torch.ones(3, dtype=torch.bfloat16)) != H(torch.ones(3, dtype=torch.float16))
    z = torch.tensor([1 + 2j])
    assert H(z.conj()) == H(torch.tensor([1 - 2j]))
    i = torch.tensor([[0, 0], [1, 1]])
    unco = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (2, 2), check_invariants=True)
    assert H(unco) == H(unco.coalesce())
    assert H(torch.empty(2, 3, device="meta")) != H(torch.empty(3, 2, device="meta"))
    assert H(torch.empty(0)) == H(torch.empty(0))
    w = torch.ones(3, requires_grad=True) * 2  # a non-leaf with grad history
    assert H(w) == H(torch.full((3,), 2.0, requires_grad=True))


def test_tensor_aliasing_is_encoded():
    a = torch.arange(4.0)
    assert H((a, a)) != H((a, a.clone()))


def test_modules_by_class_state_and_hooks_not_handle_ids():
    torch.manual_seed(0)
    m1 = torch.nn.Linear(3, 2)
    torch.manual_seed(0)
    m2 = torch.nn.Linear(3, 2)
    assert H(m1) == H(m2)
    h2 = m2.register_forward_hook(lambda *a: None)  # a hook changes what a module runs
    assert H(m1) != H(m2)
    torch.nn.Linear(1, 1).register_forward_hook(print)  # moves the global handle counter
    h1 = m1.register_forward_hook(lambda *a: None)  # the same hook under another handle id
    assert H(m1) == H(m2)
    h1.remove()
    h2.remove()
    m2.eval()
    assert H(m1) != H(m2)
    m2.train()
    with torch.no_grad():
        m2.weight[0, 0] += 1
    assert H(m1) != H(m2)


def test_generator_state_is_content():
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert H(g1) == H(g2)
    torch.rand(3, generator=g2)
    assert H(g1) != H(g2)
    assert H(torch.Generator().manual_seed(2)) != H(g1)


def test_optimizer_state_changes_after_a_step():
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    d0 = H(opt)
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    assert H(opt) != d0
    assert H(torch.optim.Adam(m.parameters(), lr=0.1)) != H(torch.optim.Adam(m.parameters(), lr=0.2))


_CHILD = """
import torch
from memolab.hashing import hash_value
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.BatchNorm1d(3))
print(hash_value({"model": m, "x": torch.arange(10.0), "dtype": torch.float16, "dev": torch.device("cpu")}))
"""


def test_module_digest_is_stable_across_processes_and_seeds():
    out = set()
    for seed in ("0", "7"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=SRC)
        cp = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        out.add(cp.stdout.strip())
    assert len(out) == 1
