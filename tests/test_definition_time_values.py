"""Values Python captures when a ``def`` or ``class`` statement runs are code dependencies.

A default argument, a class attribute, a dataclass field's default, a partial's
arguments, an Enum member, a decorator's arguments: each is computed once, where
the code is defined, and lives on an object (``__defaults__``, a class dict, a
closure cell), not in any bytecode. Editing the constant it was computed from
must be a miss, whether the class is reached from the memoized function's body
or from an argument's class (docs/code-dependencies.md, "Values captured at
definition time": one row there per case here).

Every row is a module of its own (``r_<name>.py``) with a constant ``K = 2``
that the memoized ``f`` never reads itself: only through the captured value.
All rows run in the same three fresh processes: before the edit (miss),
unchanged (hit: the key is stable across processes), then with ``K = 3`` in
every row's file (miss, with the value the edit implies).
"""
from __future__ import annotations

from typing import NamedTuple

import pytest

from conftest import Project

pytestmark = pytest.mark.slow


class Row(NamedTuple):
    #: the definitions; ``K = 2`` is prepended
    defs: str
    #: the memoized function's body, an expression of ``x`` (and ``obj`` where ``args`` passes one)
    body: str
    #: the call's arguments, as source
    args: str = "(3,)"
    #: a phrase the explanation of the miss must contain
    why: str = ""


ROWS: dict[str, Row] = {
    "method default, class reached from the body": Row(
        "class Net:\n    def __init__(self, n_in=16, hidden=K):\n        self.hidden = hidden\n",
        "Net().hidden + x", why="+#   __init__.<default hidden> = 3"),
    "method default, class reached only from an argument": Row(
        "class Net:\n    def forward(self, x, scale=K):\n        return x * scale\n",
        "obj.forward(x)", args="(Net(), 3)"),
    "keyword-only method default": Row(
        "class Net:\n    def forward(self, x, *, scale=K):\n        return x * scale\n",
        "Net().forward(x)", why="+#   forward.<default scale> = 3"),
    "staticmethod default": Row(
        "class Net:\n    @staticmethod\n    def scale(x, k=K):\n        return x * k\n",
        "Net.scale(x)"),
    "classmethod default": Row(
        "class Net:\n    @classmethod\n    def make(cls, k=K):\n        return k\n",
        "Net.make() + x"),
    "default of a method wrapped with functools.wraps": Row(
        "import functools\n\ndef logged(fn):\n    @functools.wraps(fn)\n    def wrapper(*a, **kw):\n"
        "        return fn(*a, **kw)\n    return wrapper\n\n"
        "class Net:\n    @logged\n    def forward(self, x, scale=K):\n        return x * scale\n",
        "Net().forward(x)"),
    "default of a lambda held as a class attribute": Row(
        "class Net:\n    act = lambda self, x, k=K: x * k\n", "Net().act(x)"),
    "default of a method of a nested class": Row(
        "class Outer:\n    class Inner:\n        def get(self, k=K):\n            return k\n",
        "Outer.Inner().get() + x"),
    "method default that is a function (its code counts)": Row(
        "def act(v):\n    return v + K\n\nclass Net:\n    def __init__(self, act=act):\n        self.act = act\n",
        "Net().act(x)"),
    "method default that is an instance of a user class": Row(
        "class Cfg:\n    def __init__(self, k):\n        self.k = k\n\n"
        "class Net:\n    def __init__(self, cfg=Cfg(K)):\n        self.cfg = cfg\n",
        "Net().cfg.k + x"),
    "class attribute": Row("class Net:\n    scale = K\n", "Net.scale * x"),
    "functools.partialmethod class attribute": Row(
        "import functools\n\ndef mul(self, a, b):\n    return a * b\n\n"
        "class Net:\n    scaled = functools.partialmethod(mul, K)\n", "Net().scaled(x)"),
    "dataclass field default": Row(
        "import dataclasses\n\n@dataclasses.dataclass\nclass Cfg:\n    lr: int = K\n", "Cfg().lr + x"),
    "dataclass default_factory (a partial holding the value)": Row(
        "import dataclasses, functools\n\n@dataclasses.dataclass\nclass Cfg:\n"
        "    layers: list = dataclasses.field(default_factory=functools.partial(list, (K,)))\n",
        "Cfg().layers[0] + x"),
    "dataclass default_factory (a lambda reading the constant)": Row(
        "import dataclasses\n\n@dataclasses.dataclass\nclass Cfg:\n"
        "    layers: list = dataclasses.field(default_factory=lambda: [K])\n",
        "Cfg().layers[0] + x"),
    "typing.NamedTuple field default": Row(
        "from typing import NamedTuple\n\nclass P(NamedTuple):\n    a: int = K\n", "P().a + x"),
    "attrs field default": Row(
        "import attrs\n\n@attrs.define\nclass C:\n    a: int = K\n\n    def twice(self):\n        return 2 * self.a\n",
        "C().twice() + x"),
    "Enum member value": Row(
        "import enum\n\nclass Mode(enum.Enum):\n    A = K\n", "Mode.A.value + x"),
    "functools.partial arguments": Row(
        "import functools, operator\n\nscale = functools.partial(operator.mul, K)\n", "scale(x)"),
    "function default": Row("def helper(x, k=K):\n    return x * k\n", "helper(x)"),
    "function keyword-only default": Row("def helper(x, *, k=K):\n    return x * k\n", "helper(x)"),
    "decorator arguments captured in a closure": Row(
        "import functools\n\ndef times(n):\n    def deco(fn):\n        @functools.wraps(fn)\n"
        "        def wrapper(*a):\n            return fn(*a) * n\n        return wrapper\n    return deco\n\n"
        "@times(K)\ndef helper(x):\n    return x\n", "helper(x)"),
    "decorator arguments on a method": Row(
        "def times(n):\n    def deco(fn):\n        def wrapper(*a):\n            return fn(*a) * n\n"
        "        return wrapper\n    return deco\n\n"
        "class Net:\n    @times(K)\n    def forward(self, x):\n        return x\n", "Net().forward(x)"),
    # the issue's own report: a real LightningModule whose __init__ default is a module constant
    "LightningModule __init__ default": Row(
        "import lightning as L\nimport torch\n\n"
        "class LitReg(L.LightningModule):\n    def __init__(self, n_in=4, hidden=K):\n        super().__init__()\n"
        "        self.net = torch.nn.Linear(n_in, hidden)\n",
        "LitReg().net.out_features + x", why="LitReg"),
}


