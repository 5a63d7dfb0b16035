"""Issue 47 §1, §3, §4: a key counts what a call runs, not a name, and nothing that cannot change it.

Every test runs real scripts in fresh processes (a store shared between runs, code edited
between them) and compares each memoized answer with the un-memoized one. Each was stale or
crashed before: module hooks left out of a module's key, a memoized or ``lru_cache`` function
passed as an argument keyed by its name, a user singleton pickled by name keyed by that name,
ufuncs, regexes, parametrized and TorchScript modules refused, a script's memo refused by the
standard pickler, a restored patch crashing the next call, a warning-display hook joining
every key.
"""
from __future__ import annotations

import pytest

from conftest import require
from memolab import memo

_HOOKS = """
    import json, sys, torch
    import torch.nn.utils.parametrize as P
    from memolab import hashing, memo
    from memolab.inputs.implicit import parts

    @memo
    def predict(model, x):
        return model(x).tolist()

    def check(model, x):
        try:
            got = predict(model, x)
        except Exception as e:  # each row reports, so that one crash hides no other row
            return f"crashed: {type(e).__name__}: {e}"[:200]
        truth = predict.fn(model, x)
        return True if got == truth else f"stale: {got} != {truth}"

    torch.manual_seed(0)
    x = torch.ones(1, 3)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
    out = {"plain": check(model, x)}
    # a module without hooks keys byte for byte as the generic rule did before hooks counted
    enc = hashing.Encoder()
    enc.encode_object(model)
    out["hookless same bytes"] = enc.hexdigest() == hashing.hash_value(model)
    out["no global part"] = not [n for n, _ in parts(()) if "hooks" in n]
    STEER = 1.0
    h = model.register_forward_hook(lambda m, i, o: o + STEER)  # a steering vector
    out["forward hook"] = check(model, x)
    STEER = 2.0                                               # the hook's value changes
    out["hook value"] = check(model, x)
    h.remove()
    out["removed"] = check(model, x)
    h = model[0].register_forward_pre_hook(lambda m, i: (i[0] * 3,))  # an ablation on a submodule
    out["submodule pre-hook"] = check(model, x)
    h.remove()
    g = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: o * 2 if isinstance(m, torch.nn.Linear) else o)  # process-wide
    out["global hook"] = check(model, x)
    g.remove()
    out["global removed"] = check(model, x)

    class Sym(torch.nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).T

    lin = torch.nn.Linear(3, 3)
    P.register_parametrization(lin, "weight", Sym())
    out["parametrized"] = check(lin, torch.ones(1, 3))
    with torch.no_grad():
        lin.parametrizations.weight.original[0, 1] += 1
    out["parametrized changed"] = check(lin, torch.ones(1, 3))
    scripted = torch.jit.script(torch.nn.Linear(3, 2))
    out["scripted"] = check(scripted, x)
    with torch.no_grad():
        scripted.weight[0, 0] += 1
    out["scripted changed"] = check(scripted, x)
    out["runs"] = len(predict.evaluations())

    # a library method patched with a lambda and restored, then another patch: no call may fail
    import math

    @memo
    def root(x):
        return math.sqrt(x) + torch.nn.Linear(1, 1).weight.numel()

    def call(x):
        try:
            return root(x)
        except Exception as e:  # each row reports, so that one crash hides no other row
            return f"crashed: {type(e).__name__}: {e}"

    orig = torch.nn.Linear.forward
    torch.nn.Linear.forward = lambda self, x: orig(self, x)
    out["patch"] = call(4.0)
    torch.nn.Linear.forward = orig
    out["restored"] = call(4.0)
    math.sqrt = lambda x: x ** 0.5 + 1
    out["sqrt patched"] = call(4.0)
    print(json.dumps(out))
"""


@pytest.mark.preload("torch", "numpy")  # its script imports torch (numpy) before memolab: forked runs (tests/zygote.py)
def test_module_hooks_parametrizations_and_torchscript_in_fresh_processes(project):
    require("torch")
    project.write("hooks.py", _HOOKS)
    first = project.run_json("hooks.py")
    runs = first.pop("runs")
    patched = {k: first.pop(k) for k in ("patch", "restored", "sqrt patched")}
    assert patched == {"patch": 3.0, "restored": 3.0, "sqrt patched": 4.0}
    assert first == dict.fromkeys(first, True), first
    assert runs == 9  # plain, two hook values, the pre-hook, the global hook, 2 parametrized, 2 scripted
    second = project.run_json("hooks.py")  # a new process: every call a hit, every answer true
    assert second.pop("runs") == runs
    assert {k: second.pop(k) for k in patched} == patched
    assert second == dict.fromkeys(second, True), second


_STEPS = """
    import functools
    from memolab import memo

    K = 2

    @memo
    def step(x):
        return x * K

    @functools.lru_cache(maxsize=None)
    def cached(x):
        return x * K

    class Config:
        def __init__(self):
            self.lr = 0.1

        def __reduce__(self):
            return "CONFIG"

    CONFIG = Config()
"""

