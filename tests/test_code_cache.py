"""Code analyses reused across processes: verified per code object, never a stale digest."""
from __future__ import annotations

import importlib
import sys

from memolab import codegraph
from memolab.codegraph import code_cache

SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import helpers
from memolab import codegraph
from memolab.codegraph import code_cache
cv = codegraph.function_code(helpers.train)
print(json.dumps({{"digest": cv.digest, "stats": code_cache.stats}}))
"""

HELPERS = """
SCALE = 2

def prep(x):
    return [v * SCALE for v in x]

def train(x):
    return sum(prep(x)) + {n}
"""


def test_a_second_process_reuses_the_analyses_and_gets_the_same_digest(project, tmp_path):
    env = {"MEMOLAB_CODE_CACHE": str(tmp_path / "cc")}
    project.write("helpers.py", HELPERS.format(n=1))
    project.write("run.py", SCRIPT.format(root=str(project.root)))
    first = project.run_json("run.py", env=env)
    second = project.run_json("run.py", env=env)
    off = project.run_json("run.py", env={"MEMOLAB_CODE_CACHE": "off"})
    assert first["stats"]["hit"] == 0 and first["stats"]["miss"] >= 2
    assert second["stats"]["hit"] >= 2 and second["stats"]["miss"] == 0
    assert first["digest"] == second["digest"] == off["digest"]
    project.write("helpers.py", HELPERS.format(n=2))  # an edit: the file's entries no longer apply
    third = project.run_json("run.py", env=env)
    assert third["digest"] != first["digest"] and third["stats"]["hit"] == 0
    assert third["digest"] == project.run_json("run.py", env={"MEMOLAB_CODE_CACHE": "off"})["digest"]


def test_a_process_running_old_code_never_takes_the_new_codes_analysis(project, tmp_path, monkeypatch):
    """This process imported v1; the file is then edited and another process
    analyses (and caches) v2 under the file's new stat. Our v1 code objects
    have another fingerprint: analysed afresh, digest of v1."""
    monkeypatch.setenv("MEMOLAB_CODE_CACHE", str(tmp_path / "cc"))
    code_cache.clear()
    project.write("helpers.py", HELPERS.format(n=1))
    monkeypatch.syspath_prepend(str(project.root))
    sys.modules.pop("helpers", None)
    helpers = importlib.import_module("helpers")
    try:
        project.write("helpers.py", HELPERS.format(n=2))
        project.write("run.py", SCRIPT.format(root=str(project.root)))
        v2 = project.run_json("run.py", env={"MEMOLAB_CODE_CACHE": str(tmp_path / "cc")})
        codegraph.clear_caches()
        ours = codegraph.function_code(helpers.train)
        assert ours.digest != v2["digest"]
        # prep is the same code in both versions (reused, rightly); train is not (analysed afresh)
        assert code_cache.stats == {"hit": 1, "miss": 1}
        monkeypatch.setenv("MEMOLAB_CODE_CACHE", "off")
        code_cache.clear()
        codegraph.clear_caches()
        assert codegraph.function_code(helpers.train).digest == ours.digest
    finally:
        sys.modules.pop("helpers", None)
        code_cache.clear()
        codegraph.clear_caches()


def test_fingerprint_sees_every_field_the_analysis_reads():
    def a(x):
        return x + 1

    def b(x):
        return x + 2

    def c(y):
        return y + 1

    def d(x):
        return {"k", "j"} and x + 1

    fps = {code_cache.fingerprint(f.__code__) for f in (a, b, c, d)}
    assert len(fps) == 4
    assert code_cache.fingerprint(a.__code__) == code_cache.fingerprint(a.__code__)


def test_a_fingerprint_does_not_depend_on_who_else_holds_the_constants():
    """marshal's format 3+ writes back-references by reference count: holding one more reference
    to a constant changed the bytes, so a long-lived process (a test worker) missed the cache."""
    ns: dict = {}
    exec(compile("def f(x):\n    return (x, 'a constant string', 1.5, (1, 2))\n", "m.py", "exec"), ns)
    code = ns["f"].__code__
    before = code_cache.fingerprint(code)
    held = [list(code.co_consts), list(code.co_names)]  # what other objects of a busy process do
    assert code_cache.fingerprint(code) == before and held
