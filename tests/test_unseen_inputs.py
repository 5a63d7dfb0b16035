"""Inputs a key does not see unless told (issue 34, items 3 and 4; docs/cache-rules.md,
"What is not in a key"): torch's global switches, environment variables, and a library
decorator that hides the function it runs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import memolab
from conftest import require

SRC = str(Path(__file__).resolve().parents[1] / "src")


# -- torch's switches --------------------------------------------------------------------


SWITCHES = r'''
import json, sys
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()

@memolab.memo
def make(n):
    calls.append(n)
    import torch
    x = torch.linspace(0, 1, n)
    return [str(x.dtype), float((x * 3).sum())]

if sys.argv[1] != "untouched":
    import torch
    if sys.argv[1] == "float64":
        torch.set_default_dtype(torch.float64)
    elif sys.argv[1] == "deterministic":
        torch.use_deterministic_algorithms(True)
    elif sys.argv[1] == "bf16 matmul":
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    elif sys.argv[1] == "defaults set explicitly":
        torch.set_default_dtype(torch.float32)
        torch.set_float32_matmul_precision("highest")
print(json.dumps({"value": make(5), "calls": len(calls), "key": make.key(5)[2]}))
'''


def test_torch_switches_that_change_results_join_the_key(project):
    require("torch")
    project.write("sw.py", SWITCHES)
    plain = project.run_json("sw.py", "untouched")
    assert plain["value"][0] == "torch.float32"
    f64 = project.run_json("sw.py", "float64")
    assert f64["calls"] == 1 and f64["value"][0] == "torch.float64"  # not the float32 result
    assert project.run_json("sw.py", "deterministic")["calls"] == 1
    assert project.run_json("sw.py", "bf16 matmul")["calls"] == 1
    # every switch at its default: the key is the same whether or not torch is imported
    same = project.run_json("sw.py", "defaults set explicitly")
    assert same["calls"] == 0 and same["key"] == plain["key"]
    again = project.run_json("sw.py", "float64")
    assert again["calls"] == 0 and again["value"] == f64["value"]


@pytest.mark.preload("torch", "numpy")  # why.py imports torch before memolab: forked runs (tests/zygote.py); not
# the test above, whose point is a key the same whether or not torch is imported
def test_explain_names_the_switch(project):
    require("torch")
    project.write("why.py", """
        import json, torch, memolab

        @memolab.memo
        def make(n):
            return torch.ones(n).sum().item()

        make(3)
        torch.set_default_dtype(torch.float64)
        print(json.dumps(str(make.explain(3))))
    """)
    text = project.run_json("why.py")
    assert "<torch switches>" in text and "float64" in text, text


# -- environment variables ------------------------------------------------------------------


ENV = r'''
import json, os, sys, warnings
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()

@memolab.memo
def scaled(x):
    calls.append(x)
    return x * float(os.environ.get("SCALE", "1"))

@memolab.memo(env=["SCALE"])
def declared(x):
    calls.append(x)
    return x * float(os.getenv("SCALE", "1"))

@memolab.memo
def copies(x):
    calls.append(x)
    return len(dict(os.environ)) > 0 and x  # a copy of the whole environment reads no variable by name

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = {"scaled": scaled(2.0), "declared": declared(2.0), "copies": copies(1)}
    out["again"] = scaled(3.0)
out["warnings"] = [str(x.message) for x in w]
out["calls"] = len(calls)
print(json.dumps(out))
'''


def test_an_environment_variable_read_by_name_is_warned_about_or_keyed(project):
    project.write("env.py", ENV)
    one = project.run_json("env.py", env={"SCALE": "1"})
    warned = [m for m in one["warnings"] if "environment variable SCALE" in m]
    assert len(warned) == 1 and "scaled" in warned[0] and "env.py line" in warned[0]
    assert "@memo(env=['SCALE'])" in warned[0]
    assert not any("declared" in m or "copies" in m for m in one["warnings"])
    three = project.run_json("env.py", env={"SCALE": "3"})
    assert three["declared"] == 6.0  # declared: keyed by its value
    assert three["scaled"] == 2.0  # not declared: the warned-about stale value, by design


def test_env_must_name_variables():
    with pytest.raises(TypeError, match="env"):
        memolab.memo(env="SCALE")(lambda x: x)


# -- a library decorator without functools.wraps -----------------------------------------------


LIB = '''
import functools

def deco(fn):
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

def opaque(fn):
    box = [fn]  # the function hidden in an object: nothing memolab can follow
    def wrapper(*args):
        return box[0](*args)
    return wrapper
'''


@pytest.fixture
def lib_project(project, tmp_path):
    site = tmp_path / "venv" / "site-packages"  # where a library lives: third-party code
    (site / "fancylib").mkdir(parents=True)
    (site / "fancylib" / "__init__.py").write_text(LIB)
    return project, site


def _run(project, site, script, *args):
    env = {"PYTHONPATH": os.pathsep.join([SRC, str(project.root), str(site)])}
    return project.run_json(script, *args, env=env)


def test_functions_under_a_library_decorator_without_wraps_are_told_apart(lib_project):
    project, site = lib_project
    body = """
        import json, sys
        import fancylib, memolab

        class Calls(list):
            pass

        memolab.register_opaque(Calls)
        calls = Calls()

        @memolab.memo
        @fancylib.deco
        def double(x):
            calls.append("double")
            return 2 * x

        @memolab.memo
        @fancylib.deco
        def triple(x):
            calls.append("triple")
            return 3 * x

        @fancylib.deco
        def helper(x):
            return x + FACTOR

        FACTOR = 1

        @memolab.memo
        def uses_helper(x):
            calls.append("uses_helper")
            return helper(x)

        out = {"double": double(5), "triple": triple(5), "helper": uses_helper(1),
               "symbols": [double.symbol, triple.symbol]}
        if sys.argv[1:] == ["clear"]:
            double.clear()
        out["calls"] = list(calls)
        print(json.dumps(out))
    """
    project.write("app.py", body)
    first = _run(project, site, "app.py")
    assert first["double"] == 10 and first["triple"] == 15  # triple(5) was double's 10
    assert first["symbols"] == ["__main__:double", "__main__:triple"]
    assert _run(project, site, "app.py", "clear")["calls"] == []  # every call a hit; double forgotten
    again = _run(project, site, "app.py")
    assert again["calls"] == ["double"] and again["triple"] == 15  # clearing double kept triple
    project.write("app.py", body.replace("return 2 * x", "return 20 * x").replace("return x + FACTOR",
                                                                                   "return x + 2 * FACTOR"))
    edited = _run(project, site, "app.py")
    assert edited["double"] == 100 and edited["helper"] == 3  # both edits seen through the wrappers
    assert edited["calls"] == ["double", "uses_helper"]


def test_a_wrapper_hiding_its_function_is_refused_not_shared(lib_project):
    project, site = lib_project
    project.write("hidden.py", """
        import json
        import fancylib, memolab

        @memolab.memo
        @fancylib.opaque
        def double(x):
            return 2 * x

        try:
            @memolab.memo
            @fancylib.opaque
            def triple(x):
                return 3 * x
            out = {"triple": triple(5)}
        except TypeError as e:
            out = {"error": str(e)}
        print(json.dumps(out))
    """)
    out = _run(project, site, "hidden.py")
    assert "error" in out and "functools.wraps" in out["error"], out
