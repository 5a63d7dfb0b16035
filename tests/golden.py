"""Golden vectors: digests and a store that must not drift between releases (tests/test_golden.py).

What is pinned (tests/data/golden/):

* ``vectors.json``: the argument digest (``hashing.hash_value``) of each canonical value below
  (``VALUES``), the code digest of each canonical source in ``golden_src.py`` (``CODE``), and the
  full key of a few calls (``CALLS``), with the ``KEY_SCHEMA`` and ``CODE_SCHEMA`` they were
  computed under;
* ``stores/<KEY_SCHEMA>+<CODE_SCHEMA>/``: a small store (index + blob files) written by the memolab
  of that schema pair, with ``manifest.json`` (which calls it holds, their keys). Every later
  memolab must read it: its rows listed, each loaded back equal to the un-memoized truth, and, while
  the schemas are the same, each call a HIT.

Run it (what the test does, in one fresh process with a controlled environment)::

    python tests/golden.py              # prints a JSON report: the vectors now, and each store's check

Regenerate after a deliberate change of the key format::

    python tests/golden.py --write

``--write`` rewrites vectors.json and adds a store fixture for the current schema pair when there is
none; it never rewrites an existing fixture (that store is what the released version wrote) and it
refuses to change a digest while the schemas are unchanged: a digest that moved with the same schema
is exactly the bug the test catches (old rows would match new values, or every user's store would
miss silently). So: bump ``SCHEMA`` in hashing/primitives.py (h3 → h4) or ``CODE_SCHEMA`` in
codegraph/where.py (c3 → c4), write the CHANGELOG's "Recomputed once after the upgrade" entry, then
``--write``. ``--write --same-schema`` is the escape hatch for a drift that is not memolab's (a
library's new release changed what its own objects hold); say so in the CHANGELOG.

The rule for old stores (docs/hashing.md, "Golden vectors"): a store whose schema pair is the current
one must HIT; one of an older pair must MISS by design (its keys carry the old schema) and still be
read without loss: opened, upgraded in place when written, every row listed and loaded back equal to
the truth. Old fixtures are kept, so each schema generation stays readable by every later one.

The vectors are computed in a subprocess whose environment is fixed (``golden_env``): no
MEMOLAB_* setting of the caller, PYTHONHASHSEED=0, one hashing thread, UTC, a C.UTF-8 locale.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "golden"
VECTORS = DATA / "vectors.json"
STORES = DATA / "stores"
SRC = HERE.parent / "src"


def golden_env(tmp: str) -> dict[str, str]:
    """The environment the vectors are computed in: nothing of the caller's that could move a digest."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "SYSTEMROOT", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CI")}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(SRC), str(DATA)]),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "HOME": tmp,
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        "MEMOLAB_HASH_THREADS": "1",
        "MEMOLAB_CODE_CACHE": os.path.join(tmp, "code-cache"),
        "MEMOLAB_STORE": os.path.join(tmp, "scratch-store"),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    })
    return env


# -- the canonical values ---------------------------------------------------------------------------
# Add-only: a name, once in vectors.json, keeps its value. Each is built from literals (no RNG).

