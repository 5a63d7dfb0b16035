"""Every numpy dtype is hashed, stably across processes, by its values (issue 35).

``datetime64``/``timedelta64`` arrays (every time-series DataFrame) raised a raw
``ValueError`` from the buffer protocol ("cannot include dtype 'M' in a buffer").
And two kinds of arrays hashed bytes that are no value's, which numpy leaves as
whatever was in memory: the padding of aligned structs and the six unused bytes
of each x87 ``longdouble`` (``np.array([1.5], np.longdouble)`` differs there from
one process to the next), so their keys never repeated in a new process.

The catalogue below holds an array of every type in ``np.sctypeDict``, structs
(packed, aligned, with overlapping fields, with subarrays, with datetimes), strings,
unicode, void, object and ``StringDType`` arrays, and a scalar of each; the
memory under each array is filled with random bytes first, so any byte that is no
value's differs between the two processes that hash it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SRC, Calls, require

np = require("numpy")

CATALOGUE = r'''
import os
import numpy as np


def garbage(dtype, n):
    """An array of ``n`` elements over memory full of random bytes (numpy's np.empty, made worse)."""
    dtype = np.dtype(dtype)
    raw = np.frombuffer(bytearray(os.urandom(max(1, n * dtype.itemsize))), np.uint8)[: n * dtype.itemsize]
    return raw.view(dtype) if dtype.itemsize else np.empty(n, dtype)


def filled(dtype, values):
    a = garbage(dtype, len(values))
    a[...] = values
    return a


def structs():
    packed = np.dtype([("t", "M8[s]"), ("x", "<f8"), ("n", "<i2")])
    aligned = np.dtype([("a", "u1"), ("b", "<f8"), ("c", "<i2")], align=True)
    sub = np.dtype([("t", "M8[ms]"), ("v", "<f4", (2, 3)), ("tag", "S3")])
    nested = np.dtype([("p", aligned), ("q", "<u2")], align=True)
    overlap = np.dtype({"names": ["lo", "all"], "formats": ["<u2", "<u4"], "offsets": [0, 0]})
    sparse = np.dtype({"names": ["a", "b"], "formats": ["u1", "<f4"], "offsets": [0, 8], "itemsize": 16})
    titled = np.dtype({"names": ["a"], "formats": ["<i4"], "titles": ["the a field"]})
    ld = np.dtype([("a", "u1"), ("g", np.longdouble)])
    rows = []
    out = {}
    s = filled(packed, [(np.datetime64("2024-01-01T00:00:01"), 1.5, 3), (np.datetime64("NaT"), -0.0, -1)])
    out["struct_packed_datetime"] = s
    out["struct_aligned_padding"] = filled(aligned, [(1, 2.0, 3), (4, 5.0, 6)])
    out["struct_subarray"] = filled(sub, [(np.datetime64(5, "ms"), np.arange(6).reshape(2, 3), b"ab"),
                                          (np.datetime64(7, "ms"), -np.arange(6).reshape(2, 3), b"xyz")])
    out["struct_nested_aligned"] = filled(nested, [((1, 2.0, 3), 4), ((5, 6.0, 7), 8)])
    o = garbage(overlap, 2)
    o["all"] = [0x01020304, 0x0A0B0C0D]
    out["struct_overlapping_fields"] = o
    out["struct_sparse_offsets"] = filled(sparse, [(1, 2.5), (3, 4.5)])
    out["struct_titled"] = filled(titled, [(7,), (8,)])
    out["struct_longdouble"] = filled(ld, [(1, np.longdouble(1) / 3), (2, np.longdouble(2) / 7)])
    out["struct_object"] = np.array([(1, "a"), (2, None)], dtype=[("n", "<i4"), ("o", "O")])
    return out


def catalogue():
    """name -> an array, or a numpy scalar (``scalar:`` names), each built the same way every time."""
    out = {}
    for name, t in sorted(np.sctypeDict.items(), key=lambda kv: str(kv[0])):
        d = np.dtype(t)
        if d.kind == "O":
            a = np.array([1, "a", None, (2.5, b"x")], dtype=object)
        elif d.kind in "Mm":
            unit = np.datetime_data(d)[0]
            d = np.dtype(f"{d.str[:3]}[s]") if unit == "generic" else d
            a = filled(d, [0, 1, -5, 1_700_000_000])
            a[1] = np.datetime64("NaT") if d.kind == "M" else np.timedelta64("NaT")
        elif d.kind == "V":
            a = filled("V3", [b"ab\x00", b"xyz"])
        elif d.kind in "SU":
            a = filled(d.char + "5", ["ab", "hello", ""] if d.kind == "U" else [b"ab", b"hello", b""])
        elif d.kind == "b":
            a = filled(d, [True, False, True])
        elif d.kind in "fc":
            a = filled(d, (np.arange(1, 6, dtype=d) / 3) * (1 + (1j if d.kind == "c" else 0)))
        else:
            a = filled(d, [0, 1, 2, 100])
        out[f"array:{name}"] = a
        out[f"scalar:{name}"] = a[1] if a.dtype.kind != "O" else None
    out.pop("scalar:object", None)
    out.pop("scalar:object_", None)
    out.pop("scalar:O", None)
    out["array:M8[ns]"] = filled("M8[ns]", [0, 10**18])
    out["array:M8[D] 2-D"] = filled("M8[D]", [0, 1, 2, 3, 4, 5]).reshape(2, 3)
    out["array:m8[us]"] = filled("m8[us]", [0, 3])
    out["array:>M8[s] byte-swapped"] = filled(">M8[s]", [0, 1])
    out["array:>f8 byte-swapped"] = filled(">f8", [1.5, 2.5])
    out["array:>longdouble byte-swapped"] = filled(np.dtype(np.longdouble).newbyteorder(">"), [1.5, 2.5])
    out["array:clongdouble"] = filled(np.clongdouble, [np.clongdouble(1) / 3 + 1j])
    out["array:U unicode"] = filled("U4", ["é", "日本", "abcd"])
    out["array:S bytes"] = filled("S4", [b"\x00\x01", b"ab"])
    out["array:V8 void"] = filled("V8", [b"12345678", b"abcdefgh"])
    out["array:StringDType"] = np.array(["a", "bb", ""], dtype=np.dtypes.StringDType())
    out["array:StringDType na"] = np.array(["a", np.nan], dtype=np.dtypes.StringDType(na_object=np.nan))
    out["array:longdouble transposed view"] = filled(np.longdouble, np.arange(6) / 7).reshape(2, 3).T
    out["array:empty datetime"] = np.empty(0, "M8[s]")
    out["array:zero-size struct"] = np.zeros((0, 2), dtype=[("a", "u1"), ("b", "<f8")])
    for k, v in structs().items():
        out[f"array:{k}"] = v
        out[f"scalar:{k}"] = v[0]
    return out
'''

DIGESTS = r'''
import json
from memolab import hashing
import catalogue

out = {}
for name, x in catalogue.catalogue().items():
    try:
        out[name] = hashing.hash_value({"x": x})
    except Exception as e:  # the test names the failure
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
'''


def _load_catalogue(tmp_path):
    (tmp_path / "catalogue.py").write_text(CATALOGUE)
    sys.path.insert(0, str(tmp_path))
    try:
        import catalogue
    finally:
        sys.path.remove(str(tmp_path))
    sys.modules.pop("catalogue", None)
    return catalogue


@pytest.fixture(scope="module")
def digests(tmp_path_factory):
    """Each catalogue entry's digest in two fresh processes with different PYTHONHASHSEEDs."""
    root = tmp_path_factory.mktemp("dtypes")
    (root / "catalogue.py").write_text(CATALOGUE)
    (root / "digests.py").write_text(DIGESTS)
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join([SRC, str(root)]))
        cp = subprocess.run([sys.executable, "digests.py"], cwd=root, env=env, capture_output=True, text=True,
                            timeout=120)
        assert cp.returncode == 0, cp.stderr
        runs.append(json.loads(cp.stdout.strip().splitlines()[-1]))
    return runs


def test_the_catalogue_covers_every_numpy_type(tmp_path):
    names = _load_catalogue(tmp_path).catalogue()
    assert {f"array:{k}" for k in map(str, np.sctypeDict)} <= set(names)
    kinds = {x.dtype.kind for x in names.values() if isinstance(x, np.ndarray)}
    assert set("biufcmMOSUVT") <= kinds, set("biufcmMOSUVT") - kinds


def test_every_numpy_dtype_hashes_stably_across_processes(digests):
    first, second = digests
    failed = {k: v for k, v in first.items() if len(v) != 32}
    assert not failed, failed
    moved = sorted(k for k in first if first[k] != second[k])
    assert not moved, f"keys differ between two processes: {moved}"


def test_every_numpy_dtype_keys_by_its_values(tmp_path):
    """A changed value changes the digest for every entry: no kind is hashed by less than its content."""
    from memolab import hashing

    cat = _load_catalogue(tmp_path)
    for name, x in cat.catalogue().items():
        if name.startswith("scalar:") or x.size == 0:
            continue
        y = x.copy()
        flat = y.reshape(-1)
        if y.dtype.names:
            for field in y.dtype.names:  # every field counts, however it is laid out
                z = x.copy()
                f = z.reshape(-1)[field]
                f[...] = np.roll(f, 1, axis=0) if len(f) > 1 else np.zeros_like(f)
                if (z != x).any() if z.dtype.hasobject else z.tobytes() != x.tobytes():
                    assert hashing.hash_value(z) != hashing.hash_value(x), (name, field)
            continue
        if flat.dtype.kind in "Mm":
            flat[0] = flat.dtype.type(12345, np.datetime_data(flat.dtype)[0])
        elif flat.dtype.kind == "b":
            flat[0] = not flat[0]
        elif flat.dtype.kind == "O":
            flat[0] = "changed"
        elif flat.dtype.kind in "SUVT":
            flat[0] = b"zz" if flat.dtype.kind in "SV" else "zz"
        else:
            flat[0] = flat[0] + 1
        assert hashing.hash_value(y) != hashing.hash_value(x), name


def test_datetime_units_and_padding_bytes():
    from memolab import hashing

    H = hashing.hash_value
    ints = np.array([1, 2, 3])
    assert H(ints.astype("M8[s]")) != H(ints.astype("M8[ms]")) != H(ints.astype("m8[s]"))
    assert H(ints.astype("M8[s]")) != H(ints)  # the int64 view plus the unit, not the int64 array
    assert H(np.array(["2024-01-01"], "M8[D]")) == H(np.array(["2024-01-01"], "M8[D]"))
    # the same values over different padding: one key
    aligned = np.dtype([("a", "u1"), ("b", "<f8")], align=True)
    x, y = np.zeros(2, aligned), np.zeros(2, aligned)
    y.view(np.uint8)[1:8] = 0xAB  # the padding of the first record only
    x[:] = y[:] = [(1, 2.0), (3, 4.0)]
    assert x.tobytes() != y.tobytes() and H(x) == H(y) and H(x[0]) == H(y[0])
    if np.dtype(np.longdouble).itemsize == 16 and np.finfo(np.longdouble).nmant == 63:
        a = np.array([1.5, 2.5], np.longdouble)
        b = a.copy()
        b.view(np.uint8).reshape(2, 16)[:, 10:] = 0xCD
        assert a.tobytes() != b.tobytes() and H(a) == H(b) and H(a[0]) == H(b[0])
        b.view(np.uint8).reshape(2, 16)[0, 0] ^= 1  # the lowest bit of the mantissa is a value
        assert H(a) != H(b)


def test_a_memoized_function_takes_a_datetime_array(tmp_store):
    from memolab import memo

    calls = Calls()

    @memo
    def span(t):
        calls.append(1)
        return (t.max() - t.min()) / np.timedelta64(1, "h")

    t = np.array(["2024-01-01T00:00", "2024-01-02T06:00"], dtype="M8[m]")
    assert span(t) == 30.0 and span(t.copy()) == 30.0 and len(calls) == 1
    assert span(t.astype("M8[s]")) == 30.0 and len(calls) == 2  # another unit, another key
