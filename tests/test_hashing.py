"""The canonical rules of the deep hash, one test per rule (docs/hashing.md)."""
from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import decimal
import enum
import functools
import logging
import math
import pathlib
import struct
import threading

import pytest

import memolab
from conftest import Calls, require
from memolab import hashing
from memolab.errors import HashError
from memolab.hashing import hash_arguments, hash_value as H

# -- atoms ------------------------------------------------------------------------------

def test_numbers_of_different_types_differ():
    assert len({H(1), H(1.0), H(True), H("1"), H(b"1"), H(complex(1, 0)), H(decimal.Decimal(1))}) == 7
    assert H(0) != H(False) and H(0) != H(None) and H(0.0) != H(0)


def test_floats_by_bits():
    assert H(0.0) != H(-0.0)
    nan1 = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000))[0]
    nan2 = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    assert math.isnan(nan1) and math.isnan(nan2)
    assert H(nan1) != H(nan2)
    assert H(nan1) == H(struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000))[0])


def test_big_ints_and_strings():
    assert H(2**63) != H(2**63 - 1) and H(-(2**200)) != H(2**200)
    assert H("a" * 100_000) != H("a" * 99_999 + "b")
    assert H("\ud800") != H("\ud801")  # lone surrogates are hashed, not refused


def test_bytes_like_types_differ_but_are_content_hashed():
    assert H(b"abc") != H(bytearray(b"abc")) != H(memoryview(b"abc"))
    big = bytes(range(256)) * 40_000  # crosses the chunk-tree threshold
    assert H(big) == H(bytes(bytearray(big)))
    assert H(big) != H(big[:-1] + b"\x00")


# -- containers ---------------------------------------------------------------------------

def test_dict_order_ignored_ordered_dict_order_not():
    assert H({"a": 1, "b": 2}) == H({"b": 2, "a": 1})
    assert H({1: "x", "1": "y"}) == H({"1": "y", 1: "x"})
    od1 = collections.OrderedDict([("a", 1), ("b", 2)])
    od2 = collections.OrderedDict([("b", 2), ("a", 1)])
    assert H(od1) != H(od2)
    assert H(od1) != H(dict(od1))


def test_sequences_distinguish_type_and_order():
    assert H([1, 2]) != H((1, 2)) != H([2, 1])
    assert H([[1], 2]) != H([1, [2]])
    assert H(("ab", "c")) != H(("a", "bc"))  # lengths are framed


def test_sets_sorted_by_element_digest():
    s1 = {"x", "y", 3, 4.5}
    s2 = set(reversed(list(s1)))
    assert H(s1) == H(s2)
    assert H(s1) != H(frozenset(s1))
    assert H({1, 2}) != H({1, 3})


def test_shared_references_and_cycles_by_structure():
    a = [1, 2]
    assert H((a, a)) != H((a, copy.copy(a)))
    assert H((a, a)) == H(([1, 2],) * 2)  # equal structure, equal digest
    cyc = [1]
    cyc.append(cyc)
    cyc2 = [1]
    cyc2.append(cyc2)
    assert H(cyc) == H(cyc2)
    assert H(cyc) != H([1, [1]])
    d = {}
    d["self"] = d
    assert H(d) == H(d)


def test_namedtuple_and_subclasses_are_not_their_base():
    P = collections.namedtuple("P", "x y")
    Q = collections.namedtuple("Q", "x y")
    assert H(P(1, 2)) != H((1, 2))
    assert H(P(1, 2)) != H(Q(1, 2))
    assert H(P(1, 2)) == H(P(1, 2)) and H(P(1, 2)) != H(P(1, 3))

    class D(dict):
        pass

    dd = D(a=1)
    dd.extra = 5
    assert H(dd) != H({"a": 1})
    d2 = D(a=1)
    d2.extra = 6
    assert H(dd) != H(d2)


# -- objects ------------------------------------------------------------------------------

@dataclasses.dataclass
class Cfg:
    lr: float
    layers: list


