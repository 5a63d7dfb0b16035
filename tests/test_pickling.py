"""The storage serializer in one process: dispatch, reductions, aliasing, references.

Fresh-process round trips (the cases that matter most) are in
``test_pickling_e2e.py``; these tests pin the rules that need no second process.
"""
from __future__ import annotations

import functools
import pickle
import sys
import types

import numpy as np
import pytest

from memolab import CodeChanged, pickling


def rt(obj):
    data, buffers = pickling.dumps(obj)
    return pickling.loads(data, buffers)


def test_large_arrays_go_out_of_band_small_ones_stay_in_band():
    big = np.arange(pickling.OUT_OF_BAND_MIN, dtype=np.uint8)
    small = np.arange(10)
    data, buffers = pickling.dumps({"big": big, "small": small})
    assert [b.nbytes for b in buffers] == [big.nbytes]
    assert len(data) < 1000  # no array data in the pickle
    out = pickling.loads(data, buffers)
    np.testing.assert_array_equal(out["big"], big)
    np.testing.assert_array_equal(out["small"], small)


def test_numpy_views_share_one_buffer_and_keep_aliasing():
    base = np.arange(40000, dtype=np.float64).reshape(200, 200)
    data, buffers = pickling.dumps((base, base[1:3], base[:, ::3], base.T, base[::-1]))
    assert len(buffers) == 1  # one root, written once
    b, v, s, t, r = pickling.loads(data, buffers)
    for view, want in ((v, base[1:3]), (s, base[:, ::3]), (t, base.T), (r, base[::-1])):
        np.testing.assert_array_equal(view, want)
        assert np.shares_memory(view, b)
    assert s.strides == base[:, ::3].strides


def test_lone_view_of_small_base_and_odd_arrays():
    a = np.arange(12, dtype=np.int16)[::2]
    out = rt([a, np.float32(3.5), np.array(7), np.zeros((0, 3)), np.asfortranarray(np.ones((3, 4))),
              np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]), np.array([{"x": 1}, None], dtype=object)])
    np.testing.assert_array_equal(out[0], a)
    assert out[1] == np.float32(3.5) and out[2].shape == () and out[2] == 7
    assert out[3].shape == (0, 3)
    assert out[4].flags.f_contiguous
    assert out[5]["b"][0] == 2.0
    assert out[6][0] == {"x": 1}


def test_datetime_and_timedelta_arrays_store_in_and_out_of_band():
    # The buffer protocol refuses dtype kinds 'M'/'m' (and structs holding
    # them): such arrays, and every pandas frame with a date column, could not
    # be stored at all. Their bytes must travel like any other array's.
    big = np.arange(pickling.OUT_OF_BAND_MIN).astype("datetime64[s]")
    values = [np.array(["2020-01-01", "NaT"], dtype="datetime64[D]"), big, big[::-3], big[10:20],
              np.arange(9).astype("timedelta64[ms]").reshape(3, 3).T,
              np.zeros(4, dtype=[("t", "M8[ns]"), ("x", ">f8")]), np.zeros((2, 0), dtype="m8[s]")]
    data, buffers = pickling.dumps(values)
    out = pickling.loads(data, buffers)
    for got, want in zip(out, values, strict=False):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert np.shares_memory(out[1], out[2]) and np.shares_memory(out[1], out[3])


def test_shared_and_cyclic_references_survive():
    shared = {"k": [1, 2]}
    cyc: list = [shared]
    cyc.append(cyc)
    out = rt({"a": shared, "b": shared, "c": cyc})
    assert out["a"] is out["b"]
    assert out["c"][1] is out["c"] and out["c"][0] is out["a"]


class Proxy:
    """Claims to be a list: ``__class__`` lies, ``type()`` does not."""

    def __init__(self):
        self.payload = 5

    @property
    def __class__(self):  # type: ignore[override]
        return list


def test_dispatch_uses_type_not_dunder_class():
    p = Proxy()
    assert isinstance(p, list)  # the lie pickling must not believe
    out = rt(p)
    assert type(out) is Proxy and out.payload == 5


class Counted:
    inits = 0

    def __init__(self, x):
        Counted.inits += 1
        self.x = x

    def __reduce__(self):
        return _make_counted, (self.x * 10,)


