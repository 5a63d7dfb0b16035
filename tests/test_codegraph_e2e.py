"""End to end: the code digest of a key, across fresh processes and one edit.

Each case is a small project on disk. ``run.py`` imports ``f`` and ``ARGS``
from ``main.py``, asks ``f.explain(*ARGS)`` whether the call would hit, calls
it, and prints JSON. The body of ``f`` appends to ``runs.log``, so a hit is
proven twice: explain says so *and* the body did not run. Every case runs
three times: before the edit (miss), again unchanged (hit: the key is stable
across processes, so a later miss can only come from the edit), and after the
edit (the expected outcome). For misses the value must reflect the edit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

pytestmark = pytest.mark.slow

RUN = """
import json, sys
sys.path.insert(0, "env/lib/site-packages")
from main import f, ARGS
ex = f.explain(*ARGS)
value = f(*ARGS)
print(json.dumps({"hit": ex.hit, "value": value, "explain": str(ex)}))
"""

LOG = 'open("runs.log", "a").write("x\\n")'


def main_py(body: str, imports: str = "", args: str = "(3,)") -> str:
    """main.py: ``f`` runs ``body`` (an expression of ``x``) and logs each real run."""
    return f"""
from memolab import memo
{imports}

@memo
def f(x):
    {LOG}
    return {body}

ARGS = {args}
"""


@dataclass
class Case:
    name: str
    files: dict[str, str]
    edit: dict[str, str]
    expect: str  # "hit" or "miss"
    #: a phrase the explanation of the miss must contain
    why: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: False where the edit changes what memolab must key on but not the result (a version bump)
    value_changes: bool = True


HELPERS = """
def normalize(x):
    return x * 2
"""

BASE = """
class Base:
    def scale(self):
        return 10

class Child(Base):
    def run(self, x):
        return x + self.scale()
"""

NET = """
class Net:
    def __init__(self, w):
        self.w = w

    def forward(self, x):
        return self.w * x
"""

TRAIN = """
from memolab import memo

@memo
def f(model, x):
    open("runs.log", "a").write("x\\n")
    return model.forward(x)