@dataclasses.dataclass(frozen=True)
class FrozenCfg:
    lr: float


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class WithState:
    def __init__(self, x, cache):
        self.x, self.cache = x, cache

    def __getstate__(self):
        return {"x": self.x}  # the cache is not state


def test_dataclasses_by_class_and_fields():
    assert H(Cfg(0.1, [1])) == H(Cfg(0.1, [1]))
    assert H(Cfg(0.1, [1])) != H(Cfg(0.1, [2]))
    assert H(Cfg(0.1, [1])) != H(FrozenCfg(0.1))
    assert H(FrozenCfg(0.1)) != H(FrozenCfg(0.2))


def test_attrs_classes():
    attr = require("attr")

    @attr.s(slots=True)
    class A:
        x = attr.ib()

    assert H(A(1)) == H(A(1)) and H(A(1)) != H(A(2))


def test_enums_paths_datetimes_decimal_partial():
    assert H(Color.RED) != H(Color.BLUE) and H(Color.RED) != H(1)
    assert H(pathlib.PurePosixPath("a/b")) != H("a/b")
    assert H(pathlib.PurePosixPath("a/b")) != H(pathlib.PureWindowsPath("a/b"))
    assert H(datetime.date(2020, 1, 2)) != H(datetime.date(2020, 1, 3))
    assert H(datetime.datetime(2020, 1, 2)) != H(datetime.date(2020, 1, 2))
    tz = datetime.timezone(datetime.timedelta(hours=1))
    assert H(datetime.datetime(2020, 1, 2, tzinfo=tz)) != H(datetime.datetime(2020, 1, 2))
    assert H(decimal.Decimal("1.0")) != H(decimal.Decimal("1.00"))  # precision is part of a Decimal
    assert H(functools.partial(max, 1)) == H(functools.partial(max, 1))
    assert H(functools.partial(max, 1)) != H(functools.partial(max, 2))
    assert H(functools.partial(max, 1)) != H(functools.partial(min, 1))


def test_plain_objects_by_state_slots_and_getstate():
    assert H(Slotted(1, 2)) == H(Slotted(1, 2)) and H(Slotted(1, 2)) != H(Slotted(1, 3))
    assert H(WithState(1, [1])) == H(WithState(1, [2]))  # __getstate__ is honoured
    assert H(WithState(1, [1])) != H(WithState(2, [1]))


def test_functions_by_code_and_closure():
    def make(k):
        def f(x):
            return x + k
        return f

    assert H(make(1)) == H(make(1))
    assert H(make(1)) != H(make(2))
    assert H(len) != H(abs)


# -- registry ---------------------------------------------------------------------------

class Celsius:
    def __init__(self, t, note):
        self.t, self.note = t, note


class Tokenizer:
    def __init__(self, vocab, handle):
        self.vocab, self.handle = vocab, handle

    def __memo_hash__(self):
        return self.vocab


class Sampler:
    def __init__(self, n, gen, seen):
        self.n, self.gen, self.seen = n, gen, seen


class SubSampler(Sampler):
    pass


def test_register_hasher_uses_substitute_and_type():
    memolab.register_hasher(Celsius, lambda c: c.t)
    assert H(Celsius(10, "a")) == H(Celsius(10, "b"))
    assert H(Celsius(10, "a")) != H(Celsius(11, "a"))
    assert H(Celsius(10, "a")) != H(10)


def test_memo_hash_protocol():
    assert H(Tokenizer(["a"], object())) == H(Tokenizer(["a"], object()))
    assert H(Tokenizer(["a"], 1)) != H(Tokenizer(["b"], 1))


def test_register_opaque_is_constant_per_type():
    class Client:
        def __init__(self, url):
            self.url = url

    memolab.register_opaque(Client)
    assert H(Client("a")) == H(Client("b"))
    assert H(Client("a")) != H(None)
    # loggers are a typical opaque: they carry locks that cannot be hashed
    memolab.register_opaque(logging.Logger)
    assert H({"log": logging.getLogger("x")}) == H({"log": logging.getLogger("y")})


