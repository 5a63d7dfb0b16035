"""The @memo decorator in one process: keys, options, errors, explain."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings

import numpy as np
import pytest

import memolab
from memolab import HashError, MemolabWarning, memo
from memolab.hashing import hash_value


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


# Closure cells are hashed by value (docs/code-dependencies.md), and these tests'
# functions capture a run counter that they mutate: it is a side channel, not an
# input, so it is left out of keys the way a user leaves out a logger.
memolab.register_opaque(Counter)


def test_miss_then_hit_and_binding(tmp_store):
    runs = Counter()

    @memo
    def load(n: int, scale: float = 1.0):
        runs()
        return [n * scale]

    assert load(1) == [1.0]
    # positional, keyword and explicit-default forms share one key
    assert load(n=1) == [1.0]
    assert load(1, scale=1.0) == [1.0]
    assert load(1, 1.0) == [1.0]
    assert runs.n == 1
    assert load(2) == [2.0]
    assert load(1, scale=2.0) == [2.0]
    assert runs.n == 3


def test_int_float_bool_are_distinct_keys(tmp_store):
    runs = Counter()

    @memo
    def ident(x):
        runs()
        return repr(x)

    assert [ident(1), ident(1.0), ident(True)] == ["1", "1.0", "True"]
    assert runs.n == 3


def test_dict_order_is_ignored(tmp_store):
    runs = Counter()

    @memo
    def f(cfg):
        runs()
        return sorted(cfg.items())

    f({"a": 1, "b": 2})
    f({"b": 2, "a": 1})
    assert runs.n == 1


def test_result_is_a_fresh_object_on_every_hit(tmp_store):
    @memo
    def f():
        return {"xs": [1, 2, 3]}

    f()
    a = f()
    a["xs"].append(99)  # the caller mutates its copy ...
    assert f() == {"xs": [1, 2, 3]}  # ... which never leaks into the store


def test_ignore_and_version(tmp_store):
    runs = Counter()

    @memo(ignore=["verbose"])
    def train(cfg, verbose=False):
        runs()
        return cfg["lr"] * 2

    assert train({"lr": 1}) == 2
    assert train({"lr": 1}, verbose=True) == 2
    assert runs.n == 1

    def body(x):
        runs()
        return x

    v1 = memo(version="1")(body)
    v2 = memo(version="2")(body)
    v1(5)
    v1(5)
    v2(5)
    assert runs.n == 3


def test_ignore_unknown_parameter_is_an_error():
    with pytest.raises(TypeError, match="verbos"):
        @memo(ignore=["verbos"])
        def f(x, verbose=False):
            return x


def test_exceptions_propagate_and_are_not_stored(tmp_store):
    runs = Counter()

    class Boom(Exception):
        pass

    @memo
    def f(x):
        if runs() == 1:
            raise Boom("first call fails")
        return x

    with pytest.raises(Boom, match="first call fails"):
        f(1)
    assert f(1) == 1
    assert runs.n == 2
    assert f(1) == 1
    assert runs.n == 2


def test_generator_functions_are_refused():
    with pytest.raises(TypeError, match=r"generator function '.*gen'"):
        @memo
        def gen():
            yield 1

    with pytest.raises(TypeError, match=r"generator function '.*agen'"):
        @memo
        async def agen():
            yield 1


def test_async_functions(tmp_store):
    runs = Counter()

    @memo
    async def fetch(x):
        runs()
        await asyncio.sleep(0)
        return x * 10

    assert asyncio.run(fetch(3)) == 30
    assert asyncio.run(fetch(3)) == 30
    assert runs.n == 1


def test_unstorable_result_warns_with_path_and_returns_value(tmp_store):
    runs = Counter()

    @memo
    def f():
        runs()
        return {"ok": 1, "bad": [1, (i for i in range(2))]}  # a live generator cannot be stored

    with pytest.warns(MemolabWarning, match=r"result\['bad'\]\[1\]"):
        out = f()
    assert out["ok"] == 1 and next(out["bad"][1]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f()
    assert runs.n == 2  # nothing was stored, so it recomputed


def test_hash_error_names_the_path(tmp_store):
    class Cfg:
        def __init__(self):
            self.items = [1, 2, 3, (i for i in range(3))]

    @memo
    def train(cfg):
        return 1

    with pytest.raises(HashError) as e:
        train(Cfg())
    assert str(e.value).startswith("args['cfg'].items[3]: cannot hash a live generator")


def test_clear_and_fresh(tmp_store):
    runs = Counter()

    @memo
    def f(x):
        return (x, runs())

    assert f(1) == (1, 1)
    assert f(1) == (1, 1)
    assert f.fresh(1) == (1, 2)
    assert f(1) == (1, 2)  # fresh overwrote the stored value
    assert f.clear() == 1
    assert f(1) == (1, 3)


def test_explain(tmp_store):
    @memo
    def train(lr, epochs=3):
        return lr * epochs

    assert "no stored evaluation" in str(train.explain(0.001))
    train(0.001)
    ex = train.explain(0.001)
    assert ex.hit and "stored evaluation" in str(ex)
    ex = train.explain(0.0003)
    assert not ex.hit
    assert "lr 0.001 -> 0.0003" in str(ex)


def test_methods(tmp_store):
    runs = Counter()

    class Model:
        def __init__(self, k):
            self.k = k

        @memo
        def predict(self, x):
            runs()
            return self.k * x

    assert Model(2).predict(3) == 6
    assert Model(2).predict(3) == 6  # equal state, equal key
    assert Model(5).predict(3) == 15
    assert runs.n == 2


def test_numpy_results_are_read_only_and_deduplicated(tmp_store):
    big = np.arange(1_000_000, dtype=np.float64)

    @memo
    def a():
        return big

    @memo
    def b():
        return {"same": big}

    a()
    b()
    store = a.store()
    blob_sizes = sorted(store.blobs.size(d) for d in store.blobs)
    # two small pickles plus ONE 8 MB buffer shared by both results
    assert sum(1 for s in blob_sizes if s >= big.nbytes) == 1
    out = a()
    assert np.array_equal(out, big)
    assert not out.flags.writeable  # read-only: a write can never reach the blob or the next hit
    with pytest.raises(ValueError):
        out[0] = -1
    assert np.array_equal(a(), big)
    assert np.array_equal(b()["same"], big)


def test_numpy_arrays_hash_by_dtype_shape_and_bytes():
    a = np.arange(6, dtype=np.float32)
    assert hash_value(a) == hash_value(a.copy())
    assert hash_value(a) != hash_value(a.reshape(2, 3))
    assert hash_value(a.reshape(2, 3)) != hash_value(a.reshape(3, 2))
    assert hash_value(a) != hash_value(a.view(np.int32))
    assert hash_value(a.reshape(2, 3).T) == hash_value(np.ascontiguousarray(a.reshape(2, 3).T))


def test_import_memolab_imports_neither_numpy_nor_torch():
    code = "import sys, memolab; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_configure_rejects_unknown_settings():
    with pytest.raises(TypeError):
        memolab.configure(nonsense=1)
    with pytest.raises(ValueError):
        memolab.configure(version_sensitivity="sometimes")


def test_numpy_results_load_memory_mapped(tmp_store):
    import mmap

    @memo
    def make():
        return np.ones(1_000_000)

    make()
    make.store().forget()  # drop the in-process copy: load from the store
    out = make()
    base = out
    while isinstance(getattr(base, "base", None), np.ndarray):
        base = base.base
    buf = base.base
    assert isinstance(buf, memoryview) and isinstance(buf.obj, mmap.mmap)


def test_missing_blob_is_a_miss_that_recomputes_and_repairs(tmp_store):
    runs = Counter()

    @memo
    def f():
        runs()
        return np.arange(100_000)

    f()
    store = f.store()
    for d in list(store.blobs):
        store.blobs.path(d).unlink()
    store.forget()
    with pytest.warns(MemolabWarning, match="missing"):
        assert f()[-1] == 99_999
    assert runs.n == 2
    store.forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f()[-1] == 99_999  # repaired: a clean hit
    assert runs.n == 2


def test_binding_fast_path_agrees_with_signature_bind(tmp_store):
    """Plain signatures are bound by hand for speed; every form must give the key
    ``inspect.Signature.bind`` gives, and every error it raises."""
    @memo
    def f(a, b=2, *, c=3, d):
        return (a, b, c, d)

    k = f.key(1, d=4)
    assert f.key(1, 2, d=4) == k
    assert f.key(a=1, d=4, c=3) == k
    assert f.key(d=4, b=2, a=1) == k
    assert f.key(1, d=4, c=5) != k
    assert f(1, d=4) == (1, 2, 3, 4)
    for bad_args, bad_kwargs in [((1, 2, 3), {"d": 4}), ((1,), {}), ((1,), {"d": 4, "e": 5}), ((1,), {"a": 1, "d": 4})]:
        with pytest.raises(TypeError, match=r"f\(\)"):
            f(*bad_args, **bad_kwargs)


def test_a_callable_object_memoized_directly_is_keyed_by_its_current_state(tmp_store):
    # memo(obj.run), memo(partial(...)) and memo(instance) take hidden inputs from
    # the object: its state when called, not when first called, is in the key
    import functools

    class Scaler:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k

        def run(self, x):
            return x * self.k

    s = Scaler(2)
    direct, method = memo(s), memo(s.run)
    assert direct(1) == 2 and method(1) == 2
    s.k = 3
    assert direct(1) == 3 and method(1) == 3
    s.k = 2
    assert direct(1) == 2 and method(1) == 2

    def total(xs, y):
        return sum(xs) + y

    xs = [1]
    p = memo(functools.partial(total, xs))
    assert p(0) == 1
    xs.append(10)
    assert p(0) == 11