def _make_counted(v):
    obj = Counted.__new__(Counted)
    obj.x = v
    return obj


class WithState:
    def __init__(self):
        raise AssertionError("unpickling must not re-run __init__")

    def __getstate__(self):
        return {"kept": self.kept}

    def __setstate__(self, state):
        self.kept = state["kept"] + 1


def test_own_reduce_and_getstate_are_honoured():
    Counted.inits = 0
    c = Counted(2)
    w = WithState.__new__(WithState)
    w.kept, w.dropped = 1, 2
    out = rt([c, w])
    assert out[0].x == 20 and Counted.inits == 1
    assert out[1].kept == 2 and not hasattr(out[1], "dropped")


def test_functions_partial_bound_methods_local_classes_lambdas():
    def make(k):
        class Local:
            scale = k

            def __init__(self, v):
                self.v = v

            def value(self):
                return self.v * self.scale + helper()

        def helper():
            return k

        return Local

    Local = make(3)
    obj = Local(2)
    lam = lambda x, y=4: x * y  # noqa: E731
    Dyn = type("Dyn", (object,), {"f": lambda self: 41, "__slots__": ("a",)})
    d = Dyn()
    d.a = 1

    def rec(n):
        return 1 if n <= 1 else n * rec(n - 1)

    out = rt([obj, obj.value, functools.partial(lam, 2), lam, d, rec])
    assert out[0].value() == 9 and out[1]() == 9
    assert out[2]() == 8 and out[3](3, 2) == 6
    assert out[4].f() == 41 and out[4].a == 1
    assert out[5](5) == 120


def test_local_dataclass_abc_super_and_descriptors_round_trip():
    import abc
    import dataclasses

    def make():
        class Base(abc.ABC):
            @abc.abstractmethod
            def name(self): ...

            def hello(self):
                return "base:" + self.name()

        @dataclasses.dataclass
        class Child(Base):
            x: int
            tags: list = dataclasses.field(default_factory=list, metadata={"doc": "labels"})

            def name(self):
                return "child"

            def hello(self):
                return "child+" + super().hello()

            @property
            def n(self):
                return self.x + len(self.tags)

            @staticmethod
            def s():
                return 9

            @classmethod
            def c(cls):
                return cls.__name__

        return Base, Child

    Base, Child = make()
    data, bufs = pickling.dumps([Base, Child(1, ["a"])])
    B2, obj = pickling.loads(data, bufs)
    assert B2 is not Base  # rebuilt from the stored code (a local class has no name to find)
    assert obj.hello() == "child+base:child" and obj.n == 2 and obj.s() == 9 and obj.c() == "Child"
    assert obj == type(obj)(1, ["a"]) and dataclasses.fields(obj)[1].metadata["doc"] == "labels"
    assert isinstance(obj, B2)
    with pytest.raises(TypeError):
        B2()  # still abstract


def test_by_value_class_with_cached_property_stores():
    # Python 3.11's cached_property holds an RLock: pickling the class body by
    # value failed, so any result holding such an instance was never stored.
    def make():
        class Lazy:
            def __init__(self):
                self.runs = 0

            @functools.cached_property
            def val(self):
                """the answer"""
                self.runs += 1
                return 42

        return Lazy

    obj = rt(make()())
    assert (obj.val, obj.val, obj.runs) == (42, 42, 1)
    assert type(obj).__dict__["val"].__doc__ == "the answer"


def test_by_value_abc_keeps_its_virtual_subclasses():
    # ABC.register() lives in _abc_impl, which is not a class attribute one can
    # copy: without replaying it, isinstance() answers differently after a load.
    import abc

    def make():
        class Shape(abc.ABC):  # noqa: B024 (an ABC with no abstract method: its class pickles by reference)
            pass

        class Ext:
            pass

        Shape.register(Ext)
        Shape.register(int)
        return Shape, Ext

    Shape, Ext = make()
    S2, E2, e2 = rt([Shape, Ext, Ext()])
    assert S2 is not Shape
    assert isinstance(e2, S2) and issubclass(E2, S2) and isinstance(3, S2)
    assert not isinstance("x", S2)