def test_policy_excludes_attributes_including_subclasses():
    memolab.register_policy(Sampler, exclude={"gen", "seen"})
    g1, g2 = (i for i in range(3)), (i for i in range(5))
    assert H(Sampler(3, g1, [1])) == H(Sampler(3, g2, [2, 3]))  # a live generator is no longer refused
    assert H(Sampler(3, g1, [])) != H(Sampler(4, g1, []))
    assert H(SubSampler(3, g1, [])) == H(SubSampler(3, g2, [9]))
    assert H(SubSampler(3, g1, [])) != H(Sampler(3, g1, []))  # the class still counts


def test_policy_applies_to_slots_too():
    class S:
        __slots__ = ("keep", "drop")

        def __init__(self, keep, drop):
            self.keep, self.drop = keep, drop

    memolab.register_policy(S, exclude={"drop"})
    assert H(S(1, 2)) == H(S(1, 3)) and H(S(1, 2)) != H(S(2, 2))


def test_an_object_whose_attributes_are_all_excluded_keys_as_one_with_none():
    """A cache filled as the object is used (pandas' ``_cache``, excluded by policy) is no state:
    pickle saves none for an empty ``__dict__``, so the object keys as before it was used (issue 35)."""
    class Dtype:
        def derived(self):
            self.__dict__.setdefault("_cache", {})["x"] = 1

    memolab.register_policy(Dtype, exclude={"_cache"})
    d = Dtype()
    key = H(d)
    d.derived()
    assert H(d) == key
    d.other = 2
    assert H(d) != key


# -- errors name the path -----------------------------------------------------------------

def test_error_paths_name_the_offending_object():
    class Loader:
        def __init__(self):
            self.dataset = Holder()

    class Holder:
        def __init__(self):
            self.gen = (i for i in range(3))

    with pytest.raises(HashError) as ei:
        hash_arguments([("loader", Loader())])
    assert str(ei.value).startswith("args['loader'].dataset.gen: cannot hash a live generator")

    with pytest.raises(HashError) as ei:
        hash_arguments([("cfg", {"items": [0, 1, 2, threading.Lock()]})])
    assert ei.value.path == "args['cfg']['items'][3]"

    with pytest.raises(HashError) as ei:
        H(Slotted(1, open(__file__)))
    assert ".b" in ei.value.path and "open file" in str(ei.value)
    ei.value.obj.close()


def test_hash_arguments_spans_one_memo_and_reports_per_argument():
    a = [1, 2]
    both, per = hash_arguments([("x", a), ("y", a)])
    copied, per2 = hash_arguments([("x", a), ("y", list(a))])
    assert both != copied
    assert per["x"] == per2["x"]
    assert hash_arguments([("x", 1)])[0] != hash_arguments([("y", 1)])[0]


def test_key_schema_names_algorithm_and_version():
    assert hashing.KEY_SCHEMA.startswith(hashing.SCHEMA + "-xxh3_128")
    assert str(hashing.CHUNK >> 20) in hashing.KEY_SCHEMA


