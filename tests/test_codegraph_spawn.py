"""A script's memoized functions key the same in the parent and in its spawned children.

multiprocessing's ``spawn`` and ``forkserver`` (and the pools of Dask, Ray and
``ProcessPoolExecutor`` built on them) re-run the parent's script in each child
as module ``__mp_main__``, with the ``if __name__ == "__main__":`` block skipped.
The key must not see that name (else parent and children never share a result),
yet every staleness rule still holds: an edit misses, and a global that only the
parent's guarded block sets is different state in the child, so its key differs.

Each test runs real scripts in fresh interpreters; ``f`` appends "parent" or
"child" to ``runs.log``, so the log says who computed and who hit.
"""
from __future__ import annotations

import textwrap

import pytest

pytestmark = pytest.mark.slow

JOB = """
import json, multiprocessing as mp, sys
from memolab import memo

SCALE = {scale}
{guard_global}

class Cfg:  # an argument of the script's own class: its name and code join the key
    def __init__(self, k):
        self.k = k

def helper(x):
    return x * SCALE

@memo
def f(x, cfg=Cfg(1)):
    open("runs.log", "a").write(("parent" if mp.parent_process() is None else "child") + "\\n")
    return helper(x)

def in_child(x):
    return f(x)

if __name__ == "__main__":
    {guard_body}
    method, order, x = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = mp.get_context(method)
    with ctx.Pool(1) as pool:
        if order == "parent-first":
            out = [f(x), pool.apply(in_child, (x,))]
        else:
            out = [pool.apply(in_child, (x,)), f(x)]
    print(json.dumps(out))
"""


def job(scale: int = 3, guard_body: str = "pass", guard_global: str = "") -> str:
    return JOB.format(scale=scale, guard_body=guard_body, guard_global=guard_global)


def _log(project) -> list:
    p = project.root / "runs.log"
    return p.read_text().split() if p.exists() else []


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_parent_and_spawned_children_share_results_and_an_edit_still_misses(project, method):
    project.write("job.py", job())
    # the parent computes, the child hits
    assert project.run_json("job.py", method, "parent-first", "1") == [3, 3]
    assert _log(project) == ["parent"]
    # the child computes, the parent hits
    assert project.run_json("job.py", method, "child-first", "2") == [6, 6]
    assert _log(project) == ["parent", "child"]
    # a new program run hits everywhere
    assert project.run_json("job.py", method, "child-first", "1") == [3, 3]
    assert len(_log(project)) == 2
    # editing a global the function reads: a miss (computed once, then shared)
    project.write("job.py", job(scale=5))
    assert project.run_json("job.py", method, "child-first", "1") == [5, 5]
    assert _log(project) == ["parent", "child", "child"]
    # editing a helper it calls: a miss too
    project.write("job.py", job(scale=5).replace("return x * SCALE", "return x * SCALE + 1"))
    assert project.run_json("job.py", method, "parent-first", "1") == [6, 6]
    assert _log(project)[3:] == ["parent"]


def test_a_global_only_the_main_guard_sets_keys_apart_in_the_child(project):
    # SCALE is 3 at module level but 7 in the parent's guarded block: the child
    # really computes with 3, so it must not be served the parent's 7s.
    project.write("job.py", job(guard_body="SCALE = 7"))
    assert project.run_json("job.py", "spawn", "parent-first", "1") == [7, 3]
    assert _log(project) == ["parent", "child"]
    assert project.run_json("job.py", "spawn", "child-first", "1") == [3, 7]
    assert len(_log(project)) == 2  # both hit their own keys in a new run


def test_a_global_bound_only_under_the_guard_is_unbound_in_the_child(project):
    # OFFSET exists only in the parent: in the child ``f`` would raise NameError;
    # it must never hit the parent's result instead.
    text = job(guard_body="OFFSET = 100").replace("return x * SCALE", "return x * SCALE + OFFSET")
    project.write("job.py", text)
    cp = project.run("job.py", "spawn", "parent-first", "1", check=False)
    assert cp.returncode != 0 and "NameError" in cp.stderr, cp.stderr
    assert _log(project) == ["parent", "child"]


def test_python_dash_m_package_module_and_runpy_key_like_the_script(project):
    project.write("pkg/__init__.py", "")
    project.write("pkg/job.py", job())
    assert project.run_json("-m", "pkg.job", "spawn", "parent-first", "1") == [3, 3]
    assert _log(project) == ["parent"]
    # the same code launched through runpy as __main__: the same keys
    project.write("launch.py", textwrap.dedent("""
        import runpy, sys
        runpy.run_module("pkg.job", run_name="__main__", alter_sys=True)
    """))
    assert project.run_json("launch.py", "spawn", "child-first", "1") == [3, 3]
    assert project.run_json("-m", "pkg.job", "spawn", "child-first", "2") == [6, 6]
    assert _log(project) == ["parent", "child"]
    # and an edit of the module still misses
    project.write("pkg/job.py", job(scale=4))
    assert project.run_json("-m", "pkg.job", "spawn", "parent-first", "1") == [4, 4]
    assert _log(project)[2:] == ["parent"]


def test_a_function_that_reads_dunder_name_keys_apart_in_the_child(project):
    # ``__name__`` is a global like any other, read by value: it *is* different in
    # the child ("__mp_main__"), so sharing would hand the child a wrong value.
    project.write("job.py", job().replace("return helper(x)", "return [helper(x), __name__]"))
    assert project.run_json("job.py", "spawn", "parent-first", "1") == [[3, "__main__"], [3, "__mp_main__"]]
    assert _log(project) == ["parent", "child"]


RESULT = """
import json, sys
from memolab import memo

class Box:
    def __init__(self, v):
        self.v = v

@memo
def f(x):
    open("runs.log", "a").write("run\\n")
    return Box(x * 2)

def in_child(x):
    return f(x).v

if __name__ == "__main__":
    if sys.argv[1] == "pool":
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(1) as pool:
            print(json.dumps(pool.apply(in_child, (4,))))
    else:  # a program that never imports multiprocessing (no ``__mp_main__`` alias)
        print(json.dumps(f(4).v))
"""


def test_a_result_of_the_scripts_own_class_computed_in_a_child_loads_in_a_plain_run(project):
    project.write("res.py", RESULT)
    assert project.run_json("res.py", "pool") == 8
    assert project.run_json("res.py", "plain") == 8
    assert _log(project) == ["run"]