def test_by_value_class_reached_again_while_building_is_made_once():
    # Saving A() saves A's base, whose registry (class state) holds A again:
    # pickle writes A's construction twice and keeps the first. The second
    # construction must not make a second class: Plugin.__init_subclass__ ran
    # on it and registered an empty class in place of A.
    def make():
        class Plugin:
            registry = {}

            def __init_subclass__(cls, **kw):
                super().__init_subclass__(**kw)
                Plugin.registry[cls.__name__] = cls

        class A(Plugin):
            def run(self):
                return "A ran"

        return Plugin, A

    Plugin, A = make()
    out = rt({"a": A(), "reg": Plugin.registry})
    assert type(out["a"]) is out["reg"]["A"]
    assert out["reg"]["A"]().run() == "A ran"


_counter = 0


def test_by_value_functions_of_one_module_share_their_globals():
    # Functions from one module see one global namespace: a global rebound by
    # one must be seen by the other after a load, as it was before.
    def make():
        def inc():
            global _counter
            _counter += 1
            return _counter

        def get():
            return _counter

        return inc, get

    inc, get = rt(make())
    assert inc() == 1 and get() == 1 and inc() == 2 and get() == 2
    assert _counter == 0  # the rebuilt copies never write into the live module


_seen: set = set()


def test_by_value_functions_share_a_global_set_and_a_captured_one():
    # Sets in code are written sorted (for deterministic bytes); each use must
    # still come back as one set, or an add() is not seen by a contains().
    def make():
        local_set = set()

        def add(x):
            _seen.add(x)
            local_set.add(x)

        def has(x):
            return x in _seen and x in local_set

        return add, has

    add, has = rt(make())
    add("k")
    assert has("k")
    assert not _seen


def test_set_slots_are_written_in_sorted_order():
    def make():
        class Slotted:
            __slots__ = {"alpha", "beta", "gamma", "delta", "eps"}

        return Slotted

    Slotted = make()
    data, _ = pickling.dumps(Slotted)
    names = sorted(Slotted.__slots__)
    positions = [data.index(n.encode()) for n in names]
    assert positions == sorted(positions)
    S2 = rt(Slotted)
    assert S2.__slots__ == Slotted.__slots__ and type(S2.__slots__) is set


def test_closures_over_one_variable_share_it_after_a_load():
    # The classic counter: inc() rebinds n (nonlocal), get() reads it. Both
    # close over one cell; copies of its value would let them drift apart.
    def make():
        n = 0

        def inc():
            nonlocal n
            n += 1
            return n

        def get():
            return n

        def fact(k):  # a closure over itself
            return 1 if k <= 1 else k * fact(k - 1)

        return inc, get, fact

    inc, get, fact = rt(make())
    assert (inc(), get(), inc(), get()) == (1, 1, 2, 2)
    assert fact(5) == 120


def test_init_subclass_and_metaclass_see_the_plain_class_attributes():
    # A rebuilt class is made first and filled after (its methods may refer
    # back to it), but __init_subclass__ and a metaclass run when it is made:
    # they must already see its plain data attributes (a plugin's name).
    def make():
        class Plugin:
            registry = {}

            def __init_subclass__(cls, **kw):
                super().__init_subclass__(**kw)
                Plugin.registry[cls.name] = cls.__name__

        class Meta(type):
            def __new__(mcls, name, bases, ns):
                ns.setdefault("label", name.lower() + ":" + ns.get("unit", "?"))
                return super().__new__(mcls, name, bases, ns)

        class A(Plugin):
            name = "a"

        class M(metaclass=Meta):
            unit = "kg"

        return A, M

    A, M = make()
    A2, M2 = rt([A, M])
    assert A2.name == "a" and A2.__mro__[1].registry == {"a": "A"}
    assert M2.label == "m:kg"


_T = __import__("typing").TypeVar("_T")


def test_by_value_generic_class_round_trips():
    # typing.Generic's __init_subclass__ reads __orig_bases__ from the
    # namespace the class is made with ("Cannot inherit from plain Generic").
    import typing

    def make():
        class Box(typing.Generic[_T]):
            def __init__(self, v: _T) -> None:
                self.v = v

        class IntBox(Box[int]):
            pass

        return Box, IntBox(3)

    Box, ib = rt(make())
    assert ib.v == 3 and Box.__parameters__ == (_T,) and isinstance(ib, Box)
    assert Box[str](1).v == 1


