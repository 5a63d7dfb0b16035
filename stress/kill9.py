"""SIGKILL during writes: at random moments, and at every write step.

A worker runs a seeded sequence of memoized calls (small, big, shared and
failing results, some ``fresh``, an occasional ``gc``) and journals each call
that returned. It is killed with SIGKILL either after a random delay, or at the
k-th occurrence of one write step, just before or just after it:

  tmp_write   a blob's bytes going to its temporary file (``mid``: half written)
  fsync       the temporary file (or its directory) being made durable
  rename      the temporary file published under its digest
  commit      an index transaction committing (lease claims, records, stamps)
  release     a lease given back after the function raised

The steps are hooked in the worker itself (``os.write``/``os.fsync``/
``os.replace`` when called from memolab's blob code, the index's write
context), so the library carries no test hooks. A first run counts how often
each step occurs for the seed, so the trials can spread over all of them.
After every trial a fresh process runs ``doctor`` (it must find nothing
wrong), ``PRAGMA integrity_check`` and reloads every call that ever returned,
comparing it with its recomputation: nothing may be lost or wrong.

    python stress/kill9.py --trials 200        # the long run (README figures)
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

STEPS = {"tmp_write": ("before", "mid"), "fsync": ("before", "after"), "rename": ("before", "after"),
         "commit": ("before", "after"), "release": ("before", "after")}

# The fault hooks live in a module of their own that every process of a run imports, the
# verifying ones too (they only count there): a user function planted in a library slot is part of
# every memoized function's code (docs/code-dependencies.md), so a verifier that planted nothing
# would see other code and recompute everything. Their counters are opaque for the same reason: a
# plain global dict would be keyed by value and change the key at every write.
FAULTS = textwrap.dedent('''
    import os, signal, sys
    import memolab


    class State:
        """Occurrences of each step so far and the fault to inject (step, k, when), if any."""

        def __init__(self):
            self.counts = {}
            self.target = None

    memolab.register_opaque(State)
    state = State()
    _write, _fsync, _replace = os.write, os.fsync, os.replace


    def die():
        os.kill(os.getpid(), signal.SIGKILL)


    def hit(step):
        """Count one occurrence of ``step``; the fault to inject now, if any."""
        state.counts[step] = state.counts.get(step, 0) + 1
        t = state.target
        if t and t[0] == step and t[1] == state.counts[step]:
            return t[2]
        return None


    def from_blobs():
        return sys._getframe(2).f_globals.get("__name__", "").startswith("memolab.store")


    def write(fd, data):
        when = hit("tmp_write") if from_blobs() else None
        if when == "before":
            die()
        if when == "mid":
            _write(fd, memoryview(data)[: max(1, len(data) // 2)])
            die()
        return _write(fd, data)


    def fsync(fd):
        when = hit("fsync") if from_blobs() else None
        if when == "before":
            die()
        _fsync(fd)
        if when == "after":
            die()


    def replace(a, b, **kw):
        when = hit("rename") if from_blobs() else None
        if when == "before":
            die()
        _replace(a, b, **kw)
        if when == "after":
            die()


    from memolab.store import sqlite as S
    _exit, _release = S.Index._write.__exit__, S.Index.release


    def exit_(self, et, ev, tb):
        when = hit("commit") if (et is None and not self.nested) else None
        if when == "before":
            die()
        r = _exit(self, et, ev, tb)
        if when == "after":
            die()
        return r


    def release(self, key, owner):
        when = hit("release")
        if when == "before":
            die()
        _release(self, key, owner)
        if when == "after":
            die()


    def install(spec):
        """``spec``: "none", "count", or "step:k:when"."""
        if spec.startswith("step:"):
            _, step_, k_, when_ = spec.split(":")
            state.target = (step_, int(k_), when_)
        os.write, os.fsync, os.replace = write, fsync, replace
        S.Index._write.__exit__, S.Index.release = exit_, release
''')

WORKER = textwrap.dedent('''
    import json, os, random, sys, time, warnings
    warnings.simplefilter("ignore")
    import faults
    faults.install(sys.argv[3])
    _write = faults._write
    from memolab.store import get_store
    import work
    from work import f, expected, same
    rng = random.Random(int(sys.argv[1]))
    done_path = sys.argv[2]
    for n in range(int(sys.argv[4])):
        # a key window that moves with the trial: later trials still write new blobs, not only hits
        base = (int(sys.argv[1]) % 50) * 10
        i, kind, r = base + rng.randrange(40), rng.choice(["small", "big", "big", "shared", "boom"]), rng.random()
        if r < 0.04:
            get_store().collect_garbage()
            continue
        work.knobs.phase = "fresh" if r < 0.3 else "call"  # read at compute time, not keyed
        try:
            v = f.fresh(i, kind) if r < 0.3 else f(i, kind)
        except ValueError:
            assert kind == "boom"
            continue
        assert same(v, expected(i, kind)), (i, kind)
        fd = os.open(done_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _write(fd, (json.dumps([i, kind, time.time()]) + "\\n").encode())
        os.close(fd)
    print(json.dumps(faults.state.counts))
''')


def _done(path: Path) -> list[tuple[int, str]]:
    return sorted({(x[0], x[1]) for x in H.journal(path)})


def _recomputed(computed_path: Path, done_path: Path) -> list[Any]:
    """Plain calls that computed a key after an earlier call of it had returned: lost results."""
    done_at: dict[tuple[int, str], float] = {}
    for e in H.journal(done_path):
        done_at.setdefault((e[0], e[1]), e[2])
    return [e["compute"] for e in H.journal(computed_path)
            if e.get("phase") == "call" and e["t0"] > done_at.get(tuple(e["compute"]), float("inf"))]


def run(trials: int, work: Path, ops: int = 40, seed: int = 0, log=print) -> dict[str, Any]:
    H.setup(work)
    (work / "worker.py").write_text(WORKER)
    (work / "faults.py").write_text(FAULTS)
    store, done_path, computed_path = work / "store", work / "done.jsonl", work / "computed.jsonl"
    rng = random.Random(seed)
    # how often each step occurs for this workload (a count run on a scratch store)
    t0 = time.monotonic()
    counts = H.run_json(work, work / "count-store", "worker.py", "1", str(work / "count-done"), "count", str(ops))
    # a random kill lands within a worker's life, however fast the library has become
    # (a fixed 0.3-1.0 s let most workers finish first once misses got faster)
    life = time.monotonic() - t0
    plan: list[str] = []
    n_step = trials - trials * 2 // 5  # three fifths at write steps, two fifths at random moments
    combos = [(s, w) for s, ws in STEPS.items() for w in ws if counts.get(s)]
    for t in range(n_step):
        s, w = combos[t % len(combos)]
        # spread over the step's earlier occurrences (a store that fills up writes less later on)
        plan.append(f"step:{s}:{1 + rng.randrange(max(1, counts[s] // 2))}:{w}")
    plan += ["random"] * (trials - n_step)
    rng.shuffle(plan)
    figures: dict[str, Any] = {"trials": 0, "killed": 0, "by_step": {}, "checked": 0, "lost": [], "wrong": [],
                               "doctor_failures": [], "integrity_failures": 0, "ops": ops, "counts": counts}
    verified: set = set()
    for t, spec in enumerate(plan):
        args = [sys.executable, str(work / "worker.py"), str(1000 + t), str(done_path)]
        p = subprocess.Popen([*args, "none" if spec == "random" else spec, str(ops)], cwd=work,
                             env=H.env(work, store, STRESS_JOURNAL=str(computed_path)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if spec == "random":
            try:
                p.wait(timeout=rng.uniform(0.25 * life, life))  # after the imports: kill inside the work
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
        _, err = p.communicate(timeout=300)
        killed = p.returncode == -signal.SIGKILL
        if p.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"worker {spec} failed ({p.returncode}):\n{err}")
        figures["trials"] += 1
        figures["killed"] += killed
        key = spec.split(":")[1] + ":" + spec.split(":")[3] if spec.startswith("step:") else "random"
        figures["by_step"][key] = figures["by_step"].get(key, 0) + killed
        # Everything completed is reloaded in a fresh process at the end (and by later workers, whose
        # recomputations are caught above); each trial's own completions are reloaded right away.
        done = _done(done_path)
        last = t == len(plan) - 1
        v = H.verify(work, store, done if last else [d for d in done if d not in verified])
        verified.update(done)
        figures["checked"] += v["checked"]
        figures["lost"] += v["lost"]
        figures["wrong"] += v["wrong"]
        if v["doctor_rc"] != 0:
            figures["doctor_failures"].append((spec, v["doctor"]))
        figures["integrity_failures"] += v["integrity"] != ["ok"]
        log(f"trial {t + 1:3d}/{trials} {spec:24s} {'killed' if killed else 'ran out':8s} "
            f"reloaded {v['checked']:3d} lost {len(v['lost'])} wrong {len(v['wrong'])} doctor {v['doctor_rc']}")
    # A plain call that computed a key some earlier call had completed: that result was lost
    # (a kill may cost only the call it interrupts). Fresh calls recompute on purpose.
    figures["lost"] += _recomputed(computed_path, done_path)
    figures["evaluations"] = len(_done(done_path))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--ops", type=int, default=40, help="memoized calls per worker")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="memolab-kill9-") as d:
        fig = run(a.trials, Path(d), a.ops, a.seed)
    print()
    print(H.table([(k, n) for k, n in sorted(fig["by_step"].items())], ["KILLED AT", "TRIALS KILLED"]))
    print(f"\n{fig['trials']} trials, {fig['killed']} SIGKILLs landed, {fig['evaluations']} distinct evaluations "
          f"completed, {fig['checked']} reloads in fresh processes: {len(fig['lost'])} lost, {len(fig['wrong'])} wrong, "
          f"{len(fig['doctor_failures'])} doctor complaints, {fig['integrity_failures']} integrity failures "
          f"({time.time() - t0:.0f} s)")
    if fig["lost"] or fig["wrong"] or fig["doctor_failures"] or fig["integrity_failures"]:
        print(json.dumps(fig, indent=1, default=str)[:4000])
        sys.exit(1)


if __name__ == "__main__":
    main()