_RUN = """
    import json, re, sys
    import numpy as np
    import steps
    from memolab import memo

    @memo
    def run(fn, x):
        return fn(x)

    @memo
    def lr(cfg):
        return cfg.lr

    @memo
    def _apply(f, x):
        return float(f(x)) if not hasattr(f, "findall") else f.findall(x)

    def apply(f, x):
        try:
            return _apply(f, x)
        except Exception as e:  # each row reports, so that one crash hides no other row
            return f"crashed: {type(e).__name__}"

    steps.CONFIG.lr = float(sys.argv[1])
    out = {"memo": run(steps.step, 3), "lru": run(steps.cached, 3), "lr": lr(steps.CONFIG),
           "sin": apply(np.sin, 1.0), "cos": apply(np.cos, 1.0), "re": apply(re.compile("a+"), "caaab"),
           "runs": len(run.evaluations())}
    print(json.dumps(out))
"""


def test_callables_count_by_what_they_run_in_fresh_processes(project):
    project.write("steps.py", _STEPS)
    project.write("run.py", _RUN)
    first = project.run_json("run.py", "0.1")
    assert first == {"memo": 6, "lru": 6, "lr": 0.1, "sin": pytest.approx(0.8414709848),
                     "cos": pytest.approx(0.5403023058), "re": ["aaa"], "runs": 2}
    assert project.run_json("run.py", "0.1") == first  # a new process: all hits
    project.write("steps.py", _STEPS.replace("K = 2", "K = 3"))  # the code both helpers run changes
    second = project.run_json("run.py", "0.3")  # and the singleton's state
    assert (second["memo"], second["lru"], second["lr"], second["runs"]) == (9, 9, 0.3, 4)


_PLANTS = """
    import json, logging, math, sys, time, warnings
    from memolab import memo

    START = time.time()

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"[{time.time() - START:.1f}s] {message}", file=sys.stderr)

    def hook(*exc):
        print(START, exc, file=sys.stderr)

    def fmt(self, record):
        return f"{START} {record.getMessage()}"

    warnings.showwarning = show  # display hooks reading a start-time global: no key moves
    sys.excepthook = hook
    logging.Formatter.format = fmt

    @memo
    def f(x):
        return math.sqrt(x)

    def call(x):
        try:
            return f(x)
        except Exception as e:  # each row reports, so that one crash hides no other row
            return f"crashed: {type(e).__name__}: {e}"

    out = {"first": call(4.0), "again": call(1.0)}
    # a library method patched and restored, then another patch: no call may fail
    orig = json.JSONEncoder.default
    json.JSONEncoder.default = lambda self, o: str(o)
    out["during"] = call(4.0)
    json.JSONEncoder.default = orig
    math.sqrt = lambda x: x ** 0.5 + 1
    out["patched"] = call(4.0)
    out["runs"] = len(f.evaluations())
    print(json.dumps(out))
"""


def test_display_plants_join_no_key_and_a_restored_patch_never_crashes(project):
    project.write("plants.py", _PLANTS)
    first = project.run_json("plants.py")
    assert first == {"first": 2.0, "again": 1.0, "during": 2.0, "patched": 3.0, "runs": 4}
    second = project.run_json("plants.py")  # another START: still a hit
    assert second == first


_POOL = """
    import json, multiprocessing as mp, pickle
    from concurrent.futures import ProcessPoolExecutor
    from memolab import memo

    @memo(validate=lambda meta: True)  # options the standard pickler cannot carry travel too
    def work(x):
        return x * x

    if __name__ == "__main__":
        out = {"pickle": pickle.loads(pickle.dumps(work)) is work}
        for method in ("spawn", "fork"):
            with mp.get_context(method).Pool(2) as p:
                out[method + " pool"] = p.map(work, [1, 2, 3])
            with ProcessPoolExecutor(2, mp_context=mp.get_context(method)) as ex:
                out[method + " executor"] = list(ex.map(work, [4, 5]))
        out["runs"] = len(work.evaluations())
        print(json.dumps(out))
"""


def test_a_script_memo_runs_in_spawn_and_fork_pools(project):
    project.write("pool.py", _POOL)
    got = project.run_json("pool.py")
    assert got == {"pickle": True, "spawn pool": [1, 4, 9], "spawn executor": [16, 25], "fork pool": [1, 4, 9],
                   "fork executor": [16, 25], "runs": 5}


def test_copyreg_reduced_values_and_lru_cache_parameters_hash_by_what_they_compute():
    import functools
    import re

    np = require("numpy")
    from memolab.hashing import hash_value

    assert hash_value(np.sin) == hash_value(np.sin) != hash_value(np.cos)  # a library's singletons: by name
    assert hash_value(np.add) != hash_value(np.multiply)
    assert hash_value(re.compile("a+")) == hash_value(re.compile("a+"))  # by pattern and flags
    assert hash_value(re.compile("a+")) != hash_value(re.compile("a+", re.I)) != hash_value(re.compile("b"))

    def f(x):
        return x

    plain, typed = functools.lru_cache(maxsize=None)(f), functools.lru_cache(maxsize=None, typed=True)(f)
    assert hash_value(plain) == hash_value(functools.cache(f))
    assert hash_value(plain) != hash_value(typed)  # typed=True keeps f(1) and f(1.0) apart: another result


class _Scaled:
    def __init__(self, w: int) -> None:
        self.w = w

    @memo
    def predict(self, x: int) -> int:
        return self.w * x


@memo
def _step(x: int) -> int:
    return x + 1


def test_a_memoized_function_or_method_as_a_value_keys_by_its_code_and_its_object():
    from memolab.hashing import hash_value

    assert hash_value(_step) == hash_value(_step)
    # a bound memoized method carries its object: two instances are two computations
    assert hash_value(_Scaled(2).predict) == hash_value(_Scaled(2).predict) != hash_value(_Scaled(3).predict)
