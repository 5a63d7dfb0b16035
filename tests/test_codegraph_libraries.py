"""The code graph and libraries (issue 35, sections 1 and 2; docs/code-dependencies.md):
it never imports a library to classify a name, counts a library a body imports by the
version that body used, and sees user code planted into libraries and other code it
used to miss (a package ``__getattr__``, function attributes, ``exec``). Fresh processes."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from conftest import require

SRC = str(Path(__file__).resolve().parents[1] / "src")

PRELUDE = '''
import json, sys
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()
'''


def _lib(site: Path, name: str, body: str, version: str = "1.0") -> None:
    """An installed library: a package in a site-packages folder, with its distribution's metadata."""
    (site / name).mkdir(parents=True, exist_ok=True)
    (site / name / "__init__.py").write_text(textwrap.dedent(body))
    for old in site.glob(f"{name}-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "venv" / "lib" / "site-packages"
    d.mkdir(parents=True)
    return d


def _run(project, site, script, *args, env=None):
    e = {"PYTHONPATH": os.pathsep.join([SRC, str(project.root), str(site)]), **(env or {})}
    return project.run_json(script, *args, env=e)


# -- a library imported inside a function --------------------------------------------------------

NANOGPT = '''
import torch
import torch.nn as nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x + F.gelu(self.fc(self.ln(x)))


class GPT(nn.Module):
    def __init__(self, vocab, n_embd, n_layer):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd) for _ in range(n_layer)])
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    @classmethod
    def from_pretrained(cls, model_type):
        from transformers import GPT2LMHeadModel  # never called by training: nanoGPT's own layout
        return GPT2LMHeadModel.from_pretrained(model_type)
'''

TRAIN = PRELUDE + '''
import torch
from model import GPT

if len(sys.argv) > 1 and sys.argv[1] == "no-transformers":
    class NotInstalled:  # as if transformers were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "transformers":
                raise ModuleNotFoundError(name)

    sys.meta_path.insert(0, NotInstalled())


@memolab.memo
def train(steps: int, seed: int):
    calls.append(steps)
    torch.manual_seed(seed)
    model = GPT(vocab=32, n_embd=16, n_layer=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 32, (8, 9))
    for _ in range(steps):
        _, loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


loss = train(5, 0)
print(json.dumps({"loss": loss, "calls": len(calls), "key": train.key(5, 0)[1],
                  "transformers": "transformers" in sys.modules}))
'''


def test_a_nanogpt_hit_imports_no_library_training_never_reaches(project):
    """``GPT.from_pretrained`` imports transformers; training never calls it. No key ever imports
    it (a 4-7 s import on every hit before), and the key is the same whether or not it is installed."""
    require("torch")
    project.write("model.py", NANOGPT)
    project.write("train.py", TRAIN)
    first = project.run_json("train.py")
    again = project.run_json("train.py")
    absent = project.run_json("train.py", "no-transformers")
    assert first["calls"] == 1 and again["calls"] == 0 and absent["calls"] == 0
    assert not first["transformers"] and not again["transformers"] and not absent["transformers"]
    assert first["key"] == again["key"] == absent["key"]
    assert again["loss"] == first["loss"]


LAZY = PRELUDE + '''
@memolab.memo
def uses(x):
    calls.append("uses")
    import fakelib
    return fakelib.scale(x)

@memolab.memo
def never(x, reach=False):
    calls.append("never")
    if reach:
        import fakelib
    return x + 1

@memolab.memo
def fallback(x):
    calls.append("fallback")
    try:
        import fakelib2
        return fakelib2.scale(x)
    except ImportError:
        return -x

# ``never`` first: a library imported when a body ends counts for it, whoever imported it
out = {"never": never(3), "uses": uses(3), "fallback": fallback(3)}
print(json.dumps({**out, "calls": list(calls), "explain": str(uses.explain(4))}))
'''


def test_a_library_imported_in_a_body_counts_by_the_version_that_body_used(project, site):
    _lib(site, "fakelib", "def scale(x):\n    return x * 10\n", "1.0")
    project.write("lazy.py", LAZY)
    first = _run(project, site, "lazy.py")
    assert first["calls"] == ["never", "uses", "fallback"] and first["fallback"] == -3
    assert _run(project, site, "lazy.py")["calls"] == []
    # a new version: the function that imported it misses; the one that never did hits
    _lib(site, "fakelib", "def scale(x):\n    return x * 20\n", "2.0")
    second = _run(project, site, "lazy.py")
    assert second["calls"] == ["uses"] and second["uses"] == 60

    # a library that was missing when the body tried it: installing it is a miss
    _lib(site, "fakelib2", "def scale(x):\n    return x * 100\n", "1.0")
    third = _run(project, site, "lazy.py")
    assert third["calls"] == ["fallback"] and third["fallback"] == 300


# -- user code planted into a library ---------------------------------------------------------------

FANCY = '''
class Layer:
    def forward(self, x):
        return x

def act(x):
    return x

def apply(x):
    return Layer().forward(x) + 1  # the library calls its own class: user code never names it
'''


def test_user_code_planted_into_a_library_is_a_dependency(project, site):
    _lib(site, "fancylib", FANCY)
    project.write("patches.py", """
        import fancylib

        def my_forward(self, x):
            return x * 2

        fancylib.Layer.forward = my_forward  # the flash-attention style patch
    """)
    project.write("run.py", PRELUDE + """
import patches
import fancylib

@memolab.memo
def run(x):
    calls.append(x)
    return fancylib.apply(x)

print(json.dumps({"value": run(5), "calls": len(calls)}))
""")
    assert _run(project, site, "run.py") == {"value": 11, "calls": 1}
    assert _run(project, site, "run.py") == {"value": 11, "calls": 0}
    project.write("patches.py", """
        import fancylib

        def my_forward(self, x):
            return x * 3

        fancylib.Layer.forward = my_forward
    """)
    assert _run(project, site, "run.py") == {"value": 16, "calls": 1}


def test_a_library_patched_between_two_calls_in_one_process(project, site):
    _lib(site, "fancylib", FANCY)
    project.write("inproc.py", PRELUDE + """
import math
import fancylib

@memolab.memo
def uses_act(x):
    return fancylib.act(x)

@memolab.memo
def uses_sqrt(x):
    return math.sqrt(x)

@memolab.memo
def uses_method(x):
    return fancylib.Layer().forward(x)

out = [uses_act(4), uses_sqrt(16.0), uses_method(4)]
fancylib.act = lambda x: x + 100          # F.relu = ...
math.sqrt = lambda x: -1.0                 # math.sqrt = ...
fancylib.Layer.forward = lambda self, x: x * 7   # nn.Linear.forward = ...
out += [uses_act(4), uses_sqrt(16.0), uses_method(4)]
print(json.dumps(out))
""")
    assert _run(project, site, "inproc.py") == [4, 4.0, 4, 104, -1.0, 28]


# -- code the graph used to miss ------------------------------------------------------------------


def test_package_getattr_function_attributes_and_exec_made_code_are_dependencies(project):
    files = {
        "mypkg/__init__.py": """
            def __getattr__(name):  # PEP 562: helpers served lazily
                if name == "helper":
                    from .impl import helper
                    return helper
                raise AttributeError(name)
        """,
        "mypkg/impl.py": """
            def helper(x):
                return x + 1
        """,
        "helpers.py": """
            def scaled(x):
                return x * scaled.scale

            scaled.scale = 3

            SRC = "def made(x):\\n    return x - 1\\n"
            ns = {}
            exec(SRC, ns)
            made = ns["made"]
        """,
    }
    for rel, text in files.items():
        project.write(rel, text)
    project.write("app.py", PRELUDE + """
import mypkg
import helpers

@memolab.memo
def lazy(x):
    calls.append("lazy")
    return mypkg.helper(x)

@memolab.memo
def attr(x):
    calls.append("attr")
    return helpers.scaled(x)

@memolab.memo
def execd(x):
    calls.append("execd")
    return helpers.made(x)

print(json.dumps({"v": [lazy(10), attr(10), execd(10)], "calls": list(calls)}))
""")
    assert project.run_json("app.py") == {"v": [11, 30, 9], "calls": ["lazy", "attr", "execd"]}
    assert project.run_json("app.py")["calls"] == []
    project.write("mypkg/impl.py", "def helper(x):\n    return x + 2\n")
    project.write("helpers.py", textwrap.dedent(files["helpers.py"]).replace("scaled.scale = 3", "scaled.scale = 4")
                  .replace("return x - 1", "return x - 2"))
    assert project.run_json("app.py") == {"v": [12, 40, 8], "calls": ["lazy", "attr", "execd"]}


def test_a_name_resolved_from_a_string_is_warned_about(project):
    project.write("locate.py", PRELUDE + """
import pydoc, warnings

@memolab.memo
def build(name):
    return pydoc.locate(name)(3)

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    build("math.sqrt")
print(json.dumps([str(x.message) for x in w]))
""")
    messages = project.run_json("locate.py")
    assert any("pydoc's locate()" in m and "locate.py" in m for m in messages), messages


def test_an_annotation_only_edit_of_a_nested_function_is_a_hit(project):
    body = PRELUDE + """
@memolab.memo
def outer(x):
    calls.append(x)
    def inner(y: int) -> int:
        return y * 2
    return inner(x)

print(json.dumps({"v": outer(4), "calls": len(calls)}))
"""
    project.write("ann.py", body)
    assert project.run_json("ann.py") == {"v": 8, "calls": 1}
    project.write("ann.py", body.replace("def inner(y: int) -> int:", "def inner(y: float) -> 'List[float]':"))
    assert project.run_json("ann.py") == {"v": 8, "calls": 0}
    project.write("ann.py", body.replace("return y * 2", "return y * 3"))
    assert project.run_json("ann.py") == {"v": 12, "calls": 1}


def test_the_walk_over_loaded_modules_survives_an_import_in_the_middle_of_it():
    """Building the walk's item tuples can run a collection; a finalizer (or the thread it lets in)
    that imports then grows ``sys.modules`` mid-walk. This raised "dictionary changed size during
    iteration" from a memoized call (CI, under load); the collection is forced here at every offset."""
    import gc
    import sys
    import types

    from memolab.codegraph import patches

    added: list[str] = []

    class Importer:
        def __init__(self) -> None:
            self.me = self  # a cycle: freed only by a collection

        def __del__(self) -> None:
            name = f"_memolab_test_finalizer_import_{len(added)}"
            added.append(name)
            sys.modules[name] = types.ModuleType(name)

    old = gc.get_threshold()
    try:
        for threshold in range(2, 400, 40):  # (before the fix, 129 of 133 offsets raised)
            gc.collect()
            gc.disable()
            for _ in range(3):
                Importer()
            sys.modules[f"_memolab_test_fresh_{threshold}"] = types.ModuleType("fresh")  # a new walk
            added.append(f"_memolab_test_fresh_{threshold}")
            gc.set_threshold(threshold)
            gc.enable()
            patches.planted()
    finally:
        gc.set_threshold(*old)
        gc.enable()
        for name in added:
            sys.modules.pop(name, None)
    assert sum(n.startswith("_memolab_test_finalizer") for n in added) > 0
