"""OmegaConf and Hydra configs are keyed by what the function sees (issue 35).

Before: a ``DictConfig`` went through the generic object rule, so
``${oc.env:SCALE}`` was keyed by its text (after ``SCALE=3`` the ``SCALE=1``
result came back: a wrong result), and ``compose()``/``@hydra.main`` configs never
hit in a new process (the time they ran at sits in ``_metadata.resolver_cache``).
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from conftest import SRC, require

omegaconf = require("omegaconf")
require("hydra")

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf  # noqa: E402

from memolab import hashing  # noqa: E402

H = hashing.hash_value

COUNTED = '''
import json, os, sys
from pathlib import Path
from memolab import memo


def ran(tag):
    """Count real runs in a file next to the script (a closure or a list would be keyed)."""
    p = Path(__file__).with_name("runs.txt")
    p.write_text((p.read_text() if p.exists() else "") + tag + "\\n")
'''

ENV = COUNTED + '''
from omegaconf import OmegaConf


@memo
def scaled(cfg):
    ran("scaled")
    return cfg.model.width * int(cfg.scale)


cfg = OmegaConf.create({"scale": "${oc.env:SCALE}", "model": {"width": 10}})
print(json.dumps(scaled(cfg)))
'''


def runs(project) -> list[str]:
    p = project.root / "runs.txt"
    return p.read_text().split() if p.exists() else []


def test_an_env_interpolation_is_keyed_by_its_value_in_fresh_processes(project):
    project.write("env.py", ENV)
    assert project.run_json("env.py", env={"SCALE": "1"}) == 10
    # before: keyed by the text "${oc.env:SCALE}", so this returned 10, the SCALE=1 result
    assert project.run_json("env.py", env={"SCALE": "3"}) == 30
    assert project.run_json("env.py", env={"SCALE": "1"}) == 10
    assert project.run_json("env.py", env={"SCALE": "3"}) == 30
    assert runs(project) == ["scaled", "scaled"]


CONF = '''
lr: 0.1
model:
  width: 8
  depth: ${oc.decode:${oc.env:DEPTH,2}}
steps: ${model.depth}
'''

COMPOSE = COUNTED + '''
from hydra import compose, initialize
from omegaconf import OmegaConf


@memo
def train(cfg):
    ran("train")
    return cfg.lr * cfg.model.width * cfg.steps


with initialize(version_base="1.3", config_path="conf"):
    cfg = compose(config_name="config", overrides=sys.argv[1:])
cache = {k: list(v.values()) for k, v in cfg._metadata.resolver_cache.items()}
print(json.dumps({"value": train(cfg), "cache": cache}))
'''

MAIN = COUNTED + '''
import hydra


@memo
def train(cfg):
    ran("main")
    return cfg.lr * cfg.model.width * cfg.steps


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    print(json.dumps({"value": train(cfg), "cache": {k: list(v.values()) for k, v in
                                                     cfg._metadata.resolver_cache.items()}}))


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
def test_composed_and_hydra_main_configs_hit_in_fresh_processes(project):
    project.write("conf/config.yaml", CONF)
    project.write("compose_run.py", COMPOSE)
    project.write("main_run.py", MAIN)
    first = project.run_json("compose_run.py")
    assert first["value"] == pytest.approx(1.6)
    assert first["cache"].get("now"), "Hydra left no time in the resolver cache: the test proves nothing"
    assert project.run_json("compose_run.py")["value"] == pytest.approx(1.6)
    assert runs(project) == ["train"]
    # an override, and an environment variable read through an interpolation with a default
    assert project.run_json("compose_run.py", "model.width=4")["value"] == pytest.approx(0.8)
    assert project.run_json("compose_run.py", env={"DEPTH": "5"})["value"] == pytest.approx(4.0)
    assert runs(project) == ["train"] * 3
    # @hydra.main: the same config reached through Hydra's app (it also makes a run dir named by the time)
    for _ in range(2):
        assert project.run_json("main_run.py", "hydra.run.dir=out/${now:%H-%M-%S-%f}")["value"] == pytest.approx(1.6)
    assert runs(project) == ["train"] * 3 + ["main"]
    assert project.run_json("main_run.py", "hydra.run.dir=out/x", "lr=0.2")["value"] == pytest.approx(3.2)
    assert runs(project) == ["train"] * 3 + ["main"] * 2


def test_the_resolver_cache_does_not_count_but_a_resolved_time_does():
    OmegaConf.register_new_resolver("memolab_test_tick", lambda: next(TICKS), use_cache=True)
    try:
        plain = OmegaConf.create({"a": 1})
        key = H(plain)
        plain._metadata.resolver_cache["now"][("%H",)] = "12"  # what compose() leaves behind
        assert H(plain) == key
        # a value that *reads* a cached resolver is keyed by what it resolves to: the cache pins it
        # for this config (the function reads the same), another config resolves it anew
        timed = OmegaConf.create({"a": 1, "at": "${memolab_test_tick:}"})
        assert H(timed) == H(timed)
        assert timed.at == 0
        again = OmegaConf.create({"a": 1, "at": "${memolab_test_tick:}"})
        assert H(again) != H(timed) and again.at == 1
        # keyed by the value it resolved to and by its text (to_yaml shows the text)
        assert H(OmegaConf.create({"a": 1, "at": 0})) != H(timed)
    finally:
        OmegaConf.clear_resolver("memolab_test_tick")


TICKS = iter(range(1000))


def test_values_types_and_structure_count():
    C = OmegaConf.create
    assert H(C({"a": 1})) != H(C({"a": "1"})) != H(C({"a": 1.0}))
    assert H(C({"a": 1, "b": 2})) == H(C({"b": 2, "a": 1}))  # a dict's order does not count, as for dict
    assert H(C([1, 2])) != H(C([2, 1])) != H(C({0: 1, 1: 2}))
    assert H(C({"a": {"b": 1}})) != H(C({"a": {"b": 2}})) != H(C({"a": [1]}))
    assert H(C({"a": 1})) != H({"a": 1})  # a config is not a plain dict (attribute access, flags)
    assert H(C({"a": "???"})) != H(C({"a": None})) != H(C({"a": "x"}))
    a, b = C({"x": 1, "y": "${x}"}), C({"x": 1, "y": 1})
    # an interpolation by its value and its text: OmegaConf.to_yaml(a) and to_yaml(b) differ
    assert H(a) != H(b) and H(a) != H(C({"x": 2, "y": "${x}"})) and H(a) == H(C({"y": "${x}", "x": 1}))
    frozen = C({"a": 1})
    OmegaConf.set_readonly(frozen, True)
    assert H(frozen) != H(C({"a": 1}))
    strict = C({"a": 1})
    OmegaConf.set_struct(strict, True)
    assert H(strict) != H(C({"a": 1}))
    assert isinstance(a, DictConfig) and isinstance(C([1]), ListConfig)
    # the node's class counts (what assigning to it accepts), not only the value it holds
    from omegaconf.nodes import IntegerNode

    assert H(C({"a": IntegerNode(1)})) != H(C({"a": 1})) and C({"a": IntegerNode(1)}).a == 1


@dataclasses.dataclass
class Model:
    width: int = 8
    name: str = MISSING


@dataclasses.dataclass
class Model2:
    width: int = 8
    name: str = MISSING


@dataclasses.dataclass
class Cfg:
    model: Model = dataclasses.field(default_factory=Model)
    lrs: list[float] = dataclasses.field(default_factory=lambda: [0.1, 0.01])
    seed: int | None = None


def test_structured_configs_key_by_their_class_and_types():
    s = OmegaConf.structured(Cfg)
    assert H(s) == H(OmegaConf.structured(Cfg))
    assert H(OmegaConf.structured(Model)) != H(OmegaConf.structured(Model2))  # the same fields, another class
    assert H(OmegaConf.structured(Model)) != H(OmegaConf.create({"width": 8, "name": "???"}))
    t = OmegaConf.structured(Cfg)
    t.model.width = 9
    assert H(t) != H(s)
    t.model.width = 8
    assert H(t) == H(s)
    t.model.name = "gpt"
    assert H(t) != H(s)
    t.seed = 3
    assert OmegaConf.get_type(t, "model") is Model


def test_a_sub_config_keys_by_its_resolved_content_wherever_it_sits(monkeypatch):
    root = OmegaConf.create({"base": 4, "model": {"width": "${base}", "depth": 2},
                             "twin": {"width": "${base}", "depth": 2}})
    key = H(root.model)
    assert H(root.twin) == key  # its key in the parent does not count
    root.base = 5  # an interpolation reaching outside enters by its value
    assert H(root.model) != key


def test_an_unresolvable_interpolation_is_keyed_by_its_text_until_it_resolves(monkeypatch):
    monkeypatch.delenv("MEMOLAB_TEST_UNSET", raising=False)
    cfg = OmegaConf.create({"a": 1, "token": "${oc.env:MEMOLAB_TEST_UNSET}", "ref": "${nowhere}"})
    key = H(cfg)
    assert key == H(OmegaConf.create({"a": 1, "token": "${oc.env:MEMOLAB_TEST_UNSET}", "ref": "${nowhere}"}))
    assert key != H(OmegaConf.create({"a": 1, "token": "${oc.env:MEMOLAB_TEST_OTHER}", "ref": "${nowhere}"}))
    monkeypatch.setenv("MEMOLAB_TEST_UNSET", "x")
    assert H(cfg) != key
    lst = OmegaConf.create([1, "???", "${0}"])
    assert H(lst) != H(OmegaConf.create([1, "???", 1]))
    assert H(lst) != H(OmegaConf.create([2, "???", "${0}"]))


def test_a_memoized_function_sees_an_env_change_in_process(tmp_store, monkeypatch):
    from conftest import Calls
    from memolab import memo

    calls = Calls()

    @memo
    def scaled(cfg):
        calls.append(1)
        return int(cfg.scale) * 10

    cfg = OmegaConf.create({"scale": "${oc.env:MEMOLAB_TEST_SCALE}"})
    monkeypatch.setenv("MEMOLAB_TEST_SCALE", "1")
    assert scaled(cfg) == 10
    monkeypatch.setenv("MEMOLAB_TEST_SCALE", "3")
    assert scaled(cfg) == 30
    monkeypatch.setenv("MEMOLAB_TEST_SCALE", "1")
    assert scaled(cfg) == 10 and len(calls) == 2


def test_import_memolab_imports_no_omegaconf():
    code = ("import sys, memolab, memolab.omegaconf, memolab.omegaconf.keys\n"
            "print(sorted(m for m in ('omegaconf', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "[]"


ROUNDTRIP = COUNTED + '''
import dataclasses
from omegaconf import OmegaConf
from memolab.hashing import identity


@dataclasses.dataclass
class Opt:
    lr: float = 0.1
    betas: tuple = (0.9, 0.99)


@memo
def make():
    ran("make")
    cfg = OmegaConf.merge(OmegaConf.structured(Opt), {"lr": "${oc.env:LR,0.5}"})
    root = OmegaConf.create({"opt": cfg, "steps": 3, "tags": ["a", "${steps}"]})
    root.tags[1]  # resolved once: the resolver cache is filled where it was computed
    return root


@memo
def take(cfg):
    return 0


cfg = make()
identity.enabled = False
print(json.dumps({"key": take.key(cfg)[2], "type": type(cfg).__name__, "lr": cfg.opt.lr}))
'''


def test_a_config_returned_by_a_memoized_function_keys_alike_once_loaded(project):
    project.write("rt.py", ROUNDTRIP)
    computed = project.run_json("rt.py", env={"PYTHONHASHSEED": "1"})
    loaded = project.run_json("rt.py", env={"PYTHONHASHSEED": "2"})
    assert runs(project) == ["make"]
    assert computed == loaded and loaded["type"] == "DictConfig"
    # an interpolation in a loaded config resolves where it is read: here, another environment
    other = project.run_json("rt.py", env={"LR": "0.25"})
    assert other["lr"] == 0.25 and other["key"] != computed["key"] and runs(project) == ["make"]