def test_by_value_wrapper_keeps_the_name_wraps_gave_it():
    def make():
        def deco(f):
            @functools.wraps(f)
            def wrapper(*a):
                return f(*a) + 1

            return wrapper

        @deco
        def score(x):
            return x

        return score

    score = rt(make())
    assert score(1) == 2
    assert (score.__name__, score.__qualname__.rsplit(".", 1)[-1]) == ("score", "score")


def test_by_value_code_from_another_python_is_a_miss():
    data, bufs = pickling.dumps(lambda: 1)
    other = data.replace(b"\x8c\x04" + pickling._PYVER.encode(), b"\x8c\x04" + b"9.99"[: len(pickling._PYVER)])
    with pytest.raises(CodeChanged, match="compiled by Python 9"):
        pickling.loads(other, bufs)


def test_references_to_user_modules_are_checked(tmp_path, monkeypatch):
    mod = tmp_path / "userthing.py"
    mod.write_text("class Model:\n    def predict(self):\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import userthing  # type: ignore[import-not-found]

    data, bufs, refs = pickling.dumps_with_refs(userthing.Model())
    assert list(refs) == ["userthing:Model"]
    assert type(pickling.loads(data, bufs)) is userthing.Model
    assert pickling.check_refs(refs) is None
    # Edit and re-import: same symbol, new code.
    mod.write_text("class Model:\n    def predict(self):\n        return 2\n")
    del sys.modules["userthing"]
    import userthing as again  # type: ignore[import-not-found]  # noqa: F401

    with pytest.raises(CodeChanged, match="userthing:Model` changed"):
        pickling.loads(data, bufs)
    assert "changed" in pickling.check_refs(refs)
    del sys.modules["userthing"]
    mod.unlink()
    with pytest.raises(CodeChanged, match="no longer exists"):
        pickling.loads(data, bufs)
    monkeypatch.delitem(sys.modules, "userthing", raising=False)


def test_library_code_is_pickled_by_name_without_a_reference():
    import collections

    data, bufs, refs = pickling.dumps_with_refs([collections.OrderedDict(a=1), len, np.float32, functools.partial])
    assert refs == {}
    assert rt(collections.OrderedDict(a=1)) == {"a": 1}


def test_frozenset_constants_are_written_in_sorted_order():
    src = "def f(x):\n    return x in {'alpha', 'beta', 'gamma', 'delta'}\n"
    ns: dict = {"__name__": "__main__"}
    exec(compile(src, "<memolab-test>", "exec"), ns)
    data, _ = pickling.dumps(types.FunctionType(ns["f"].__code__, ns, "f"))
    i = data.index(b"alpha")
    assert data.index(b"beta", i) < data.index(b"delta", i) < data.index(b"gamma", i)


def test_enum_by_value_is_refused_clearly():
    import enum

    Color = enum.Enum("Color", "RED GREEN")
    Color.__module__ = "__main__"
    with pytest.raises(pickle.PicklingError, match="enum class"):
        pickling.dumps(Color)


def test_find_unpicklable_names_the_path():
    import threading

    path, reason = pickling.find_unpicklable({"ok": 1, "bad": [1, threading.Lock()]})
    assert path == "result['bad'][1]" and "lock" in reason


from hypothesis import (  # noqa: E402
    given,
    settings,
    strategies as st,  # noqa: E402
)

settings.register_profile("memolab", deadline=None)  # (no timing asserted: a loaded machine's first example
settings.load_profile("memolab")  # may take longer than hypothesis's 200 ms deadline)

_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8)
_values = st.recursive(_leaves, lambda kids: st.lists(kids, max_size=4) | st.tuples(kids, kids)
                       | st.dictionaries(st.text(max_size=4), kids, max_size=4) | st.frozensets(_leaves, max_size=4),
                       max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(_values)
def test_plain_data_round_trips_exactly(value):
    out = rt(value)
    assert out == value and type(out) is type(value)
