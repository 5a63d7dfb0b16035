"""Stored results round-trip through fresh processes, or miss cleanly.

Each test writes a small project, computes in one interpreter and loads in
another (sometimes a different program that lacks the definitions), so code
stored by value, checked references and memory-mapped buffers are exercised
exactly as a user meets them.
"""
from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import require

pytestmark = pytest.mark.slow

HELPERS = '''
import functools

def make_local_class(k):
    class LocalDS:
        def __init__(self, data):
            self.data = data
        def __getitem__(self, i):
            return self.data[i] * k
        def __len__(self):
            return len(self.data)
    return LocalDS

def to_map_style_dataset(items):
    # the torchtext pattern: a dataset class made on the fly by a helper
    class _MapStyleDataset:
        def __init__(self, it):
            self._data = list(it)
        def __getitem__(self, i):
            return self._data[i]
        def __len__(self):
            return len(self._data)
    return _MapStyleDataset(items)

def make_closure(k):
    def inner(x):
        return x * k + offset()
    def offset():
        return k
    return inner

def describe(r):
    """The behaviour of a result, as JSON: what a faithful load must reproduce."""
    shared = r["shared"]
    return {
        "lambda": r["lambda"](3),
        "closure": r["closure"](2),
        "local": [r["local"][i] for i in range(len(r["local"]))],
        "map_style": [r["map_style"][i] for i in range(len(r["map_style"]))],
        "main_obj": r["main_obj"].area(),
        "main_cls": r["main_cls"](2, 5).area(),
        "dyn": r["dyn"].hello(),
        "dyn_name": type(r["dyn"]).__name__,
        "partial": r["partial"](10),
        "bound": r["bound"](),
        "shared": r["shared_again"] is shared and r["cycle"][0] is r["cycle"],
        "recursive": r["recursive"](6),
    }
'''

PRODUCER = '''
import functools, json, sys
import memolab
import helpers

class Rect:
    def __init__(self, w, h):
        self.w, self.h = w, h
    def area(self):
        return self.w * self.h

def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)

Dyn = type("Dyn", (object,), {"hello": lambda self: "hi from type()"})

@memo_fn
def build(k):
    print("COMPUTED", file=sys.stderr)
    shared = {"x": [1, 2]}
    cycle = []
    cycle.append(cycle)
    g = globals()  # looked up dynamically: the key must not change when these do
    rect = g["Rect"](3, 4)
    return {
        "lambda": lambda x: x * k,
        "closure": helpers.make_closure(k),
        "local": helpers.make_local_class(k)([1, 2, 3]),
        "map_style": helpers.to_map_style_dataset(["a", "b"]),
        "main_obj": rect,
        "main_cls": g["Rect"],
        "dyn": g["Dyn"](),
        "partial": functools.partial(lambda a, b: a - b, b=k),
        "bound": rect.area,
        "shared": shared, "shared_again": shared, "cycle": cycle,
        "recursive": g["fact"],
    }

r = build(4)
print(json.dumps(helpers.describe(r)))
'''.replace("@memo_fn", "@memolab.memo")

CONSUMER = '''
# A different program: none of producer.py's definitions exist here.
import json
import helpers
from memolab.store import get_store

store = get_store()
(row,) = store.index.evaluations("__main__:build")
key = (row["fn"], row["code"], row["args"], row["schema"])
print(json.dumps(helpers.describe(store.load(key, row))))
'''


def test_code_round_trips_in_fresh_processes(project):
    project.write("helpers.py", HELPERS)
    project.write("producer.py", PRODUCER)
    project.write("consumer.py", CONSUMER)
    first = project.run("producer.py")
    assert "COMPUTED" in first.stderr
    want = json.loads(first.stdout.strip().splitlines()[-1])
    assert want["shared"] is True and want["recursive"] == 720
    second = project.run("producer.py")  # same program, live definitions: a hit
    assert "COMPUTED" not in second.stderr, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1]) == want
    # Another program without those definitions rebuilds them from the stored code.
    assert project.run_json("consumer.py") == want