def _f64(bits: int) -> float:
    import struct

    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def values() -> list[tuple[str, object]]:
    import collections
    import datetime
    import decimal
    import fractions
    import pathlib

    import golden_src as g
    import numpy as np
    import pandas as pd
    import torch
    from omegaconf import OmegaConf

    shared = [1, 2]
    cycle: list = [0]
    cycle.append(cycle)
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4)
        lin.bias.fill_(0.5)
    out = [
        ("int 0", 0), ("int 1", 1), ("int -1", -1), ("int 2**63", 2**63), ("int -(2**200)", -(2**200)),
        ("bool True", True), ("bool False", False), ("None", None),
        ("float 0.0", 0.0), ("float -0.0", -0.0), ("float 1.5", 1.5), ("float 1e-310 (subnormal)", 1e-310),
        ("float inf", float("inf")), ("float -inf", float("-inf")),
        ("float nan 0x7ff8000000000000", _f64(0x7FF8000000000000)),
        ("float nan 0x7ff8000000000001", _f64(0x7FF8000000000001)),
        ("float nan 0xfff8000000000000", _f64(0xFFF8000000000000)),
        ("complex 1-2j", complex(1, -2)), ("Decimal 1.10", decimal.Decimal("1.10")),
        ("Fraction 1/3", fractions.Fraction(1, 3)),
        ("str empty", ""), ("str unicode", "h\u00e9llo \u2713 \U0001f600"), ("str lone surrogate", "\ud800"),
        ("bytes", b"\x00\xffabc"), ("bytearray", bytearray(b"\x00\xffabc")), ("bytes empty", b""),
        ("bytes 10 MB (chunk tree)", bytes(range(256)) * 40_000),
        ("list nested", [1, [2.0, ["3", [None]]]]), ("tuple", (1, "a", 2.5)), ("tuple empty", ()),
        ("dict", {"b": 2, "a": [1]}), ("dict mixed keys", {1: "x", "1": "y", (1, 2): None}),
        ("OrderedDict", collections.OrderedDict([("b", 2), ("a", 1)])),
        ("set", {3, 1, 2}), ("frozenset", frozenset({"x", "y"})),
        ("shared reference (a, a)", (shared, shared)), ("copies (a, copy(a))", ([1, 2], [1, 2])),
        ("cycle", cycle),
        ("range", range(1, 10, 3)), ("slice", slice(1, None, 2)),
        ("datetime", datetime.datetime(2026, 1, 2, 3, 4, 5, 6)),
        ("datetime utc", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)),
        ("date", datetime.date(2026, 1, 2)), ("timedelta", datetime.timedelta(days=1, microseconds=5)),
        ("PurePosixPath", pathlib.PurePosixPath("/data/train.csv")),
        ("dataclass", g.Point(1.0, -0.0, ("a",))), ("enum", g.Color.RED), ("enum str", g.Color.GREEN),
        ("numpy float64 C", a), ("numpy float64 F", np.asfortranarray(a)),
        ("numpy strided view", a[:, ::2]), ("numpy float32", a.astype(np.float32)),
        ("numpy int8", np.array([-128, 0, 127], dtype=np.int8)), ("numpy uint16", np.arange(5, dtype=np.uint16)),
        ("numpy bool", np.array([True, False, True])), ("numpy complex64", np.array([1 + 2j], dtype=np.complex64)),
        ("numpy >i4 (big-endian)", np.arange(4, dtype=">i4")), ("numpy 0-d", np.array(2.5)),
        ("numpy datetime64[ns]", np.array(["2026-01-02T03:04:05"], dtype="datetime64[ns]")),
        ("numpy scalar float32", np.float32(1.5)), ("numpy scalar int64", np.int64(-3)),
        ("torch float32", t), ("torch float16", t.to(torch.float16)), ("torch bfloat16", t.to(torch.bfloat16)),
        ("torch int64", torch.arange(6)), ("torch bool", torch.tensor([True, False])),
        ("torch transposed (strides)", t.t()), ("torch slice (offset)", t[1:, 1:]),
        ("torch 0-d", torch.tensor(3.0)), ("torch requires_grad", torch.ones(2, requires_grad=True)),
        ("torch state_dict", lin.state_dict()),
        ("OmegaConf", OmegaConf.create({"model": {"width": 4, "lr": 0.1}, "name": "${model.width}"})),
        ("pandas DataFrame", pd.DataFrame({"a": [1, 2, 3], "b": [0.5, -0.0, 2.5], "c": ["x", "y", "z"]})),
    ]
    return out


#: code digests: name -> the object in golden_src (add-only)
def code() -> dict[str, object]:
    import golden_src as g

    return {"function plain": g.plain, "class Model (methods, defaults)": g.Model, "closure": g.closure,
            "dataclass Point": g.Point, "enum Color": g.Color}


