"""Unit tests of the binding graph: scopes, digests, caching, origins, warnings.

Modules are real files in a temporary folder, imported for real; an "edit" is a
rewrite of the file followed by ``importlib.reload``, the same thing a user
does in a notebook.
"""
from __future__ import annotations

import ast
import importlib
import sys
import textwrap
import warnings

import pytest

from conftest import require
from memolab import codegraph, hashing, memo
from memolab.codegraph import bytecode, dictversion, origins
from memolab.errors import MemolabWarning


def compiled(src: str, name: str = "f"):
    # names the snippet evaluates at definition time (defaults, bases) exist but are never resolved here
    ns: dict = {"__name__": "cg_snippet", "DEFAULT": 0}
    exec(compile(textwrap.dedent(src), "<snippet>", "exec"), ns)
    return ns[name]


def refs(src: str):
    return set(bytecode.analyse_code(compiled(src).__code__).refs)


@pytest.fixture
def mods(tmp_path, monkeypatch):
    """write(name, source) -> freshly imported module; edit(module, source) -> reloaded module."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    names = []

    class Mods:
        def write(self, name, src):
            path = tmp_path / (name.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            for parent in list(path.parents)[: name.count(".")]:
                (parent / "__init__.py").touch()
            path.write_text(textwrap.dedent(src))
            importlib.invalidate_caches()
            names.append(name)
            return importlib.import_module(name)

        def edit(self, mod, src):
            (tmp_path / (mod.__name__.replace(".", "/") + ".py")).write_text(textwrap.dedent(src))
            return importlib.reload(mod)

    yield Mods()
    for n in names:
        sys.modules.pop(n, None)


def digest(fn, **kw):
    return codegraph.function_code(fn, **kw).digest


# -- scopes -----------------------------------------------------------------------------

def test_free_names_cover_every_nesting_and_skip_locals():
    r = refs("""
        def f(x, y=DEFAULT):
            a = 1
            g = lambda v: LAM(v) + a
            def inner(z):
                nonlocal a
                return INNER(z) + a
            out = [COMP(i) for i in range(x) if COND(i)]
            return np.linalg.norm(x), inner, out, {k: DICTV for k in x}
    """)
    assert {("LAM",), ("INNER",), ("COMP",), ("COND",), ("range",), ("np", "linalg", "norm"),
            ("DICTV",)} <= r
    for local in ("a", "g", "inner", "out", "i", "k", "x", "v", "z"):
        assert (local,) not in r


def test_default_values_of_callees_count(mods):
    src = ("def helper(x):\n    return x + 1\n\ndef g(x, fn=helper, k=2):\n    return fn(x) * k\n\n"
           "def f(x):\n    return g(x)\n")
    m = mods.write("cg_defaults", src)
    assert "cg_defaults:helper" in codegraph.function_code(m.f).deps
    d0 = digest(m.f)
    m = mods.edit(m, src.replace("k=2", "k=3"))
    assert digest(m.f) != d0


def test_class_body_names_are_invisible_to_methods_and_globals_are_followed():
    C = compiled("""
        class C:
            scale = 1
            def m(self):
                global COUNTER
                COUNTER = scale
                return helper(self)
    """, "C")
    r = codegraph._class_info(C).refs
    assert {("COUNTER",), ("helper",)} <= r
    # ``scale`` in a method is the *global* scale, not the class attribute
    assert ("scale",) in r


def test_local_imports_getattr_constants_and_annotations():
    r = refs("""
        def f(x: UserType) -> Other:
            import pkg.mod
            from . import util
            from .sib import g as gg
            y: Ann = getattr(obj, "attr")
            return pkg.mod.h(x), util, gg
    """)
    assert ("@import", 0, "pkg.mod", None) in r
    assert ("@import", 1, "", "util") in r and ("@import", 1, "sib", "g") in r
    assert ("obj", "attr") in r
    assert not {("UserType",), ("Other",), ("Ann",)} & r  # annotations never change behaviour


def test_dynamic_constructs_are_reported_with_their_line():
    f = compiled("def f(o, n):\n    a = getattr(o, n)\n    return eval(n)\n")
    dyn = bytecode.analyse_code(f.__code__).dynamic
    assert (2, "getattr() with a computed name", None) in dyn and (3, "eval()", None) in dyn


def test_code_digest_ignores_docstrings_comments_layout_and_position():
    base = compiled("def f(x):\n    return x + 1\n")
    same = compiled('\n\n\ndef f(x):  # c\n    """Doc."""\n    # c\n    return (x +\n            1)\n')
    other = compiled("def f(x):\n    return x + 2\n")
    d = lambda fn: bytecode.code_digest(fn.__code__)  # noqa: E731
    assert d(base) == d(same) != d(other)
    # nested code (a lambda, a comprehension) counts by its own digest
    assert d(compiled("def f(x):\n    return [i + 1 for i in x]\n")) != d(compiled("def f(x):\n    return [i + 2 for i in x]\n"))


def test_set_literals_digest_the_same_whatever_the_string_hash_seed(tmp_path):
    import subprocess

    prog = ("from memolab.codegraph import bytecode\n"
            "def f(x):\n    return x in {'alpha', 'beta', 'gamma', 'delta'}\n"
            "print(bytecode.code_digest(f.__code__))\n")
    env = dict(__import__("os").environ, PYTHONPATH=str(__import__("pathlib").Path(codegraph.__file__).parents[2]))
    outs = {subprocess.run([sys.executable, "-c", prog], env={**env, "PYTHONHASHSEED": str(seed)},
                           capture_output=True, text=True, check=True).stdout for seed in (1, 2, 3)}
    assert len(outs) == 1


def test_normalized_source_drops_docstrings_comments_and_layout():
    a = codegraph.normalized_source("def f(x):\n    return x + 1\n")
    b = codegraph.normalized_source('def f(x):  # c\n    """Doc."""\n    # c\n    return (x +\n            1)\n')
    c = codegraph.normalized_source("def f(x):\n    return x + 2\n")
    assert a == b != c


# -- digests and invalidation ----------------------------------------------------------------

def test_helper_edit_changes_the_digest_comment_edit_does_not(mods):
    h = mods.write("cg_h1", "def helper(x):\n    return x + 1\n")
    m = mods.write("cg_m1", "from cg_h1 import helper\n\ndef f(x):\n    return helper(x)\n")
    d0 = digest(m.f)
    mods.edit(h, "def helper(x):\n    # just a comment\n    return (x\n        + 1)\n")
    m = mods.edit(m, "from cg_h1 import helper\n\ndef f(x):\n    return helper(x)\n")
    assert digest(m.f) == d0
    mods.edit(h, "def helper(x):\n    return x + 2\n")
    m = mods.edit(m, "from cg_h1 import helper\n\ndef f(x):\n    return helper(x)\n")
    assert digest(m.f) != d0
    assert "cg_h1:helper" in codegraph.function_code(m.f).deps


def test_reload_of_a_module_is_seen_without_touching_the_caller(mods):
    ops = mods.write("cg_ops", "def double(x):\n    return 2 * x\n")
    m = mods.write("cg_m2", "import cg_ops\n\ndef f(x):\n    return cg_ops.double(x)\n")
    d0 = digest(m.f)
    mods.edit(ops, "def double(x):\n    return 2 * x + 1\n")  # same line numbers, new body
    assert digest(m.f) != d0


def test_mutual_recursion_terminates_and_either_side_counts(mods):
    src = "def even(n):\n    return n == 0 or odd(n - 1)\n\ndef odd(n):\n    return n != 0 and even(n - 1)\n"
    m = mods.write("cg_rec", src)
    d0 = digest(m.even)
    assert set(codegraph.function_code(m.even).deps) >= {"cg_rec:even", "cg_rec:odd"}
    m = mods.edit(m, src.replace("n != 0", "n > 0"))
    assert digest(m.even) != d0


def test_runtime_rebinding_of_a_global_is_seen_on_the_next_call(mods):
    m = mods.write("cg_g", "SCALE = 2\nTABLE = [1, 2]\n\ndef f(x):\n    return x * SCALE + TABLE[0]\n")
    d0 = digest(m.f)
    m.SCALE = 3
    d1 = digest(m.f)
    assert d1 != d0
    m.SCALE = 2
    assert digest(m.f) == d0  # back to the old value: back to the old key
    m.TABLE.append(3)  # a mutation in place, not a rebinding
    assert digest(m.f) != d0


def test_identical_immutable_globals_are_not_rehashed(mods, monkeypatch):
    m = mods.write("cg_imm", "K = 12345678901\nNAME = 'abc'\nLST = [1]\n\ndef f(x):\n    return x + K, NAME, LST\n")
    codegraph.function_code(m.f)
    hashed = []
    real = hashing.hash_value
    # what hashing handed over
    monkeypatch.setattr(codegraph, "_hash_value", lambda v, path="": hashed.append(v) or real(v, path))
    codegraph.function_code(m.f)
    assert hashed == [[1]]  # only the mutable list


def test_a_repeat_call_does_not_parse_anything(mods, monkeypatch):
    m = mods.write("cg_rep", "import os\n\ndef g(x):\n    return os.sep + x\n\ndef f(x):\n    return g(x)\n")
    cv = codegraph.function_code(m.f)

    def boom(*a, **k):
        raise AssertionError("re-parsed on a repeat call")

    monkeypatch.setattr(ast, "parse", boom)
    monkeypatch.setattr(bytecode, "_scan", boom)
    monkeypatch.setattr(bytecode, "code_digest", boom)
    assert codegraph.function_code(m.f) is cv


def test_base_class_method_edit_changes_the_class_digest_and_its_users(mods):
    src = ("class Base:\n    def scale(self):\n        return 2\n\nclass Child(Base):\n    pass\n\n"
           "def f():\n    return Child().scale()\n")
    m = mods.write("cg_cls", src)
    d_cls, d_f = codegraph.object_digest(m.Child), digest(m.f)
    m = mods.edit(m, src.replace("return 2", "return 3"))
    assert codegraph.object_digest(m.Child) != d_cls
    assert digest(m.f) != d_f


def test_the_class_of_an_argument_joins_the_argument_digest_transitively(mods):
    hsrc = "def act(x):\n    return x\n"
    h = mods.write("cg_act", hsrc)
    m = mods.write("cg_net", "from cg_act import act\n\nclass Net:\n    def forward(self, x):\n        return act(x)\n")
    d0 = hashing.hash_value(m.Net())
    mods.edit(h, hsrc.replace("return x", "return -x"))
    m = importlib.reload(m)
    assert hashing.hash_value(m.Net()) != d0


def test_closure_cells_are_hashed_by_value(mods):
    m = mods.write("cg_clo", "def make(k):\n    def f(x):\n        return x * k\n    return f\n")
    assert digest(m.make(2)) != digest(m.make(3))
    assert digest(m.make(2)) == digest(m.make(2))


def test_decorated_helpers_are_followed_to_the_function_they_wrap(mods):
    src = ("import functools\n\n@functools.lru_cache\ndef helper(x):\n    return x + 1\n\n"
           "def f(x):\n    return helper(x)\n")
    m = mods.write("cg_dec", src)
    assert "cg_dec:helper" in codegraph.function_code(m.f).deps
    d0 = digest(m.f)
    m = mods.edit(m, src.replace("x + 1", "x + 2"))
    assert digest(m.f) != d0


def test_memoized_helpers_count_as_their_function(mods, tmp_store):
    src = "from memolab import memo\n\n@memo\ndef helper(x):\n    return x + 1\n\n@memo\ndef f(x):\n    return helper(x)\n"
    m = mods.write("cg_memo", src)
    assert "cg_memo:helper" in m.f.code_version().deps


def test_third_party_and_stdlib_are_keyed_by_version_not_source(mods):
    np = require("numpy")
    m = mods.write("cg_pkg", "import numpy as np\nimport os.path\n\ndef f(x):\n    return np.mean(x), os.path.join('a')\n")
    deps = codegraph.function_code(m.f).deps
    assert deps["pkg:numpy"] == np.__version__
    assert deps["python:stdlib"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert not any(k.startswith("numpy") for k in deps)


def test_version_truncation_by_sensitivity():
    t = origins.truncate
    assert [t("2.4.1", s) for s in ("exact", "minor", "major", "ignore")] == ["2.4.1", "2.4", "2", "*"]
    assert t("1.13.0rc1", "minor") == "1.13" and t("weird", "minor") == "weird"


def test_version_sensitivity_changes_which_part_of_a_version_counts(mods):
    require("numpy")
    m = mods.write("cg_sens", "import numpy\n\ndef f(x):\n    return numpy.sum(x)\n")
    ds = {s: digest(m.f, version_sensitivity=s) for s in ("exact", "minor", "major", "ignore")}
    assert len(set(ds.values())) == 4
    cv = codegraph.function_code(m.f, version_sensitivity="major")
    assert cv.sensitivity == "major"


def test_per_function_version_sensitivity_option(tmp_store):
    @memo(version_sensitivity="ignore")
    def f(x):
        return x

    assert f.code_version().sensitivity == "ignore"
    with pytest.raises(ValueError, match="version_sensitivity"):
        memo(version_sensitivity="patch")(lambda x: x)


def test_memolab_itself_is_not_a_dependency(mods):
    m = mods.write("cg_self", "from memolab import memo\nimport memolab\n\n@memo\ndef f(x):\n    return memolab\n")
    assert not [k for k in m.f.code_version().deps if "memolab" in k]


def test_declared_extra_dependencies(mods):
    p = mods.write("cg_plug", "def a(x):\n    return x\n")
    m = mods.write("cg_dyn", "def f(x):\n    return x\n")
    cv = codegraph.function_code(m.f, (p.a, "cg_plug"))
    assert {"cg_plug:a", "cg_plug:<module>"} <= set(cv.deps)
    with pytest.raises(TypeError, match="cannot depend on int"):
        codegraph.function_code(m.f, (3,))


def test_unresolvable_code_is_warned_about_once_with_its_location(mods):
    m = mods.write("cg_warn", "def f(o, n):\n    return getattr(o, n)\n")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        codegraph.function_code(m.f)
        codegraph.object_digest(m.f)
    msgs = [str(x.message) for x in w if issubclass(x.category, MemolabWarning)]
    assert len(msgs) == 1
    assert "getattr() with a computed name" in msgs[0] and "line 2 of cg_warn.py" in msgs[0] and "deps=" in msgs[0]


def test_getattr_on_a_module_needs_no_warning_the_module_counts_whole(mods):
    mods.write("cg_plugins", "def a(x):\n    return x\n")
    src = ("import importlib\nimport cg_plugins\n\ndef f(n, x):\n    return getattr(cg_plugins, n)(x)\n\n"
           "def g(n, x):\n    return getattr(importlib.import_module('cg_plugins'), n)(x)\n")
    m = mods.write("cg_getattr_mod", src)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (m.f, m.g):
            assert "cg_plugins:a" in codegraph.function_code(fn).deps


def test_an_unhashable_global_warns_and_does_not_break_the_call(mods):
    m = mods.write("cg_lock", "import threading\nLOCK = threading.Lock()\n\ndef f(x):\n    with LOCK:\n        return x\n")
    with pytest.warns(MemolabWarning, match="value of `cg_lock:LOCK` cannot be hashed"):
        codegraph.function_code(m.f)


def test_names_bound_later_are_watched(mods):
    m = mods.write("cg_late", "def f(x):\n    return later(x)\n")
    d0 = digest(m.f)
    m.later = lambda x: x
    assert digest(m.f) != d0


def test_explain_hides_version_changes_the_sensitivity_ignores():
    from memolab.calls.explain import Explanation, _code_reasons

    class NoSources:
        class index:
            @staticmethod
            def source(d):
                return None

    cv = codegraph.CodeVersion("new", {"pkg:numpy": "2.4.2", "pkg:torch": "2.14.0", "m:f": "b"}, {}, "minor")
    ex = Explanation("f", False)
    _code_reasons(NoSources, ex, {"deps": {"pkg:numpy": "2.4.1", "pkg:torch": "2.13.0", "m:f": "a"}}, cv.deps,
                  cv.sources.get, cv.sensitivity, "o", "new")
    assert "torch 2.13.0 -> 2.14.0" in ex.reasons and "`m:f` changed" in ex.reasons
    assert not [r for r in ex.reasons if "numpy" in r]


def test_namespace_version_tags_work_here_and_the_fallback_is_equally_correct(mods, monkeypatch):
    if sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13):
        assert dictversion.tag_reader({}) is not None
    for works in (True, False):
        monkeypatch.setattr(dictversion, "_works", works if dictversion.tag_reader({}) is not None else False)
        codegraph.clear_caches()
        m = mods.write(f"cg_tag_{works}", "SCALE = 2\n\ndef g(x):\n    return x\n\ndef f(x):\n    return g(x) * SCALE\n")
        d0 = digest(m.f)
        assert digest(m.f) == d0
        m.SCALE = 3
        assert digest(m.f) != d0
        m.g = lambda x: -x  # a rebound callee: the graph is rebuilt
        assert "lambda" in str(codegraph.function_code(m.f).deps)


def test_a_memoized_callable_object_is_keyed_by_its_class_and_state(mods):
    import functools

    m = mods.write("cg_call", "def scale(x, k):\n    return x * k\n")
    p2, p3 = functools.partial(m.scale, k=2), functools.partial(m.scale, k=3)
    assert codegraph.function_code(p2).digest != codegraph.function_code(p3).digest
    with pytest.raises(TypeError, match="cannot depend on int"):
        codegraph.function_code(m.scale, (3,))


def test_a_user_decorator_counts_with_its_own_code(mods):
    src = ("import functools\n\ndef twice(fn):\n    @functools.wraps(fn)\n    def wrapper(x):\n        return fn(fn(x))\n"
           "    return wrapper\n\n@twice\ndef helper(x):\n    return x + 1\n\ndef f(x):\n    return helper(x)\n")
    m = mods.write("cg_wraps", src)
    deps = codegraph.function_code(m.f).deps
    assert {"cg_wraps:helper", "cg_wraps:twice.<locals>.wrapper"} <= set(deps)
    d0 = digest(m.f)
    m = mods.edit(m, src.replace("return fn(fn(x))", "return fn(fn(fn(x)))"))
    assert digest(m.f) != d0


def test_functions_stored_in_a_table_count(mods):
    src = "def a(x):\n    return x + 1\n\nOPS = {'a': a}\n\ndef f(x):\n    return OPS['a'](x)\n"
    m = mods.write("cg_table", src)
    d0 = digest(m.f)
    m = mods.edit(m, src.replace("x + 1", "x + 2"))
    assert digest(m.f) != d0


def test_a_class_whose_module_name_is_not_loaded_is_still_user_code(mods):
    src = "class K:\n    def m(self):\n        return 1\n\nK.__module__ = 'not_a_loaded_module'\n"
    m = mods.write("cg_fake_mod", src)
    d0 = codegraph.object_digest(m.K)
    m = mods.edit(m, src.replace("return 1", "return 2"))
    assert codegraph.object_digest(m.K) != d0


def test_enum_and_dataclass_classes(mods):
    src = ("import enum, dataclasses\n\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\n\n"
           "@dataclasses.dataclass\nclass Cfg:\n    lr: float = 0.1\n    tags: list = dataclasses.field(default_factory=list)\n")
    m = mods.write("cg_enum", src)
    d_color, d_cfg = codegraph.object_digest(m.Color), codegraph.object_digest(m.Cfg)
    assert hashing.hash_value(m.Color.RED) != hashing.hash_value(m.Color.BLUE)
    m2 = mods.edit(m, src.replace("BLUE = 2", "BLUE = 3"))
    assert codegraph.object_digest(m2.Color) != d_color and codegraph.object_digest(m2.Cfg) == d_cfg
    m3 = mods.edit(m2, src.replace("lr: float = 0.1", "lr: float = 0.2"))
    assert codegraph.object_digest(m3.Cfg) != d_cfg
    m4 = mods.edit(m3, src.replace("default_factory=list", "default_factory=dict"))
    assert codegraph.object_digest(m4.Cfg) != d_cfg


def test_source_excerpts_follow_a_reload(mods):
    m = mods.write("cg_excerpt", "def f(x):\n    return x + 1\n")
    assert "x + 1" in codegraph.function_code(m.f).sources["cg_excerpt:f"]
    m = mods.edit(m, "def f(x):\n    return x + 2\n")
    assert "x + 2" in codegraph.function_code(m.f).sources["cg_excerpt:f"]


# -- review: code reached through library decorators, submodules and module values -------

def test_helpers_wrapped_by_library_decorators_count_with_their_own_code(mods):
    # contextlib.contextmanager and functools.singledispatch (like torch.no_grad())
    # return a *function* defined in library code: the user's code is only
    # reachable through ``__wrapped__`` (and singledispatch's registry).
    cm = ("import contextlib\n\n@contextlib.contextmanager\ndef scale():\n    yield 2\n\n"
          "def f(x):\n    with scale() as k:\n        return x * k\n")
    m = mods.write("cg_libdeco_cm", cm)
    d0 = digest(m.f)
    assert "cg_libdeco_cm:scale" in codegraph.function_code(m.f).deps
    m = mods.edit(m, cm.replace("yield 2", "yield 3"))
    assert digest(m.f) != d0

    sd = ("import functools\n\n@functools.singledispatch\ndef op(x):\n    return x * 2\n\n"
          "@op.register(int)\ndef _(x):\n    return x * 2\n\ndef f(x):\n    return op(x)\n")
    m = mods.write("cg_libdeco_sd", sd)
    d0 = digest(m.f)
    m = mods.edit(m, sd.replace("def op(x):\n    return x * 2", "def op(x):\n    return x * 3"))
    d1 = digest(m.f)
    assert d1 != d0
    m = mods.edit(m, sd.replace("def _(x):\n    return x * 2", "def _(x):\n    return x * 3"))
    assert digest(m.f) not in (d0, d1)


def test_a_memoized_function_under_a_library_decorator_counts_with_its_own_code(mods):
    src = "import functools\nfrom memolab import memo\n\n@memo\n@functools.singledispatch\ndef f(x):\n    return x * 2\n"
    m = mods.write("cg_libdeco_root", src)
    d0 = m.f.code_version().digest
    m = mods.edit(m, src.replace("x * 2", "x * 3"))
    assert m.f.code_version().digest != d0


def test_a_user_module_hashed_as_a_value_follows_its_code(mods):
    # a module passed as an argument or kept in a table is code, not a name
    src = "def a(x):\n    return x + 1\n"
    ops = mods.write("cg_modvalue", src)
    h0 = hashing.hash_value(ops)
    assert hashing.hash_value(ops) == h0
    mods.edit(ops, src.replace("x + 1", "x + 2"))
    assert hashing.hash_value(ops) != h0


def test_a_helper_rebound_to_an_object_with_its_own_eq_is_seen(mods):
    # The per-call check must compare namespace slots by identity: an object whose
    # ``==`` says True to anything hid the rebinding, one whose ``==`` returns an
    # array made the check raise instead of rebuilding the graph.
    np = require("numpy")
    m = mods.write("cg_rebind_eq", "def helper(x):\n    return x + 1\n\ndef f(x):\n    return helper(x)\n")
    d0 = digest(m.f)

    class Agreeable:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

        def __call__(self, x):
            return x + 10

    m.helper = Agreeable()
    d1 = digest(m.f)
    assert d1 != d0
    m.helper = np.arange(3)
    assert digest(m.f) not in (d0, d1)


def test_a_builtin_shadowed_after_the_first_call_is_seen(mods):
    # a notebook cell defining ``round`` (or running ``from numpy import *``) after
    # the memoized function was first called changes what the function runs
    m = mods.write("cg_shadow", "def f(x):\n    return round(x)\n")
    d0 = digest(m.f)
    assert digest(m.f) == d0
    m.round = lambda x: 42
    d1 = digest(m.f)
    assert d1 != d0
    del m.round
    assert digest(m.f) == d0


def test_modules_imported_by_a_constant_name_in_the_body_count(mods):
    # docs: importlib.import_module("const.name") inside the function is a dependency,
    # however importlib or import_module is spelled
    mods.write("cg_dyn_target", "def g(x):\n    return x * 2\n")
    for i, call in enumerate(["importlib.import_module('cg_dyn_target')", "il.import_module('cg_dyn_target')",
                              "import_module('cg_dyn_target')", "__import__('cg_dyn_target')"]):
        m = mods.write(f"cg_dyn_user{i}", "import importlib\nimport importlib as il\nfrom importlib import import_module\n\n"
                                          f"def f(x):\n    return {call}.g(x)\n")
        assert "cg_dyn_target:<module>" in codegraph.function_code(m.f).deps, call


def test_a_library_wrapper_reachable_from_its_own_attributes_terminates(mods):
    m = mods.write("cg_libdeco_cycle", "import contextlib\n\n@contextlib.contextmanager\ndef scale():\n    yield 2\n\n"
                                       "scale.again = scale\n\ndef f(x):\n    with scale() as k:\n        return x * k\n")
    assert "cg_libdeco_cycle:scale" in codegraph.function_code(m.f).deps


def test_ipython_autoreload_patching_a_class_in_place_is_seen(mods, tmp_path):
    # %autoreload 2 reloads the module and patches the *old* class's methods in
    # place (their __code__), so a notebook's `from model import Net` keeps the
    # old class object: its cached analysis must not outlive that patch
    autoreload = require("IPython.extensions.autoreload")
    src = "class Net:\n    def forward(self, x):\n        return x * 2\n"
    model = mods.write("cg_ar_model", src)
    m = mods.write("cg_ar_user", "from cg_ar_model import Net\n\ndef f(x):\n    return Net().forward(x)\n")
    d0 = digest(m.f)
    (tmp_path / "cg_ar_model.py").write_text(src.replace("x * 2", "x * 3"))
    autoreload.superreload(model)
    assert m.Net().forward(1) == 3  # the old class object now runs the new code
    assert digest(m.f) != d0


def test_singledispatchmethod_bodies_count(mods):
    src = ("import functools\n\nclass C:\n    @functools.singledispatchmethod\n    def m(self, x):\n        return x * 2\n\n"
           "    @m.register\n    def _(self, x: int):\n        return x * 2\n\ndef f(x):\n    return C().m(x)\n")
    m = mods.write("cg_sdm", src)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cannot be hashed" warning either
        d0 = digest(m.f)
    m = mods.edit(m, src.replace("def m(self, x):\n        return x * 2", "def m(self, x):\n        return x * 3"))
    assert digest(m.f) != d0


def test_a_singledispatch_function_hashes_as_a_value_and_follows_its_code(mods):
    # passed as an argument or kept in a table, a library wrapper function is hashed by
    # value: its closure reaches the library's weak dispatch cache, which cannot be hashed
    src = ("import functools\n\n@functools.singledispatch\ndef g(x):\n    return x * 2\n\n"
           "OPS = {'g': g}\n\ndef f(x):\n    return OPS['g'](x)\n")
    m = mods.write("cg_sd_value", src)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h0, d0 = hashing.hash_value(m.g), digest(m.f)
    m = mods.edit(m, src.replace("x * 2", "x * 3"))
    assert hashing.hash_value(m.g) != h0
    assert digest(m.f) != d0


def test_a_class_patched_at_run_time_is_seen_in_the_same_process(tmp_store):
    """Notebook style: class-level settings and methods rebound between calls."""
    import memolab

    class Config:
        lr = 0.1

        def scale(self):
            return 10

    from conftest import Calls

    calls = Calls()

    @memolab.memo
    def train():
        calls.append(1)
        return Config.lr * Config().scale()

    assert train() == 1.0
    assert train() == 1.0 and len(calls) == 1
    Config.lr = 0.2  # a class attribute rebound
    assert train() == 2.0 and len(calls) == 2
    Config.scale = lambda self: 100  # a method monkeypatched
    assert train() == 20.0 and len(calls) == 3
    Config.lr = 0.2  # the same value again: still a hit
    assert train() == 20.0 and len(calls) == 3


def test_a_typeddict_class_has_a_digest_and_its_results_store(tmp_store):
    # TypedDict classes raise on isinstance(): the class analysis asked
    # isinstance(value, cls) of every class attribute (looking for enum
    # members), so any memoized function that used one crashed on every call.
    import typing

    class Row(typing.TypedDict):
        a: int

    class Row2(typing.TypedDict):
        a: str

    assert codegraph.object_digest(Row) != codegraph.object_digest(Row2)

    @memo
    def f(x):
        return Row(a=x)

    assert f(1) == {"a": 1} and f(1) == {"a": 1}


def test_the_folder_cached_realpath_equals_the_os_one_through_every_kind_of_link(tmp_path):
    """origins.realpath resolves each folder once (a module's kind hangs on it: a site-packages
    file reached through a link is a library's, not the user's); it must agree with
    os.path.realpath on every loaded module and through links to folders, to files, relative,
    chained, dangling, and paths that are not normal."""
    import os

    d = tmp_path
    (d / "a" / "b" / "c").mkdir(parents=True)
    (d / "a" / "b" / "c" / "f.py").write_text("")
    os.symlink(d / "a" / "b", d / "l1")
    os.symlink("../a/b/c", d / "a" / "l2")
    os.symlink("l1/c", d / "l3")
    os.symlink("c/f.py", d / "a" / "b" / "lf.py")
    os.symlink("/nonexistent/x", d / "dangling")
    os.symlink("loop2", d / "loop1")
    os.symlink("loop1", d / "loop2")
    cases = [f"{d}/l1/c/f.py", f"{d}/a/l2/f.py", f"{d}/l3/f.py", f"{d}/a/b/lf.py", f"{d}/l1/lf.py",
             f"{d}/dangling", f"{d}/dangling/y.py", f"{d}/loop1/x.py", f"{d}/nope/x.py", "/", "//x",
             f"{d}/a/l2/../f.py", f"{d}/./l1/c/f.py", "relative/x.py"]
    cases += [f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if f]
    for path in cases * 2:  # the second pass reads the folder cache
        assert origins.realpath(path) == os.path.realpath(path), path


def test_a_distributions_name_and_version_read_from_its_headers_equal_the_parsed_metadata(tmp_path):
    """distribution_of reads Name and Version from the metadata's header lines (the email parser
    costs milliseconds a package): the same answer as importlib.metadata for every installed
    distribution, and for files whose headers are folded, spaced or missing."""
    from importlib import metadata

    def truth(name):
        d = metadata.distribution(name)
        try:
            return d.metadata["Name"] or name, d.version
        except KeyError:  # importlib_metadata's newer versions refuse a file without a Version
            return None

    names = sorted({d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]})
    site = tmp_path / "site"
    odd = {
        "spaced": "Metadata-Version: 2.1\nName:   spaced  \nVersion:\t1.2.3 \nSummary: x\n\nName: body-is-not-a-header\n",
        "folded": "Metadata-Version: 2.1\nSummary: one\n  Version: 9.9 (a continuation)\nName: folded\nVersion: 2.0\n",
        "crlf": "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 3.0\r\n\r\nbody\r\n",
        "noversion": "Metadata-Version: 2.1\nName: noversion\n\nVersion: 7 (the body)\n",
    }
    for name, text in odd.items():
        info = site / f"{name}-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_bytes(text.encode())
    sys.path.insert(0, str(site))
    try:
        origins.clear()
        for name in names + list(odd):
            want = truth(name)
            got = origins.distribution_of(name)
            assert got == want or (want is None and got[1] != "7 (the body)"), name
    finally:
        sys.path.remove(str(site))
        origins.clear()
    assert len(names) > 50