def test_by_value_bytes_are_deterministic_across_processes(project):
    project.write("helpers.py", HELPERS)
    project.write("dump.py", '''
        import blake3, helpers
        from memolab import pickling
        class Point:
            __slots__ = ("x", "y")
            KINDS = frozenset({"a", "b", "c", "d", "e"})
            def norm(self):
                return self.x in {"p", "q", "r", "s"}
        p = Point(); p.x, p.y = 1, 2
        value = [p, Point, lambda v: v + 1, helpers.make_local_class(2), helpers.make_closure(3),
                 type("Made", (), {"f": lambda self: 1})]
        data, bufs = pickling.dumps(value)
        print(blake3.blake3(data).hexdigest())
    ''')
    digests = {project.run("dump.py", env={"PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "3")}
    assert len(digests) == 1


EDITED = '''
import importlib, json, sys
import memolab
from memolab.calls.explain import last_miss

@memolab.memo
def fit(kind):
    print("COMPUTED", file=sys.stderr)
    # Found by name at run time: the key of fit does not see the class's code,
    # so only the stored result's code reference can notice the edit.
    return getattr(importlib.import_module("models"), kind)()

before = str(fit.explain("Model"))
m = fit("Model")
print(json.dumps({"before": before, "predict": m.predict(), "last_miss": last_miss(fit.store(), fit.symbol)}))
'''


def test_result_whose_class_was_edited_is_a_quiet_miss_with_reason(project):
    project.write("models.py", "class Model:\n    def predict(self):\n        return 1\n")
    project.write("run.py", EDITED)
    first = project.run("run.py")
    assert "COMPUTED" in first.stderr
    hit = project.run("run.py")
    assert "COMPUTED" not in hit.stderr
    assert json.loads(hit.stdout.splitlines()[-1])["predict"] == 1
    project.write("models.py", "class Model:\n    def predict(self):\n        return 2\n")
    cp = project.run("run.py")
    out = json.loads(cp.stdout.splitlines()[-1])
    assert "COMPUTED" in cp.stderr
    assert "Warning" not in cp.stderr  # a code change is an ordinary miss, not damage
    assert out["predict"] == 2  # never the stale object
    assert "miss" in out["before"] and "`models:Model` changed" in out["before"]
    assert any("`models:Model` changed" in r for r in out["last_miss"]["reasons"])
    # and the recomputed result is stored and hit again
    again = project.run("run.py")
    assert "COMPUTED" not in again.stderr and json.loads(again.stdout.splitlines()[-1])["predict"] == 2


SHADOW = '''
import importlib, json, sys
import memolab
from memolab.calls.explain import last_miss

@memolab.memo
def fit(mod, kind):
    print("COMPUTED", file=sys.stderr)
    # Found by computed names: the key cannot see the class (memolab warns),
    # so only the stored result's code reference can notice an edit.
    return getattr(importlib.import_module(mod), kind)()

m = fit("profile", "Model")
print(json.dumps({"v": m.v, "why": str(last_miss(fit.store(), fit.symbol))}))
'''


def test_user_module_named_like_the_stdlib_is_checked_like_user_code(project):
    # A project's own profile.py (or secrets.py, queue.py, ...) shadows the
    # standard module of that name: it is user code, and a result holding its
    # class must miss once the class changes, not come back built by the old
    # __init__ (the stored state) under the new class.
    project.write("profile.py", "class Model:\n    def __init__(self):\n        self.v = 1\n")
    project.write("run.py", SHADOW)
    assert "COMPUTED" in project.run("run.py").stderr
    hit = project.run("run.py")
    assert "COMPUTED" not in hit.stderr and json.loads(hit.stdout.splitlines()[-1])["v"] == 1
    project.write("profile.py", "class Model:\n    def __init__(self):\n        self.v = 2\n")
    cp = project.run("run.py")
    out = json.loads(cp.stdout.splitlines()[-1])
    assert out["v"] == 2 and "COMPUTED" in cp.stderr  # never the stale object
    assert "`profile:Model` changed" in out["why"]


MAIN_EDIT = '''
import json, sys
import memolab
from memolab.calls.explain import last_miss

class Point:
    def __init__(self, x):
        self.x = x
    def value(self):
        return self.x + BODY

@memolab.memo
def make(x):
    print("COMPUTED", file=sys.stderr)
    return globals()["Point"](x)

p = make(1)
print(json.dumps({"value": p.value(), "same_class": type(p) is Point,
                  "why": fit_reasons if (fit_reasons := last_miss(make.store(), make.symbol)) else None}))
'''


def test_main_class_edited_between_runs_is_detected(project):
    project.write("main_edit.py", MAIN_EDIT.replace("BODY", "10"))
    assert "COMPUTED" in project.run("main_edit.py").stderr
    cp = project.run("main_edit.py")
    out = json.loads(cp.stdout.splitlines()[-1])
    assert "COMPUTED" not in cp.stderr and out["value"] == 11
    assert out["same_class"] is True  # the live, unchanged definition is used, so isinstance works
    project.write("main_edit.py", MAIN_EDIT.replace("BODY", "20"))
    cp = project.run("main_edit.py")
    out = json.loads(cp.stdout.splitlines()[-1])
    assert "COMPUTED" in cp.stderr and out["value"] == 21
    assert any("`__main__:Point` changed" in r for r in out["why"]["reasons"])


ARRAYS = '''
import json, sys, mmap
import numpy as np, torch
import memolab

@memolab.memo
def arrays(n):
    print("COMPUTED", file=sys.stderr)
    base = np.arange(n, dtype=np.float64)
    t = torch.arange(n, dtype=torch.float32).reshape(-1, 4)
    return {"base": base, "view": base[1:3], "rev": base[::-7],
            "t": t, "t_view": t[1:3], "t_cols": t[:, ::2], "t_T": t.T,
            "zero_dim": torch.tensor(2.5), "bf16": torch.arange(n, dtype=torch.bfloat16),
            "param": torch.nn.Parameter(torch.ones(3, 3)), "same_again": base}

@memolab.memo
def other(n):
    return {"copy": np.arange(n, dtype=np.float64)}  # equal bytes: must share the blob

def root(a):
    while isinstance(getattr(a, "base", None), np.ndarray):
        a = a.base
    return a.base

r = arrays(32768)
o = other(32768)
r["t"][0, 0] = 100.0  # writable (copy-on-write); must not leak into the store
n = 32768
ok = {
    "np_values": bool((r["view"] == np.arange(n)[1:3]).all() and (r["rev"] == np.arange(n, dtype=float)[::-7]).all()),
    "np_alias": bool(np.shares_memory(r["base"], r["view"]) and np.shares_memory(r["base"], r["rev"])),
    "np_same_obj": r["same_again"] is r["base"],
    "mapped": type(root(r["base"])).__name__,
    "t_alias": r["t"].untyped_storage().data_ptr() == r["t_view"].untyped_storage().data_ptr()
               == r["t_cols"].untyped_storage().data_ptr(),
    "t_cols_stride": list(r["t_cols"].stride()),
    "t_T_contig": r["t_T"].is_contiguous(),
    "zero_dim": [list(r["zero_dim"].shape), r["zero_dim"].item()],
    "bf16": [str(r["bf16"].dtype), float(r["bf16"][300])],
    "param": [type(r["param"]).__name__, r["param"].requires_grad],
    "t_first": float(r["t_view"][0, 0]),
}
print(json.dumps(ok))
'''


def test_numpy_and_torch_buffers_round_trip_mapped_with_aliasing(project):
    require("torch")
    project.write("arrays.py", ARRAYS)
    first = project.run("arrays.py")
    cp = project.run("arrays.py")
    assert "COMPUTED" not in cp.stderr
    out = json.loads(cp.stdout.splitlines()[-1])
    assert out == {
        "np_values": True, "np_alias": True, "np_same_obj": True,
        "mapped": "memoryview",  # straight from the mapped blob, no copy
        "t_alias": True, "t_cols_stride": [4, 2], "t_T_contig": False,
        "zero_dim": [[], 2.5], "bf16": ["torch.bfloat16", 300.0],
        "param": ["Parameter", True], "t_first": 4.0,
    }, (first.stdout, cp.stdout)
    # Written in the first process through the same code path, and equal.
    assert json.loads(first.stdout.splitlines()[-1])["t_alias"] is True
    # the arange in `other` has the same bytes as `base`: one blob serves both results
    from memolab.store import Store

    store = Store(project.store)
    rows = {r["fn"]: r for r in store.index.evaluations()}
    a = {d for d, _ in json.loads(rows["__main__:arrays"]["buffers"])}
    b = {d for d, _ in json.loads(rows["__main__:other"]["buffers"])}
    assert b <= a
    # no tensor data in the pickle payloads
    assert rows["__main__:arrays"]["payload_size"] < 8192


TAMPER = '''
import json, os, sys
import numpy as np
import memolab

@memolab.memo
def big(n):
    print("COMPUTED", file=sys.stderr)
    return np.full(n, 7.0)

if os.environ.get("WHY"):
    print(json.dumps(str(big.explain(100000))))
else:
    print(float(big(100000).sum()))
'''


def _blob(project, digest):
    return project.store / "blobs" / digest[:2] / digest[2:]


def _tamper(path):
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("which", ["payload", "buffer"])
def test_tampered_blob_is_refused(project, which):
    from memolab.store import Store

    project.write("tamper.py", TAMPER)
    assert "COMPUTED" in project.run("tamper.py").stderr
    (row,) = Store(project.store).index.evaluations()
    digest = row["payload"] if which == "payload" else json.loads(row["buffers"])[0][0]
    _tamper(_blob(project, digest))
    cp = project.run("tamper.py")
    assert "COMPUTED" in cp.stderr and "does not match its digest" in cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == "700000.0"  # recomputed, never the tampered value


def test_hmac_key_signs_entries_and_refuses_unsigned_or_forged(project):
    from memolab.store import Store

    project.write("tamper.py", TAMPER)
    assert "COMPUTED" in project.run("tamper.py").stderr  # unsigned: no key yet
    cp = project.run("tamper.py", env={"MEMOLAB_HMAC_KEY": "team-secret"})
    assert "COMPUTED" in cp.stderr and "unsigned" in cp.stderr  # refused, recomputed and signed
    (row,) = Store(project.store).index.evaluations(where="status='done'")
    assert row["signature"].startswith("hmac-sha256:")
    assert "COMPUTED" not in project.run("tamper.py", env={"MEMOLAB_HMAC_KEY": "team-secret"}).stderr
    cp = project.run("tamper.py", env={"MEMOLAB_HMAC_KEY": "another-key"})
    assert "COMPUTED" in cp.stderr and "signature does not match" in cp.stderr
    # A forged index row (pointing the entry at other bytes) fails the signature.
    store = Store(project.store)
    (row,) = store.index.evaluations(where="status='done'")
    with store.index.write() as c:
        c.execute("UPDATE evaluations SET payload_size=payload_size+1 WHERE id=?", (row["id"],))
    why = project.run_json("tamper.py", env={"MEMOLAB_HMAC_KEY": "another-key", "WHY": "1"})
    assert "miss" in why and "signature does not match" in why


def test_signed_store_refuses_a_buffer_edited_in_place_with_its_stamp_restored(project):
    # Buffers are trusted by their stat stamp (size, mtime, inode) to spare a
    # re-hash. Whoever can write the blob files can also put the mtime back,
    # so a signed store must not trust a stamp: the HMAC covers the buffer's
    # digest, and only re-hashing checks the bytes against it.
    from memolab.store import Store

    key = {"MEMOLAB_HMAC_KEY": "team-secret"}
    project.write("tamper.py", TAMPER)
    assert "COMPUTED" in project.run("tamper.py", env=key).stderr
    (row,) = Store(project.store).index.evaluations(where="status='done'")
    path = _blob(project, json.loads(row["buffers"])[0][0])
    st = path.stat()
    _tamper(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino  # edited in place: the stamp matches again
    cp = project.run("tamper.py", env=key)
    assert cp.stdout.strip().splitlines()[-1] == "700000.0"  # never the forged value
    assert "COMPUTED" in cp.stderr and "does not match its digest" in cp.stderr


FORGE = '''
import json, sys
import numpy as np
import memolab

@memolab.memo
def make(n):
    print("COMPUTED make", n, file=sys.stderr)
    return np.full(100000, float(n))

@memolab.memo
def total(a):
    print("COMPUTED total", file=sys.stderr)
    return float(a.sum())

print(json.dumps([total(make(1)), total(make(2))]))
'''


def test_signed_store_refuses_a_forged_result_digest(project):
    # A loaded array is hashed by the digest recorded with it (the snapshot's
    # result_digest), not by its bytes. So that digest decides the keys of the
    # functions it is passed to, and a signed store must sign it: here a forged
    # digest made total(make(1)) answer with total(make(2))'s result.
    from memolab.store import Store

    key = {"MEMOLAB_HMAC_KEY": "team-secret"}
    project.write("forge.py", FORGE)
    assert json.loads(project.run("forge.py", env=key).stdout.splitlines()[-1]) == [100000.0, 200000.0]
    store = Store(project.store)
    rows = {json.loads(r["snapshot"])["args"]["n"][1]: r for r in store.index.evaluations("__main__:make")}
    one, two = rows["1"], rows["2"]
    forged = json.loads(one["snapshot"])
    forged["result_digest"] = json.loads(two["snapshot"])["result_digest"]
    with store.index.write() as c:
        c.execute("UPDATE evaluations SET snapshot=? WHERE id=?", (json.dumps(forged), one["id"]))
    cp = project.run("forge.py", env=key)
    assert json.loads(cp.stdout.splitlines()[-1]) == [100000.0, 200000.0]
    assert "signature does not match" in cp.stderr


CONSUMER_CHECK = '''
import json
import helpers
from memolab import CodeChanged
from memolab.store import get_store

store = get_store()
(row,) = store.index.evaluations("__main__:build")
key = (row["fn"], row["code"], row["args"], row["schema"])
out = {"explain": store.check_entry(key, row)}
try:
    out["rect"] = store.load(key, row)["main_obj"].area()
except CodeChanged as e:
    out["changed"] = e.reason
print(json.dumps(out))
'''


def test_fresh_program_detects_that_the_defining_file_changed(project):
    project.write("helpers.py", HELPERS)
    project.write("producer.py", PRODUCER)
    project.write("consumer.py", CONSUMER_CHECK)
    project.run("producer.py")
    # Edits elsewhere in the file (a new line above, comments) do not matter.
    project.write("producer.py", "# a comment\nX = 1\n" + PRODUCER.replace("self.w * self.h", "self.w * self.h  # area"))
    assert project.run_json("consumer.py") == {"explain": None, "rect": 12}
    # The definition the stored code came from changed: the stored copy is stale.
    project.write("producer.py", PRODUCER.replace("self.w * self.h", "self.w * self.h + 1"))
    out = project.run_json("consumer.py")
    assert "rect" not in out
    assert "`__main__:Rect` changed in" in out["changed"] and "producer.py" in out["changed"]
    assert "`__main__:Rect` changed in" in out["explain"]
    # The file is gone (another machine, say): the stored code stands alone.
    (project.root / "producer.py").unlink()
    assert project.run_json("consumer.py") == {"explain": None, "rect": 12}