"""

FAKEPKG = "env/lib/site-packages/fakepkg/__init__.py"


def dist_info(version: str) -> dict[str, str]:
    d = f"env/lib/site-packages/fakepkg-{version}.dist-info"
    return {f"{d}/METADATA": f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n",
            f"{d}/top_level.txt": "fakepkg\n",
            f"{d}/RECORD": "fakepkg/__init__.py,,\n"}


CASES = [
    Case("helper body edit",
         {"helpers.py": HELPERS, "main.py": main_py("normalize(x)", "from helpers import normalize")},
         {"helpers.py": HELPERS.replace("x * 2", "x * 3")}, "miss", "`helpers:normalize` changed"),
    Case("comment and docstring edits anywhere",
         {"helpers.py": HELPERS, "main.py": main_py("normalize(x)", "from helpers import normalize")},
         {"helpers.py": '"""Module docs."""\n# a comment\n' + HELPERS.replace(
             "def normalize(x):", 'def normalize(x):  # why\n    """Doubles."""\n    # explain'),
          "main.py": main_py("normalize(x)  # the call", "# imports\nfrom helpers import normalize")}, "hit"),
    Case("reformatting",
         {"helpers.py": HELPERS, "main.py": main_py("normalize(x)", "from helpers import normalize")},
         {"helpers.py": "def normalize(\n    x,\n):\n    return (\n        x\n        *\n        2\n    )\n"}, "hit"),
    Case("unrelated function added to the module",
         {"helpers.py": HELPERS, "main.py": main_py("normalize(x)", "from helpers import normalize")},
         {"helpers.py": HELPERS + "\ndef unrelated(y):\n    return y - 1\n"}, "hit"),
    Case("imported constant changed",
         {"consts.py": "SCALE = 2\n", "main.py": main_py("x * SCALE", "from consts import SCALE")},
         {"consts.py": "SCALE = 5\n"}, "miss", "`main:SCALE` changed"),
    Case("runtime rebinding of a global",
         {"cfg.py": "FACTOR = 1\n",
          "main.py": main_py("x * cfg.FACTOR", "import cfg\ncfg.FACTOR = 2  # rebound at run time")},
         {"main.py": main_py("x * cfg.FACTOR", "import cfg\ncfg.FACTOR = 4  # rebound at run time")},
         "miss", "`cfg:FACTOR` changed"),
    Case("base-class method edit",
         {"models.py": BASE, "main.py": main_py("Child().run(x)", "from models import Child")},
         {"models.py": BASE.replace("return 10", "return 20")}, "miss", "`models:Base` changed"),
    Case("module.attr callee edit",
         {"pkg/__init__.py": "", "pkg/ops.py": "def double(x):\n    return 2 * x\n",
          "main.py": main_py("ops.double(x)", "import pkg.ops as ops")},
         {"pkg/ops.py": "def double(x):\n    return 2 * x + 1\n"}, "miss", "`pkg.ops:double` changed"),
    Case("dotted module.attr chain callee edit",
         {"pkg/__init__.py": "", "pkg/ops.py": "def double(x):\n    return 2 * x\n",
          "main.py": main_py("pkg.ops.double(x)", "import pkg.ops")},
         {"pkg/ops.py": "def double(x):\n    return 2 * x + 1\n"}, "miss", "`pkg.ops:double` changed"),
    Case("module.attr callee edit in a namespace package (no __init__.py)",
         {"nspkg/ops.py": "def double(x):\n    return 2 * x\n", "main.py": main_py("nspkg.ops.double(x)", "import nspkg.ops")},
         {"nspkg/ops.py": "def double(x):\n    return 2 * x + 1\n"}, "miss", "`nspkg.ops:double` changed"),
    Case("helper used only in a comprehension",
         {"helpers.py": HELPERS, "main.py": main_py("[normalize(i) for i in range(x)]", "from helpers import normalize")},
         {"helpers.py": HELPERS.replace("x * 2", "x * 3")}, "miss", "`helpers:normalize` changed"),
    Case("helper used only in a lambda",
         {"helpers.py": HELPERS, "main.py": main_py("(lambda v: normalize(v))(x)", "from helpers import normalize")},
         {"helpers.py": HELPERS.replace("x * 2", "x * 3")}, "miss", "`helpers:normalize` changed"),
    Case("helper used only in an inner def",
         {"helpers.py": HELPERS,
          "main.py": main_py("inner(x)", "from helpers import normalize").replace(
              "    return inner(x)", "    def inner(v):\n        return normalize(v)\n    return inner(x)")},
         {"helpers.py": HELPERS.replace("x * 2", "x * 3")}, "miss", "`helpers:normalize` changed"),
    Case("helper passed as a value, not called",
         {"helpers.py": HELPERS, "main.py": main_py("list(map(normalize, [x]))", "from helpers import normalize")},
         {"helpers.py": HELPERS.replace("x * 2", "x * 3")}, "miss", "`helpers:normalize` changed"),
    Case("relative-import helper",
         {"pkg/__init__.py": "", "pkg/util.py": "def g(x):\n    return x + 1\n",
          "pkg/core.py": "from . import util\nfrom .util import g\n\ndef run(x):\n    return util.g(x) + g(x)\n",
          "main.py": main_py("run(x)", "from pkg.core import run")},
         {"pkg/util.py": "def g(x):\n    return x + 100\n"}, "miss", "`pkg.util:g` changed"),
    Case("closure cell value changed",
         {"helpers.py": "def make_scaler(k):\n    def scale(x):\n        return x * k\n    return scale\n\n"
                        "scale = make_scaler(2)\n",
          "main.py": main_py("scale(x)", "from helpers import scale")},
         {"helpers.py": "def make_scaler(k):\n    def scale(x):\n        return x * k\n    return scale\n\n"
                        "scale = make_scaler(7)\n"},
         "miss", "<closure k>"),
    Case("user class of an argument edited",
         {"models.py": NET, "other.py": "def unrelated():\n    return 1\n",
          "main.py": TRAIN + "\nfrom models import Net\nARGS = (Net(2), 3)\n"},
         {"models.py": NET.replace("return self.w * x", "return self.w * x + 1")}, "miss", "new arguments: model"),
    Case("class of an argument untouched, a sibling file edited",
         {"models.py": NET, "other.py": "def unrelated():\n    return 1\n",
          "main.py": TRAIN + "\nfrom models import Net\nARGS = (Net(2), 3)\n"},
         {"other.py": "def unrelated():\n    return 2\n"}, "hit"),
    Case("enum and dataclass arguments are stable across processes; a sibling edit is a hit",
         {"kinds.py": "import enum, dataclasses\n\nclass Mode(enum.Enum):\n    A = 1\n    B = 2\n\n"
                      "@dataclasses.dataclass\nclass Cfg:\n    lr: float = 0.1\n",
          "other.py": "def unrelated():\n    return 1\n",
          "main.py": main_py("[x[0].value, x[1].lr]", "from kinds import Mode, Cfg", "((Mode.B, Cfg()),)")},
         {"other.py": "def unrelated():\n    return 2\n"}, "hit"),
    Case("package version change (minor) under version_sensitivity=minor",
         {FAKEPKG: "def op(x):\n    return x + 1\n", **dist_info("1.2.0"),
          "main.py": main_py("fakepkg.op(x)", "import fakepkg")},
         {**dist_info("1.3.0"), "env/lib/site-packages/fakepkg-1.2.0.dist-info/METADATA": ""},
         "miss", "fakepkg 1.2.0 -> 1.3.0", value_changes=False),
    Case("package patch release under version_sensitivity=minor",
         {FAKEPKG: "def op(x):\n    return x + 1\n", **dist_info("1.2.0"),
          "main.py": main_py("fakepkg.op(x)", "import fakepkg")},
         {**dist_info("1.2.9"), "env/lib/site-packages/fakepkg-1.2.0.dist-info/METADATA": ""}, "hit"),
    Case("package source edit without a version change is not tracked",
         {FAKEPKG: "def op(x):\n    return x + 1\n", **dist_info("1.2.0"),
          "main.py": main_py("fakepkg.op(x)", "import fakepkg")},
         {FAKEPKG: "def op(x):\n    return x + 2\n"}, "hit"),
    Case("package patch release under @memo(version_sensitivity='exact')",
         {FAKEPKG: "def op(x):\n    return x + 1\n", **dist_info("1.2.0"),
          "main.py": main_py("fakepkg.op(x)", "import fakepkg").replace("@memo", "@memo(version_sensitivity='exact')")},
         {**dist_info("1.2.9"), "env/lib/site-packages/fakepkg-1.2.0.dist-info/METADATA": ""},
         "miss", "fakepkg 1.2.0 -> 1.2.9", value_changes=False),
    Case("module reached through getattr with a computed name: the whole module counts",
         {"plugins.py": "def a(x):\n    return x + 1\n",
          "main.py": main_py("getattr(plugins, NAME)(x)", "import plugins\nNAME = 'a'")},
         {"plugins.py": "def a(x):\n    return x + 2\n"}, "miss", "`plugins:a` changed"),
    Case("module imported by a computed name, declared with deps=['plugins']",
         {"plugins.py": "def a(x):\n    return x + 1\n",
          "main.py": main_py("importlib.import_module(NAME).a(x)", "import importlib\nNAME = 'plugins'").replace(
              "@memo", "@memo(deps=['plugins'])")},
         {"plugins.py": "def a(x):\n    return x + 2\n"}, "miss", "`plugins:a` changed"),
    # the submodule is not imported yet when the key is computed: only the call imports it
    Case("submodule imported inside the function with `from pkg import sub`",
         {"pkg/__init__.py": "", "pkg/sub.py": "def a(x):\n    return x + 1\n",
          "main.py": main_py("sub.a(x)").replace("    return", "    from pkg import sub\n    return")},
         {"pkg/sub.py": "def a(x):\n    return x + 2\n"}, "miss"),
    Case("user module held in a module-level table",
         {"ops.py": "def a(x):\n    return x + 1\n",
          "main.py": main_py("MODS['ops'].a(x)", "import ops\nMODS = {'ops': ops}")},
         {"ops.py": "def a(x):\n    return x + 2\n"}, "miss"),
]


def _write_all(project, files: dict[str, str]) -> None:
    for rel, text in files.items():
        if rel.endswith("METADATA") and text == "":
            # removing a dist-info is how an upgrade replaces it
            import shutil

            shutil.rmtree(project.root / rel.rsplit("/", 1)[0])
            continue
        project.write(rel, text)


def _runs(project) -> int:
    p = project.root / "runs.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_one_edit(project, case: Case):
    _write_all(project, {"run.py": RUN, **case.files})
    first = project.run_json("run.py", env=case.env)
    assert not first["hit"] and _runs(project) == 1
    again = project.run_json("run.py", env=case.env)
    assert again["hit"], f"unchanged project missed in a new process:\n{again['explain']}"
    assert _runs(project) == 1 and again["value"] == first["value"]

    _write_all(project, case.edit)
    after = project.run_json("run.py", env=case.env)
    if case.expect == "hit":
        assert after["hit"], f"{case.name}: expected a hit, got\n{after['explain']}"
        assert _runs(project) == 1 and after["value"] == first["value"]
    else:
        assert not after["hit"], f"{case.name}: expected a miss (stale result {after['value']!r})"
        assert _runs(project) == 2
        if case.value_changes:
            assert after["value"] != first["value"], "the recomputed value should reflect the edit"
        if case.why:
            assert case.why in after["explain"], after["explain"]


def test_explain_shows_a_unified_diff_of_the_changed_helper(project):
    _write_all(project, {"run.py": RUN, "helpers.py": HELPERS,
                         "main.py": main_py("normalize(x)", "from helpers import normalize")})
    project.run_json("run.py")
    project.write("helpers.py", HELPERS.replace("x * 2", "x * 3"))
    text = project.run_json("run.py")["explain"]
    assert "`helpers:normalize` changed" in text
    assert "-    return x * 2" in text and "+    return x * 3" in text


# -- notebooks -------------------------------------------------------------------------

NOTEBOOK = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell

CELLS = json.loads(sys.argv[1])
shell = InteractiveShell.instance()
for cell in CELLS:
    r = shell.run_cell(cell)
    if not r.success:
        raise SystemExit(f"cell failed: {r.error_in_exec or r.error_before_exec!r}")
print(json.dumps(shell.user_ns["OUT"]))
"""