#: the calls whose full key is pinned and which the store fixtures hold: name -> (function, args, kwargs)
#: (add-only; a fixture's manifest names the calls it holds)
def calls() -> dict[str, tuple]:
    import golden_src as g
    import numpy as np

    return {
        "golden_small(3)": (g.golden_small, (3,), {}),
        "golden_small(4, scale=0.5, label='b')": (g.golden_small, (4,), {"scale": 0.5, "label": "b"}),
        # an out-of-band buffer (pickling keeps buffers under 64 KiB in the pickle): a blob file
        "golden_blob(ones(66000, uint8))": (g.golden_blob, (np.ones(66_000, dtype=np.uint8),), {}),
    }


def _code_digest(obj: object) -> tuple[str, dict[str, str]]:
    """The digest, and the dependencies it was made of (what the failure message compares)."""
    from memolab import codegraph

    if isinstance(obj, type):
        digest = codegraph.object_digest(obj)
        root = codegraph._object_roots.get(obj)  # (a test's look at the graph behind it)
        cv = getattr(root, "cv", None)
        return digest, dict(sorted(cv.deps.items())) if cv is not None else {}
    cv = codegraph.function_code(obj)
    return cv.digest, dict(sorted(cv.deps.items()))


#: Vectors whose digest holds the Python version, by design: an enum class and an OmegaConf config
#: count the standard library's version (their base classes), a dataclass the code the standard
#: library generates for it (``__repr__``), so a user's Python upgrade recomputes results keyed by
#: them. They are pinned per Python minor version (``by_python``), checked on each version pinned;
#: ``--write`` on another version adds its entry. (The pandas frame counts pandas' minor version the
#: same way: pandas is pinned exactly in the dev extra, and a new pin is a library's drift, written
#: with ``--write --same-schema``.)
PYTHON_DEPENDENT = {"values": {"dataclass", "enum", "enum str", "OmegaConf"}, "code": {"dataclass Point", "enum Color"}}


def compute() -> dict:
    """The vectors, as this memolab computes them in this process."""
    from memolab import codegraph, hashing

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    out: dict = {"KEY_SCHEMA": hashing.KEY_SCHEMA, "CODE_SCHEMA": codegraph.CODE_SCHEMA, "python": python}
    mine: dict = {"values": {}, "code": {}}
    out["by_python"] = {python: mine}
    out["values"] = {}
    for name, v in values():
        (mine if name in PYTHON_DEPENDENT["values"] else out)["values"][name] = hashing.hash_value(v)
    out["code"] = {}
    out["code_deps"] = {}
    for name, obj in code().items():
        digest, out["code_deps"][name] = _code_digest(obj)
        (mine if name in PYTHON_DEPENDENT["code"] else out)["code"][name] = digest
    out["keys"] = {name: list(fn.key(*a, **kw)) for name, (fn, a, kw) in calls().items()}
    return out


# -- the store fixtures -----------------------------------------------------------------------------

def _same(a: object, b: object) -> bool:
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    return type(a) is type(b) and repr(a) == repr(b)  # repr: -0.0 is not 0.0


