"""The repeat check of a code digest: one stamp for the whole graph (issue 14).

A repeat call must not check the graph's classes one by one (that grew with the
number of classes: 75 ns each). These tests count the work a repeat call does,
not its time, and show that every kind of class patch still leaves the quiet
path and changes the digest, in this process and in a fresh one.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memolab import codegraph
from memolab.codegraph import dictversion

pytestmark = pytest.mark.skipif(dictversion.tag_view({}) is None,
                                reason="dict version tags are not readable on this Python: every check runs")


def classes_src(n: int) -> str:
    """A module whose ``f`` reaches ``n`` classes: a base and ``n - 1`` subclasses with a class attribute."""
    out = ["class Base:\n    def scale(self, x):\n        return x * 2\n"]
    out += [f"class M{j}(Base):\n    factor = {j}\n\n    def forward(self, x):\n        return self.scale(x) * self.factor\n"
            for j in range(1, n)]
    out.append("def f(x):\n    return " + " + ".join(f"M{j}().forward(x)" for j in range(1, n)) + "\n")
    return "\n".join(out)


def load(tmp_path: Path, name: str, src: str):
    ns: dict = {"__name__": name}
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    exec(compile(src, str(path), "exec"), ns)
    return ns


class Counter:
    """Counts the per-class checks and the repeat calls that took the one-stamp path."""

    def __init__(self, monkeypatch) -> None:
        self.class_checks = 0
        self.quiet = 0
        unchanged, quiet = codegraph._ClassCheck.unchanged, codegraph._Root._current_quiet
        quiet_first = codegraph._Root.quiet

        def counted_unchanged(cc):
            self.class_checks += 1
            return unchanged(cc)

        def counted_quiet(root):
            self.quiet += 1
            return quiet(root)

        def counted_quiet_first(root):  # (``Root.quiet``, asked first, makes the same checks itself)
            cv = quiet_first(root)
            self.quiet += cv is not None
            return cv

        monkeypatch.setattr(codegraph._ClassCheck, "unchanged", counted_unchanged)
        monkeypatch.setattr(codegraph._Root, "_current_quiet", counted_quiet)
        monkeypatch.setattr(codegraph._Root, "quiet", counted_quiet_first)


@pytest.mark.parametrize("n", [5, 300])
def test_a_repeat_call_checks_no_class_one_by_one(tmp_path, monkeypatch, n):
    ns = load(tmp_path, f"cg_rep{n}", classes_src(n))
    d0 = codegraph.function_code(ns["f"]).digest
    graph = codegraph._function_roots[ns["f"]].graph
    assert len(graph.class_checks) == n  # every class is in the graph...
    assert codegraph.function_code(ns["f"]).digest == d0  # the second check arms the tags (_Root._arm)
    count = Counter(monkeypatch)
    for _ in range(3):
        assert codegraph.function_code(ns["f"]).digest == d0
    assert (count.class_checks, count.quiet) == (0, 3)  # ...and none is checked on its own


def test_a_write_to_one_class_leaves_the_quiet_path_once(tmp_path, monkeypatch):
    ns = load(tmp_path, "cg_rep_write", classes_src(20))
    d0 = codegraph.function_code(ns["f"]).digest
    assert codegraph.function_code(ns["f"]).digest == d0  # armed (_Root._arm)
    count = Counter(monkeypatch)
    ns["M7"].factor = 70
    d1 = codegraph.function_code(ns["f"]).digest
    assert d1 != d0 and count.quiet == 0
    # the stale graph stops at the first changed class; the rebuilt one checks all once
    assert count.class_checks <= 2 * 20
    assert codegraph.function_code(ns["f"]).digest == d1  # the rebuilt graph's second check: armed, all once
    count.class_checks = 0
    assert codegraph.function_code(ns["f"]).digest == d1  # the rebuilt graph is quiet again
    assert codegraph.function_code(ns["f"]).digest == d1
    assert count.class_checks == 0 and count.quiet >= 1
    # written, but back to the same object: every class checked once, nothing rebuilt
    ns["M7"].factor = 71
    ns["M7"].factor = 70
    assert codegraph.function_code(ns["f"]).digest == d1
    assert count.class_checks == 20
    assert codegraph.function_code(ns["f"]).digest == d1 and count.class_checks == 20


def test_a_function_reading_a_mutable_global_rehashes_it_every_call(tmp_path):
    # the stamp only covers namespaces whose values are immutable: a list mutated in place
    # writes no dict, so the quiet path must not serve it
    ns = load(tmp_path, "cg_rep_mut", "CFG = [1, 2]\n\ndef f(x):\n    return x * CFG[0]\n")
    d0 = codegraph.function_code(ns["f"]).digest
    assert codegraph.function_code(ns["f"]).digest == d0
    ns["CFG"][0] = 5
    assert codegraph.function_code(ns["f"]).digest != d0


PATCHES = {
    "class attribute rebound": "mod.M2.factor = 20",
    "method rebound": "mod.M2.forward = lambda self, x: x",
    "method set with setattr": "setattr(mod.M2, 'forward', lambda self, x: -x)",
    "class attribute deleted": "del mod.M2.factor",
    "attribute added": "mod.M2.extra = 1",
    "base class method rebound": "mod.Base.scale = lambda self, x: x * 3",
    "base class attribute added": "mod.Base.factor = 9",
    "monkeypatch.setattr": "import _pytest.monkeypatch as mp; mp.MonkeyPatch().setattr(mod.M1, 'forward', lambda s, x: 0)",
    "unittest.mock.patch.object": "import unittest.mock as um; um.patch.object(mod.Base, 'scale', lambda s, x: 0).start()",
    "module global rebound": "mod.M3 = mod.M2",
}


def test_every_kind_of_class_patch_changes_the_digest_in_a_fresh_process(tmp_path):
    (tmp_path / "cg_fresh.py").write_text(classes_src(6))
    prog = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from memolab import codegraph
        patches = json.loads(sys.argv[1])
        out = {{}}
        for label, stmt in patches.items():
            codegraph.clear_caches()
            sys.modules.pop("cg_fresh", None)
            import cg_fresh as mod
            d0 = codegraph.function_code(mod.f).digest
            quiet = codegraph.function_code(mod.f).digest == d0 and codegraph._function_roots[mod.f].stamp is not None
            exec(stmt)
            out[label] = [quiet, codegraph.function_code(mod.f).digest != d0]
        print(json.dumps(out))
        """)
    env = {"PYTHONPATH": str(Path(codegraph.__file__).parents[2]), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", prog, json.dumps(PATCHES)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out == {label: [True, True] for label in PATCHES}


def test_a_process_whose_only_call_is_a_hit_reads_no_version_tag(project):
    """Tags (and the ``_ctypes`` load they need) start at a graph's second check;
    a rebinding between the first and second call is still seen."""
    project.write("job.py", """
        import json, sys
        from memolab import memo, codegraph

        K = 2

        @memo
        def f(x):
            return x * K

        out = {"first": f(1), "ctypes_after_first": "_ctypes" in sys.modules}
        K = 3
        out["second"] = f(1)  # the graph's second check arms it, with a full check that sees K
        out["armed"] = codegraph._function_roots[f.fn].armed
        K = 4
        out["third"] = f(1)  # and the tags see this one
        print(json.dumps(out))
    """)
    for _ in range(2):  # a miss, then a hit of the first call
        out = project.run_json("job.py")
        assert out == {"first": 2, "ctypes_after_first": False, "second": 3, "armed": True, "third": 4}