CELL_HELPER = "def helper(x):\n    return x * 2\n"
CELL_F = ("from memolab import memo\n\n@memo\ndef f(x):\n    open('runs.log', 'a').write('x\\n')\n"
          "    return helper(x) + 1\n")
CELL_RUN = "ex = f.explain(3)\nOUT = {'hit': ex.hit, 'value': f(3), 'explain': str(ex)}\n"


def _notebook(project, cells):
    return project.run_json("nb.py", json.dumps(cells))


def test_notebook_cells_hit_across_kernels_and_miss_after_editing_another_cells_helper(project):
    project.write("nb.py", NOTEBOOK)
    cells = [CELL_HELPER, CELL_F, CELL_RUN]
    first = _notebook(project, cells)
    assert not first["hit"] and first["value"] == 7
    # a new kernel, same cells (a comment added to one): hit
    again = _notebook(project, ["# tweak\n" + CELL_HELPER, CELL_F, CELL_RUN])
    assert again["hit"], again["explain"]
    assert _runs(project) == 1
    # edit the helper's cell: miss, and the explanation names the helper
    after = _notebook(project, [CELL_HELPER.replace("x * 2", "x * 5"), CELL_F, CELL_RUN])
    assert not after["hit"] and after["value"] == 16
    assert "helper` changed" in after["explain"], after["explain"]
    assert _runs(project) == 2


