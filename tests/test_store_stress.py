"""Several processes hammer one store at once (in the spirit of diskcache's stress tests).

Each worker runs a few hundred mixed operations chosen by its own seed:
memoized calls with overlapping keys (small results in the pickle, large ones
in buffer blobs), ``fresh``, ``clear``, ``gc --max-size``, ``doctor``. Every
value a worker gets back is checked against what the function must return.
Afterwards the store must be consistent: ``doctor`` clean, no lease left, no
temporary file left, and no evaluation that had to be taken out of use because
a blob it refers to went missing under it (that would be a lost result).
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

WORK = """
import numpy as np
import memolab

@memolab.memo
def f(i, big):
    # big results go out of band (one blob per array); equal values dedupe across keys
    n = 20_000 if big else 8
    return {"i": i, "arr": np.full(n, i, dtype=np.int64)}
"""

WORKER = r"""
import io, contextlib, json, os, random, sys, time, warnings
import numpy as np
import memolab
from memolab import cli
from work import f

seed, ops, deadline = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rng = random.Random(seed)
store = os.environ["MEMOLAB_STORE"]
memolab.store.get_store()  # CLI commands never create a store: make it before the first one runs
counts = {}
seen = []
warnings.showwarning = lambda message, *a, **k: seen.append(str(message))
warnings.simplefilter("always", memolab.MemolabWarning)
for n in range(ops):
    if time.time() > deadline:
        break
    r = rng.random()
    i, big = rng.randrange(6), rng.random() < 0.5
    if r < 0.70:
        op = "call"
        v = f(i, big)
    elif r < 0.80:
        op = "fresh"
        v = f.fresh(i, big)
    elif r < 0.86:
        op = "clear"
        f.clear()
        v = None
    elif r < 0.93:
        op = "gc"
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["--store", store, "gc", "--max-size", "300KB", "--yes"]) == 0
        v = None
    else:
        op = "doctor"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cli.main(["--store", store, "doctor"])
        assert rc == 0, out.getvalue()  # others' work in flight (gc, clear, fresh) is no damage
        v = None
    if v is not None:
        want = np.full(20_000 if big else 8, i, dtype=np.int64)
        assert v["i"] == i and v["arr"].dtype == want.dtype and np.array_equal(v["arr"], want), (op, i, big)
    counts[op] = counts.get(op, 0) + 1
# a reader whose row another process cleared, collected or replaced meanwhile
# simply reads again: no warning of damage, since there was none
assert seen == [], seen
print(json.dumps(counts))
"""


def test_processes_hammering_one_store_keep_it_consistent(project):
    project.write("work.py", WORK)
    project.write("worker.py", WORKER)
    deadline = time.time() + 20  # bounded in time as well as in count
    procs = [
        subprocess.Popen([sys.executable, "worker.py", str(seed), "400", str(deadline)], cwd=project.root,
                         env=_env(project), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for seed in range(4)
    ]
    done = 0
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        done += sum(json.loads(out.strip().splitlines()[-1]).values())
    assert done >= 100  # enough work happened to mean something
    print('ops', done)

    cp = project.run("-m", "memolab", "--store", str(project.store), "doctor", check=False)
    assert cp.returncode == 0 and "no problems" in cp.stdout, cp.stdout + cp.stderr
    db = sqlite3.connect(project.store / "index.sqlite")
    assert db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0
    bad = db.execute("SELECT id, status, reason FROM evaluations WHERE status != 'done'").fetchall()
    assert bad == []  # nothing was damaged or lost under a live evaluation
    assert list((project.store / "tmp").iterdir()) == []
    assert not (project.store / "quarantine").exists() or list((project.store / "quarantine").iterdir()) == []
    # every stored result still loads, and correctly
    check = project.run("-c", "from work import f\nimport numpy as np\n"
                        "for i in range(6):\n for big in (False, True):\n"
                        "  v = f(i, big); assert v['i'] == i and (v['arr'] == i).all()\nprint('ok')")
    assert check.stdout.strip().endswith("ok")


def _env(project):
    import os

    from conftest import SRC

    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)])
    e["MEMOLAB_STORE"] = str(project.store)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    return e