def _cli(*args: str) -> dict:
    import contextlib
    import io

    from memolab.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(args))
    if rc not in (0, None):
        raise RuntimeError(f"memolab {' '.join(args)} exited {rc}: {buf.getvalue()}")
    return json.loads(buf.getvalue())


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_store(fixture: Path, tmp: Path) -> dict:
    """Check one store fixture on a copy; returns what was found (the test judges it)."""
    from memolab import codegraph, hashing
    from memolab.store import get_store

    manifest = json.loads((fixture / "manifest.json").read_text())
    root = tmp / fixture.name
    shutil.copytree(fixture, root, ignore=shutil.ignore_patterns("manifest.json"))
    current = manifest["KEY_SCHEMA"] == hashing.KEY_SCHEMA and manifest["CODE_SCHEMA"] == codegraph.CODE_SCHEMA
    report: dict = {"fixture": fixture.name, "current": current, "problems": []}
    problems = report["problems"]
    table = calls()
    by_fn: dict[str, int] = {}
    for c in manifest["calls"]:
        by_fn[c["key"][0]] = by_fn.get(c["key"][0], 0) + 1

    # 1. read-only commands list every row and change nothing in the files
    before = _snapshot(root)
    listed = {f["fn"]: f["evaluations"] for f in _cli("--store", str(root), "ls", "--json")["functions"]}
    if listed != by_fn:
        problems.append(f"`ls` before any write lists {listed}, the fixture holds {by_fn}")
    if _snapshot(root) != before:
        problems.append("a read-only `ls` changed the store's files (it must never migrate)")

    # 2. each call: a hit while the schemas are current; a miss by design otherwise
    import memolab

    memolab.configure(store=str(root))
    for c in manifest["calls"]:
        name = c["name"]
        if name not in table:
            problems.append(f"{name}: the fixture holds a call tests/golden.py no longer defines (add-only)")
            continue
        fn, a, kw = table[name]
        truth = fn.fn(*a, **kw)
        key = list(fn.key(*a, **kw))
        hit = fn.explain(*a, **kw).hit
        if current:
            if key != c["key"]:
                problems.append(f"{name}: key {key} != the fixture's {c['key']} under the same schemas")
            if not hit:
                problems.append(f"{name}: a MISS on the fixture written with the current schemas")
        elif hit:
            problems.append(f"{name}: a HIT on a fixture of another schema ({manifest['KEY_SCHEMA']}, "
                            f"{manifest['CODE_SCHEMA']}): an old row matched a new key")
        got = fn(*a, **kw)
        if not _same(got, truth):
            problems.append(f"{name}: the call returned {got!r}, the body returns {truth!r}")

    # 3. the store, now opened for writing (upgraded if older), still holds every row, each loaded back
    store = get_store(root)
    for c in manifest["calls"]:
        if c["name"] not in table:
            continue
        fn, a, kw = table[c["name"]]
        key = tuple(c["key"])
        row = store.index.lookup(key)
        if row is None:
            problems.append(f"{c['name']}: the fixture's row {key} is gone after the upgrade")
            continue
        try:
            got = store.load(key, row)
        except Exception as e:  # noqa: BLE001  (reported: the test fails with it)
            problems.append(f"{c['name']}: the fixture's row does not load: {type(e).__name__}: {e}")
            continue
        if not _same(got, fn.fn(*a, **kw)):
            problems.append(f"{c['name']}: the fixture's row loads as {got!r}")
    store.flush_hits()
    listed = {f["fn"]: f["evaluations"] for f in _cli("--store", str(root), "ls", "--json")["functions"]}
    want = {fn: n * (1 if current else 2) for fn, n in by_fn.items()}  # an old pair: each recomputed once
    if listed != want:
        problems.append(f"`ls` after the calls lists {listed}, expected {want}")
    report["store_schema_before"] = manifest["store_schema"]
    with sqlite3.connect(root / "index.sqlite") as c:
        report["store_schema_after"] = c.execute("PRAGMA user_version").fetchone()[0]
    return report


def write_store(tmp: Path) -> Path | None:
    """A new store fixture for the current schema pair, unless there is one (never rewritten)."""
    from memolab import _version, codegraph, hashing
    from memolab.store import close_open_stores, get_store

    dest = STORES / f"{hashing.KEY_SCHEMA}+{codegraph.CODE_SCHEMA}"
    if dest.exists():
        return None
    root = tmp / "fixture"
    os.environ["MEMOLAB_INLINE_MAX"] = str(32 << 10)
    manifest: dict = {"memolab": _version.__version__, "KEY_SCHEMA": hashing.KEY_SCHEMA,
                      "CODE_SCHEMA": codegraph.CODE_SCHEMA, "calls": []}
    import memolab

    memolab.configure(store=str(root))
    for name, (fn, a, kw) in calls().items():
        fn(*a, **kw)
        manifest["calls"].append({"name": name, "key": list(fn.key(*a, **kw))})
    get_store(root).flush_hits()
    close_open_stores(root.parent)
    with sqlite3.connect(root / "index.sqlite") as c:
        manifest["store_schema"] = c.execute("PRAGMA user_version").fetchone()[0]
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    # small in the repository: 1 KiB pages (a table or index takes a page at least), vacuumed
    with sqlite3.connect(root / "index.sqlite", isolation_level=None) as c:
        c.execute("PRAGMA journal_mode=DELETE")
        c.execute("PRAGMA page_size=1024")
        c.execute("VACUUM")
    c.close()
    for p in root.rglob("*"):
        if p.is_file() and (p.name.endswith(("-wal", "-shm")) or p.stat().st_size == 0 and p.suffix == ".lock"):
            p.unlink()
    shutil.copytree(root, dest)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest


