"""What every stress run shares: the memoized work, its expected values, fresh-process checks.

The work function ``f(i, kind)`` is pure: its value is ``expected(i, kind)``,
so any value a call returns can be compared with a recomputation. Kinds cover
the store's paths: ``small`` (in the pickle), ``big`` (a 320 KB buffer blob),
``shared`` (a buffer equal across keys: one deduplicated blob), ``boom`` (raises:
nothing stored, the lease released). Computations are journalled (pid, start,
end) to a file named by ``$STRESS_JOURNAL`` so single flight can be checked.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = str(REPO / "src")

KINDS = ("small", "big", "shared", "boom")

WORK = textwrap.dedent('''
    import json, os, time
    import numpy as np
    import memolab

    class Log(list):
        """Computations of this process (opaque: a plain global list would be keyed by value)."""

    memolab.register_opaque(Log)
    computed = Log()


    class Knobs:
        """The harness's own settings, read from the environment once, outside every computation
        (a body reading a variable is warned about: it is not in the key). Opaque, like ``Log``."""

        def __init__(self):
            self.journal = os.environ.get("STRESS_JOURNAL")
            self.compute_s = float(os.environ.get("STRESS_COMPUTE_S", "0"))
            self.phase = os.environ.get("STRESS_PHASE", "")

    memolab.register_opaque(Knobs)
    knobs = Knobs()

    def expected(i, kind):
        rng = np.random.default_rng(i)
        if kind == "small":
            return {"i": i, "v": rng.integers(0, 1000, 8)}
        if kind == "big":
            return {"i": i, "v": rng.integers(0, 1000, 40_000)}
        if kind == "shared":
            return [np.full(20_000, i % 3), i]
        raise ValueError(f"boom {i}")

    def same(a, b):
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, np.ndarray):
            return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
        return a == b

    def note(event):
        path = knobs.journal
        if path:
            # not os.write: kill9's worker patches it, and a body calling a patched function
            # is keyed by the patch (the verifying process, unpatched, would see other code)
            with open(path, "ab", buffering=0) as fh:
                fh.write((json.dumps(event) + "\\n").encode())

    @memolab.memo
    def f(i, kind):
        t0 = time.time()
        computed.append((i, kind))
        time.sleep(knobs.compute_s)  # widen the window single flight must guard
        try:
            return expected(i, kind)
        finally:
            note({"compute": [i, kind], "pid": os.getpid(), "t0": t0, "t1": time.time(),
                  "phase": knobs.phase})
''')

# A fresh process: doctor, the integrity check, then every listed evaluation
# reloaded and compared with its recomputation. ``lost``: listed as completed
# before, yet not a hit now.
VERIFY = textwrap.dedent('''
    import io, json, sqlite3, sys, warnings
    from pathlib import Path
    warnings.simplefilter("ignore")
    from memolab.cli import doctor
    from work import f, expected, same, computed
    if (Path(__file__).parent / "faults.py").exists():
        import faults  # kill9's hooks, planted here as in its workers (they only count here)
        faults.install("none")
    store = Path(sys.argv[1])
    done = [tuple(x) for x in json.loads(Path(sys.argv[2]).read_text())] if len(sys.argv) > 2 else None
    lines = []
    out = {"doctor_rc": doctor.run(store, out=lines.append), "doctor": lines}
    c = sqlite3.connect(f"{store.absolute().as_uri()}/index.sqlite?mode=ro", uri=True)
    out["integrity"] = [r[0] for r in c.execute("PRAGMA integrity_check")]
    if done is None:
        done = [(i, k) for i, k in c.execute(
            "SELECT json_extract(snapshot, '$.args.i[1]'), json_extract(snapshot, '$.args.kind[1]') "
            "FROM evaluations WHERE status='done'")]
        done = [(int(i), k.strip("'")) for i, k in done]
    c.close()
    wrong, lost = [], []
    for i, kind in done:
        before = len(computed)
        v = f(i, kind)
        if not same(v, expected(i, kind)):
            wrong.append([i, kind])
        if len(computed) > before:
            lost.append([i, kind])
    out.update(checked=len(done), wrong=wrong, lost=lost)
    print(json.dumps(out))
''')


def setup(work_dir: Path) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "work.py").write_text(WORK)
    (work_dir / "verify.py").write_text(VERIFY)


def env(work_dir: Path, store: Path, **extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(work_dir)])
    e["MEMOLAB_STORE"] = str(store)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.pop("MEMOLAB_HMAC_KEY", None)
    e.update(extra)
    return e


def run_json(work_dir: Path, store: Path, script: str, *args: str, timeout: float = 300, **extra: str) -> Any:
    cp = subprocess.run([sys.executable, str(work_dir / script), *args], cwd=work_dir, env=env(work_dir, store, **extra),
                        capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise AssertionError(f"{script} {args} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def verify(work_dir: Path, store: Path, done: Sequence[Sequence[Any]] | None = None) -> dict[str, Any]:
    """Doctor, integrity check and reload of ``done`` (default: every stored evaluation) in a fresh process."""
    args: list[str] = [str(store)]
    if done is not None:
        listed = work_dir / "done.json"
        listed.write_text(json.dumps([list(x) for x in done]))
        args.append(str(listed))
    return run_json(work_dir, store, "verify.py", *args)


def journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut short by a SIGKILL
    return out


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])