def test_notebook_redefining_a_helper_in_a_later_cell_invalidates_in_the_same_kernel(project):
    project.write("nb.py", NOTEBOOK)
    cells = [CELL_HELPER, CELL_F, "a = f(3)\n", "def helper(x):\n    return x * 10\n",
             "ex = f.explain(3)\nOUT = {'hit': ex.hit, 'value': [a, f(3)], 'explain': str(ex)}\n"]
    out = _notebook(project, cells)
    assert not out["hit"] and out["value"] == [7, 31]


def test_python_dash_c_hits_in_a_second_process_and_misses_after_an_edit(project):
    prog = ("import json\nfrom memolab import memo\nK = {k}\n@memo\ndef f(x):\n    open('runs.log','a').write('x\\n')\n"
            "    return x + K\nex = f.explain(1)\nprint(json.dumps({{'hit': ex.hit, 'value': f(1)}}))\n")
    assert project.run_json("-c", prog.format(k=1)) == {"hit": False, "value": 2}
    assert project.run_json("-c", prog.format(k=1)) == {"hit": True, "value": 2}
    assert project.run_json("-c", prog.format(k=5)) == {"hit": False, "value": 6}


def test_explain_names_a_changed_constant_with_its_old_and_new_value(project):
    _write_all(project, {"run.py": RUN, "consts.py": "SCALE = 2\n",
                         "main.py": main_py("x * SCALE", "from consts import SCALE")})
    project.run_json("run.py")
    project.write("consts.py", "SCALE = 5\n")
    text = project.run_json("run.py")["explain"]
    assert "`main:SCALE` changed" in text
    assert "-SCALE = 2" in text and "+SCALE = 5" in text