# -- entry points -----------------------------------------------------------------------------------

def report() -> dict:
    """Everything the test checks, computed here (run in the controlled subprocess)."""
    tmp = Path(tempfile.mkdtemp(prefix="memolab-golden-"))
    try:
        out = {"now": compute(), "stores": []}
        for fixture in sorted(STORES.iterdir()) if STORES.is_dir() else []:
            out["stores"].append(check_store(fixture, tmp))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def differences(pinned: dict, now: dict) -> list[str]:
    """Lines naming each pinned vector that changed (a name added is not a change)."""
    lines = []
    python = now["python"]
    for part in ("values", "code", "keys"):
        versioned = pinned.get("by_python", {}).get(python, {}).get(part, {})
        for name, want in [*pinned.get(part, {}).items(), *versioned.items()]:
            got = now[part].get(name, now["by_python"][python].get(part, {}).get(name))
            if got != want:
                extra = ""
                if part == "code":
                    old, new = pinned.get("code_deps", {}).get(name, {}), now["code_deps"].get(name, {})
                    moved = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                    extra = f" (dependencies that moved: {moved})" if moved else ""
                lines.append(f"{part}[{name!r}]: pinned {want}, now {got}{extra}")
    return lines


def run_in_subprocess(*args: str, timeout: float = 300) -> dict:
    """``python tests/golden.py ARGS`` in the controlled environment; its JSON output."""
    with tempfile.TemporaryDirectory(prefix="memolab-golden-env-") as tmp:
        cp = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *args], cwd=tmp,
                            env=golden_env(tmp), capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise RuntimeError(f"tests/golden.py {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite vectors.json, add a store fixture for the current schemas")
    p.add_argument("--same-schema", action="store_true",
                   help="with --write: accept digests that moved under an unchanged schema (a library's drift)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ns = p.parse_args()
    if not ns.child:  # the work is always done in the controlled environment
        try:
            out = run_in_subprocess(*(["--write"] if ns.write else []), *(["--same-schema"] if ns.same_schema else []))
        except RuntimeError as e:  # (a refused --write says why)
            print(e, file=sys.stderr)
            return 1
        print(json.dumps(out, indent=1))
        return 0
    if not ns.write:
        print(json.dumps(report()))
        return 0
    now = compute()
    pinned = json.loads(VECTORS.read_text()) if VECTORS.exists() else {}
    same = pinned.get("KEY_SCHEMA") == now["KEY_SCHEMA"] and pinned.get("CODE_SCHEMA") == now["CODE_SCHEMA"]
    moved = differences(pinned, now)
    if same and moved and not ns.same_schema:
        print("refused: these digests moved while KEY_SCHEMA and CODE_SCHEMA did not; bump the schema "
              "(hashing/primitives.py SCHEMA, codegraph/where.py CODE_SCHEMA), write the CHANGELOG's "
              "'Recomputed once' entry, then --write again:\n  " + "\n  ".join(moved), file=sys.stderr)
        return 1
    if same:  # the other Python versions' entries stay valid under the same schemas
        now["by_python"] = {**pinned.get("by_python", {}), **now["by_python"]}
    VECTORS.write_text(json.dumps(now, indent=1, ensure_ascii=True) + "\n")
    with tempfile.TemporaryDirectory(prefix="memolab-golden-store-") as tmp:
        added = write_store(Path(tmp))
    print(json.dumps({"vectors": str(VECTORS), "moved": moved, "store_added": str(added) if added else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