def _module(name: str, row: Row, k: int) -> str:
    return (f"K = {k}\n\n{row.defs}\n\nfrom memolab import memo\n\n\n@memo\ndef f(*a):\n"
            f"    open('runs-{name}.log', 'a').write('x\\n')\n"
            f"    obj, x = (a[0], a[1]) if len(a) == 2 else (None, a[0])\n"
            f"    return {row.body}\n\n\nARGS = {row.args}\n")


NAMES = {name: f"r{i:02d}" for i, name in enumerate(ROWS)}

RUN = """
import importlib, json, sys
out = {}
for mod in sys.argv[1:]:
    m = importlib.import_module(mod)
    ex = m.f.explain(*m.ARGS)
    value = m.f(*m.ARGS)
    out[mod] = {"hit": ex.hit, "value": value, "explain": str(ex)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    """The three runs of every row: before the edit, unchanged, after ``K = 2`` -> ``K = 3``."""
    project = Project(tmp_path_factory.mktemp("defs") / "proj")
    project.write("run.py", RUN)
    for name, row in ROWS.items():
        project.write(f"{NAMES[name]}.py", _module(NAMES[name], row, 2))
    mods = list(NAMES.values())
    first = project.run_json("run.py", *mods)
    again = project.run_json("run.py", *mods)
    for name, row in ROWS.items():
        project.write(f"{NAMES[name]}.py", _module(NAMES[name], row, 3))
    after = project.run_json("run.py", *mods)
    runs = {m: len((project.root / f"runs-{m}.log").read_text().splitlines()) for m in mods}
    return first, again, after, runs


@pytest.mark.parametrize("name", list(ROWS))
def test_editing_a_value_captured_at_definition_time_is_a_miss_in_a_fresh_process(phases, name):
    first, again, after, runs = phases
    m = NAMES[name]
    assert not first[m]["hit"]
    assert again[m]["hit"], f"unchanged source missed in a new process:\n{again[m]['explain']}"
    assert again[m]["value"] == first[m]["value"]
    assert not after[m]["hit"], f"{name}: stale result {after[m]['value']!r} after K = 2 -> 3"
    assert after[m]["value"] != first[m]["value"]
    assert runs[m] == 2
    why = ROWS[name].why
    if why:
        assert why in after[m]["explain"], after[m]["explain"]


def test_an_edit_elsewhere_in_the_file_keeps_method_defaults_a_hit(project):
    """The control: defaults join the key by value, so a sibling edit that leaves them equal is a hit."""
    row = ROWS["method default, class reached from the body"]
    project.write("run.py", RUN)
    project.write("r.py", _module("r", row, 2))
    assert not project.run_json("run.py", "r")["r"]["hit"]
    project.write("r.py", _module("r", row, 2) + "\n\ndef unrelated():\n    return K + 1\n")
    out = project.run_json("run.py", "r")["r"]
    assert out["hit"], out["explain"]


ATTRS_REBIND = """
import json
import attrs
from memolab import memo

def helper(v):
    return v + 1

@attrs.define
class C:
    a: int = 1

    def twice(self):
        return helper(self.a)

@memo
def f(x):
    return C().twice() + x

first = f(1)
helper = lambda v: v + 100  # a notebook cell redefining the helper
ex = f.explain(1)
print(json.dumps({"first": first, "hit": ex.hit, "after": f(1)}))
"""


def test_a_helper_rebound_in_its_module_is_seen_by_an_attrs_class_in_a_fresh_process(project):
    """attrs runs its generated methods with a copy of the module's globals: a name the
    class's own methods read must be watched in the module, not in that copy."""
    project.write("nb.py", ATTRS_REBIND)
    out = project.run_json("nb.py")
    assert out == {"first": 3, "hit": False, "after": 102}, out