def test_chunk_tree_does_not_depend_on_thread_count(monkeypatch):
    data = bytes(range(256)) * (5 * hashing.CHUNK // 256 + 7)  # several chunks, ragged tail
    digests = set()
    for n in ("1", "2", "3", "8"):
        monkeypatch.setenv("MEMOLAB_HASH_THREADS", n)
        digests.add(H(data))
    assert len(digests) == 1


def test_memo_ignore_leaves_arguments_out(tmp_store):
    calls = Calls()  # counts runs without joining the key

    @memolab.memo(ignore=["verbose"])
    def f(x, verbose=False):
        calls.append(x)
        return x * 2

    assert f(2, verbose=True) == 4
    assert f(2, verbose=False) == 4
    assert calls == [2]
    assert f(3) == 6 and calls == [2, 3]


def test_import_memolab_loads_neither_numpy_nor_torch(project):
    code = "import sys, memolab, memolab.hashing.files; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    assert project.run("-c", code).stdout.strip() == "[]"


def test_subclasses_of_value_types_do_not_share_keys_with_their_base():
    # a subclass may override behaviour (here: what indexing returns), so equal
    # content under another class must be another key
    import fractions
    from collections import OrderedDict

    class Doubling(OrderedDict):
        def __getitem__(self, k):
            return 2 * super().__getitem__(k)

    class Money(decimal.Decimal):
        pass

    class Half(fractions.Fraction):
        pass

    class Bound(functools.partial):
        pass

    for sub, base in [(Doubling(a=1), OrderedDict(a=1)), (Money("1.5"), decimal.Decimal("1.5")),
                      (Half(1, 2), fractions.Fraction(1, 2)), (Bound(max, 1), functools.partial(max, 1))]:
        assert H(sub) != H(base), type(sub).__name__
        assert H(sub) == H(copy.copy(sub))  # still a value: equal content, same key


def test_numpy_subclasses_hash_their_own_state():
    # the same bytes under another mask, or another attribute of a user subclass,
    # are other values: the sum of a masked array depends on its mask
    np = require("numpy")
    a = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    b = np.ma.array([1.0, 2.0, 3.0], mask=[0, 0, 0])
    assert a.sum() != b.sum()
    assert H(a) != H(b)
    assert H(a) == H(np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0]))

    class Tagged(np.ndarray):
        def __array_finalize__(self, obj):
            self.units = getattr(obj, "units", None)

    x = np.arange(3.0).view(Tagged)
    y = np.arange(3.0).view(Tagged)
    x.units, y.units = "m", "km"
    assert H(x) != H(y)
    y.units = "m"
    assert H(x) == H(y)


def test_flag_values_without_a_name_hash_by_value():
    # P(0) and IntFlag values with unnamed bits have name None: hashing crashed
    # (AttributeError) instead of keying them by value
    class P(enum.Flag):
        R = 1
        W = 2

    class Bits(enum.IntFlag):
        A = 1
        B = 2

    assert H(P(0)) == H(P(0)) and H(P(0)) != H(P.R)
    assert H(Bits(8)) != H(Bits(4)) and H(Bits(0)) != H(Bits(8))
    assert H(P.R | P.W) != H(P.R)


def test_cached_string_tokens_are_the_uncached_bytes():
    # the config walk writes attribute names, class symbols and code digests from a
    # by-value cache: it must emit exactly what _encode_str / write_str would
    from memolab.hashing import Encoder, _encode_str, _name_token, _str_token

    for s in ("", "batch_size", "é✓", "\udc80", "x" * 300, "mod:Qual.name"):
        for _ in range(2):  # uncached, then cached
            e = Encoder()
            _encode_str(e, s)
            assert _name_token(s) == bytes(e.buf)
            e = Encoder()
            e.write_str(s)
            assert _str_token(s) == bytes(e.buf)


def test_string_token_caches_are_bounded():
    from memolab import hashing

    for i in range(hashing._TOKEN_CACHE_MAX + 10):
        hashing._name_token(f"attr{i}")
        hashing._str_token(f"digest{i}")
    assert len(hashing._NAME_TOKENS) <= hashing._TOKEN_CACHE_MAX
    assert len(hashing._STR_TOKENS) <= hashing._TOKEN_CACHE_MAX


def test_a_handler_registered_for_a_scalar_type_is_seen_by_remembered_digests():
    """Digests of scalar-only calls are remembered (``hashing._scalar_digests``); registering a
    handler, even for ``int`` itself, must reach the next call's key."""
    from memolab import hashing

    before = hashing.hash_arguments([("x", 3)])
    assert hashing.hash_arguments([("x", 3)]) == before  # remembered
    original = hashing._dispatch[int]
    try:
        hashing.register_handler(int, lambda enc, obj: enc.write(b"custom" + str(obj).encode()))
        changed = hashing.hash_arguments([("x", 3)])
        assert changed[0] != before[0]
        assert changed == hashing._hash_arguments([("x", 3)], "args")
    finally:
        hashing.register_handler(int, original)
    assert hashing.hash_arguments([("x", 3)]) == before
    returned = hashing.hash_arguments([("x", 3)])[1]
    returned["x"] = "mutated by a caller"
    assert hashing.hash_arguments([("x", 3)]) == before  # callers get copies
