"""N processes x T seconds on one store: hits, misses, fresh, clear, gc, doctor; exactly-once checks.

Phase 1 (T seconds): every process runs a seeded mix of plain calls, ``fresh``,
``clear``, ``gc --max-size`` and ``doctor`` over a small key space, so keys are
contended all the time; every returned value is compared with its
recomputation. Phase 2 (after all processes reach a barrier): every process
calls every key once, plainly.

Checks: no two computations of one key ever overlap in time (single flight,
``fresh`` included: it waits for a lease like anyone); in phase 2 each key is
computed at most once across all processes (exactly once, where it was not
stored yet); afterwards doctor is clean, the index passes its integrity check,
no lease and no temporary file is left, and every stored result reloads
correctly in a fresh process.

    python stress/hammer.py --procs 8 --seconds 60      # the long run
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

WORKER = textwrap.dedent('''
    import contextlib, io, json, os, random, sys, time, warnings
    from pathlib import Path
    import memolab
    from memolab import cli
    import work
    from work import f, expected, same
    # recorded, not by assigning warnings.showwarning: a user function planted in a library slot is
    # part of every memoized function's code (docs/code-dependencies.md), so the verifying process,
    # which plants nothing, would see other code and recompute everything
    seen = warnings.catch_warnings(record=True).__enter__()
    warnings.simplefilter("always", memolab.MemolabWarning)
    me, nprocs, deadline, keys = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    store, barrier = os.environ["MEMOLAB_STORE"], Path(sys.argv[5])
    rng = random.Random(me)
    counts = {}
    kinds = ["small", "big", "shared", "boom"]

    def call(i, kind, fresh=False):
        try:
            v = f.fresh(i, kind) if fresh else f(i, kind)
        except ValueError:
            assert kind == "boom"
            return
        assert same(v, expected(i, kind)), (i, kind)

    while time.time() < deadline:
        r, i, kind = rng.random(), rng.randrange(keys), rng.choice(kinds)
        if r < 0.70:
            op = "call"; call(i, kind)
        elif r < 0.82:
            op = "fresh"; call(i, kind, fresh=True)
        elif r < 0.87:
            op = "clear"; f.clear()
        elif r < 0.95:
            op = "gc"
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli.main(["--store", store, "gc", "--max-size", "600KB", "--yes"]) == 0
        else:
            op = "doctor"
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = cli.main(["--store", store, "doctor"])
            assert rc == 0, out.getvalue()  # others' work in flight is no damage
        counts[op] = counts.get(op, 0) + 1
    (barrier / str(me)).touch()
    while len(list(barrier.iterdir())) < nprocs:
        time.sleep(0.02)
    work.knobs.phase = "2"
    order = [(i, k) for i in range(keys) for k in kinds]
    rng.shuffle(order)
    for i, kind in order:
        call(i, kind)
    counts["phase2"] = len(order)
    assert [str(w.message) for w in seen] == [], seen  # a row replaced under a reader is read again, without a warning of damage
    print(json.dumps(counts))
''')


def _overlaps(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    by_key: dict[tuple[Any, ...], list[tuple[float, float, int]]] = {}
    for e in events:
        by_key.setdefault(tuple(e["compute"]), []).append((e["t0"], e["t1"], e["pid"]))
    bad = []
    for k, iv in by_key.items():
        iv.sort()
        for (_, a1, ap), (b0, _, bp) in zip(iv, iv[1:], strict=False):
            if b0 < a1 and ap != bp:
                bad.append((k, ap, bp))
    return bad


def run(procs: int, seconds: float, work: Path, keys: int = 6, compute_s: float = 0.005) -> dict[str, Any]:
    H.setup(work)
    (work / "worker.py").write_text(WORKER)
    store, journal, barrier = work / "store", work / "computed.jsonl", work / "barrier"
    barrier.mkdir()
    # The store exists before any worker starts: a worker whose first operation is
    # `doctor` (seed 2's is) must not race the others' first call that creates it.
    subprocess.run([sys.executable, "-c", "from memolab.store import get_store; get_store()"], cwd=work, check=True,
                   env=H.env(work, store))
    deadline = time.time() + 2 + seconds  # about 2 s for the processes to start
    ps = [subprocess.Popen([sys.executable, str(work / "worker.py"), str(me), str(procs), str(deadline), str(keys),
                            str(barrier)], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=H.env(work, store, STRESS_JOURNAL=str(journal), STRESS_COMPUTE_S=str(compute_s)))
          for me in range(procs)]
    ops: dict[str, int] = {}
    for out in _collect(ps, seconds + 600):
        for k, n in json.loads(out.strip().splitlines()[-1]).items():
            ops[k] = ops.get(k, 0) + n
    events = H.journal(journal)
    phase2: dict[tuple[Any, ...], int] = {}
    for e in events:
        if e.get("phase") == "2" and e["compute"][1] != "boom":
            phase2[tuple(e["compute"])] = phase2.get(tuple(e["compute"]), 0) + 1
    db = sqlite3.connect(store / "index.sqlite")
    fig = {
        "procs": procs, "seconds": seconds, "ops": ops, "computations": len(events),
        "overlaps": _overlaps(events),
        "phase2_repeats": {str(k): n for k, n in phase2.items() if n > 1},
        "leases_left": db.execute("SELECT COUNT(*) FROM leases").fetchone()[0],
        "tmp_left": len(list((store / "tmp").iterdir())),
        "not_done": db.execute("SELECT COUNT(*) FROM evaluations WHERE status != 'done'").fetchone()[0],
    }
    db.close()
    v = H.verify(work, store, [(i, k) for i in range(keys) for k in ("small", "big", "shared")])
    fig.update(doctor_rc=v["doctor_rc"], doctor=v["doctor"], integrity=v["integrity"], checked=v["checked"],
               lost=v["lost"], wrong=v["wrong"])
    return fig


def _collect(ps: list[subprocess.Popen[str]], timeout: float) -> list[str]:
    """The workers' outputs. The first worker to fail stops the run with its own
    error: the others would wait at the barrier for it until the timeout, and
    their (innocent) time-out would be all the report said."""
    import threading

    outs: dict[int, tuple[str, str]] = {}

    def read(i: int, p: subprocess.Popen[str]) -> None:
        outs[i] = p.communicate()  # drains both pipes, so no worker blocks on a full one

    readers = [threading.Thread(target=read, args=(i, p), daemon=True) for i, p in enumerate(ps)]
    for t in readers:
        t.start()
    end = time.time() + timeout
    while any(t.is_alive() for t in readers):
        failed = [(i, p.returncode) for i, p in enumerate(ps) if p.poll() not in (None, 0)]
        if failed or time.time() > end:
            for p in ps:
                if p.poll() is None:
                    p.kill()
            for t in readers:
                t.join(10)
            if failed:
                i, rc = failed[0]
                raise AssertionError(f"worker {i} failed ({rc}):\n{outs.get(i, ('', ''))[1]}")
            raise AssertionError(f"workers still running after {timeout:.0f} s: "
                                 + "; ".join(f"worker {i}: {outs.get(i, ('', ''))[1][-2000:]}" for i in range(len(ps))))
        time.sleep(0.05)
    return [outs[i][0] for i in range(len(ps))]


def ok(fig: dict[str, Any]) -> bool:
    return (not fig["overlaps"] and not fig["phase2_repeats"] and fig["leases_left"] == 0 and fig["tmp_left"] == 0
            and fig["not_done"] == 0 and fig["doctor_rc"] == 0 and fig["integrity"] == ["ok"]
            and not fig["lost"] and not fig["wrong"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--keys", type=int, default=6)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memolab-hammer-") as d:
        fig = run(a.procs, a.seconds, Path(d), a.keys)
    total = sum(n for k, n in fig["ops"].items() if k != "phase2")
    print(f"{fig['procs']} processes x {fig['seconds']:.0f} s: {total} operations "
          f"({', '.join(f'{k} {n}' for k, n in sorted(fig['ops'].items()))}), {fig['computations']} computations; "
          f"{len(fig['overlaps'])} overlapping computations of one key, {len(fig['phase2_repeats'])} keys computed "
          f"twice in phase 2, {fig['leases_left']} leases and {fig['tmp_left']} temp files left, doctor rc "
          f"{fig['doctor_rc']}, integrity {fig['integrity'][0]}, {len(fig['lost'])} lost, {len(fig['wrong'])} wrong")
    if not ok(fig):
        print(json.dumps(fig, indent=1, default=str)[:4000])
        sys.exit(1)


if __name__ == "__main__":
    main()
