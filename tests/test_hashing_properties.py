"""Property tests: the digest is a function of the canonical value, nothing else.

* equal values hash equal — in this process, in fresh processes, under other
  PYTHONHASHSEEDs (set iteration order and str hashes change with the seed);
* values that differ under any canonical rule hash differently: the digest
  agrees with an independent reference canonicalisation (``canon``) in both
  directions.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import enum
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

from memolab.hashing import hash_value as H

settings.register_profile("memolab", deadline=None)  # (no timing asserted: a loaded machine's first example
settings.load_profile("memolab")  # may take longer than hypothesis's 200 ms deadline)

SRC = str(Path(__file__).resolve().parents[1] / "src")
HERE = str(Path(__file__).resolve().parent)


# Types a child process can import (this module is on its PYTHONPATH).
@dataclasses.dataclass
class Point:
    x: object
    y: object


Pair = collections.namedtuple("Pair", "a b")


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


atoms = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63, max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20) | st.binary(max_size=20)
)
hashable = st.recursive(atoms, lambda c: st.tuples(c, c) | st.frozensets(c, max_size=4), max_leaves=8)
values = st.recursive(
    atoms,
    lambda c: (
        st.lists(c, max_size=5)
        | st.tuples(c, c)
        | st.dictionaries(st.text(max_size=5) | st.integers(), c, max_size=5)
        | st.sets(hashable, max_size=5)
        | st.frozensets(atoms, max_size=5)
        | st.builds(Point, c, c)
        | st.builds(Pair, c, c)
        | st.sampled_from(Mode)
    ),
    max_leaves=20,
)


def canon(v):
    """Reference canonical form: equal iff the hashing rules say the values are equal."""
    t = type(v)
    if t is float:
        return ("float", struct.pack("<d", v))  # by bits: -0.0 and NaN payloads distinct
    if t in (int, bool, str, bytes, type(None)):
        return (t.__name__, v)
    if t in (list, tuple):
        return (t.__name__, tuple(canon(x) for x in v))
    if t is dict:
        return ("dict", frozenset((canon(k), canon(x)) for k, x in v.items()))
    if t in (set, frozenset):
        return (t.__name__, frozenset(canon(x) for x in v))
    if t is Point:
        return ("Point", canon(v.x), canon(v.y))
    if t is Pair:
        return ("Pair", canon(v.a), canon(v.b))
    if t is Mode:
        return ("Mode", v.name)
    raise AssertionError(t)


def _shuffled(v):
    """The same canonical value built in another order (dict insertion, set construction)."""
    t = type(v)
    if t is dict:
        return {k: _shuffled(x) for k, x in reversed(list(v.items()))}
    if t in (list, tuple):
        return t(_shuffled(x) for x in v)
    if t in (set, frozenset):
        return t(reversed([_shuffled(x) for x in v]))
    if t is Point:
        return Point(_shuffled(v.x), _shuffled(v.y))
    if t is Pair:
        return Pair(_shuffled(v.a), _shuffled(v.b))
    return v


@given(values)
def test_equal_values_hash_equal_in_process(v):
    assert H(v) == H(_shuffled(v)) == H(copy.deepcopy(v))


@given(values, values)
def test_digest_equality_matches_canonical_equality(a, b):
    assert (H(a) == H(b)) == (canon(a) == canon(b))


@given(st.integers())
def test_int_float_bool_str_never_collide(n):
    forms = [n, str(n), float(n) if abs(n) < 2**53 else str(n) + "x", n == 1, [n], (n,)]
    assert len({H(x) for x in forms}) == len({canon(x) for x in forms})


@given(st.floats(allow_nan=True), st.floats(allow_nan=True))
def test_floats_hash_by_bits(a, b):
    assert (H(a) == H(b)) == (struct.pack("<d", a) == struct.pack("<d", b))


@given(st.lists(values, min_size=1, max_size=4))
def test_shared_reference_differs_from_copy(x):
    # x is a fresh list: (x, x) shares it, (x, copy) does not
    assert H((x, x)) != H((x, list(x)))
    assert H((x, x)) == H((y := list(x), y))


_CHILD = r"""
import pickle, sys, json
sys.setrecursionlimit(10000)
from memolab.hashing import hash_value
values = pickle.load(open(sys.argv[1], "rb"))
print(json.dumps([hash_value(v) for v in values]))
"""


def _child_digests(path: str, seed: str) -> list:
    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join([SRC, HERE]))
    cp = subprocess.run([sys.executable, "-c", _CHILD, path], env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(values, min_size=10, max_size=30))
def test_equal_values_hash_equal_across_processes_and_hash_seeds(tmp_path_factory, batch):
    path = tmp_path_factory.mktemp("batch") / "values.pkl"
    # pickled by reference, so the child rebuilds sets in its own hash order
    sys.modules.setdefault("test_hashing_properties", sys.modules[__name__])
    for obj in (Point, Pair, Mode):
        obj.__module__ = "test_hashing_properties"
    path.write_bytes(pickle.dumps(batch))
    here = [H(v) for v in batch]
    for seed in ("0", "1", "12345"):
        assert _child_digests(str(path), seed) == here


scalar_args = st.lists(
    st.tuples(st.sampled_from(["a", "b", "lr", "seed"]),
              atoms | st.text(min_size=250, max_size=300) | st.binary(min_size=250, max_size=300)),
    max_size=4, unique_by=lambda p: p[0])


@given(scalar_args, scalar_args)
@example([("a", 0.0)], [("a", -0.0)])  # equal as dict keys, not as encodings
@example([("a", 1)], [("a", True)])
@example([("a", 1)], [("a", 1.0)])
@example([("a", float("nan"))], [("a", float("nan"))])
def test_remembered_scalar_argument_digests_are_the_encoded_ones(a, b):
    """``hash_arguments`` remembers the digests of calls made of plain scalars; what it
    returns is always what encoding the arguments gives, equal exactly when the
    arguments are canonically equal (bools and ints, 0.0 and -0.0, NaNs kept apart)."""
    from memolab.hashing import _hash_arguments, hash_arguments

    for named in (a, b):
        want = _hash_arguments(named, "args")
        assert hash_arguments(named) == want
        assert hash_arguments(list(named)) == want  # remembered: the same answer
    same = [(n, canon(v)) for n, v in a] == [(n, canon(v)) for n, v in b]
    assert (hash_arguments(a)[0] == hash_arguments(b)[0]) == same
