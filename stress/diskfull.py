"""A disk that fills up under writers, and a store that cannot be written at all.

``diskfull``: the store lives on a small tmpfs (mounted here when we are root;
elsewhere ``ENOSPC`` is injected into the blob writes of the workers, which
covers blobs but not SQLite's own writes). Several processes keep calling
(new keys, hits, ``fresh``) until well past the point the disk is full. Every
call must return the right value and none may raise; then the space is freed
and a fresh process checks doctor, the integrity check and every stored
result.

``readonly``: a populated store made read-only (a read-only bind mount when
root, else ``chmod -R a-w``); a fresh process calls stored and new keys: stored
ones are hits, new ones computed and not stored, and nothing raises; the CLI
answers without a traceback.

    python stress/diskfull.py --procs 4 --calls 300      # the long run
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

WORKER = textwrap.dedent('''
    import errno, json, os, random, sys, warnings
    warnings.simplefilter("ignore")
    if os.environ.get("STRESS_ENOSPC"):
        # no tmpfs: blob writes fail with ENOSPC once "the disk" holds this many bytes
        budget = [int(os.environ["STRESS_ENOSPC"])]
        _write = os.write
        def write(fd, data):
            if sys._getframe(1).f_globals.get("__name__", "").startswith("memolab.store"):
                budget[0] -= len(data)
                if budget[0] < 0:
                    raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return _write(fd, data)
        os.write = write
    from work import f, expected, same
    rng = random.Random(int(sys.argv[1]))
    out = {"calls": 0, "wrong": 0, "raised": []}
    for n in range(int(sys.argv[2])):
        i, kind = rng.randrange(400), rng.choice(["small", "big", "big", "shared"])
        try:
            v = f.fresh(i, kind) if rng.random() < 0.1 else f(i, kind)
            out["wrong"] += not same(v, expected(i, kind))
        except Exception as e:
            out["raised"].append(f"{type(e).__name__}: {e}")
        out["calls"] += 1
    print(json.dumps(out))
''')

READER = textwrap.dedent('''
    import gc, json, sqlite3, sys, warnings
    import memolab


    class Count(list):
        """Opaque: planted code (the connect below) reads it, and a plain list would be keyed by value."""


    memolab.register_opaque(Count)
    unclosed = Count()


    class Tracked(sqlite3.Connection):
        """A connection that counts itself when it is freed without being closed (the
        garbage collector then holds the file open until it runs; 3.13 warns)."""
        was_closed = False

        def close(self):
            self.was_closed = True
            super().close()

        def __del__(self):
            if not self.was_closed:
                unclosed.append(1)


    plain_connect = sqlite3.connect
    sqlite3.connect = lambda *a, **k: plain_connect(*a, **{"factory": Tracked, **k})
    from work import f, expected, same, computed
    stored = [tuple(x) for x in json.loads(sys.argv[1])]
    new = [(10_000 + i, "big") for i in range(int(sys.argv[2]))]
    out = {"wrong": 0, "raised": [], "warnings": []}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i, kind in stored + new + new:
            try:
                out["wrong"] += not same(f(i, kind), expected(i, kind))
            except Exception as e:
                out["raised"].append(f"{type(e).__name__}: {e}")
    out["computed"] = [list(c) for c in computed]
    out["warnings"] = [str(x.message) for x in w]
    gc.collect()
    out["unclosed"] = len(unclosed)
    print(json.dumps(out))
''')


def _mount_tmpfs(d: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    d.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                          capture_output=True).returncode == 0


def _umount(d: Path) -> None:
    subprocess.run(["umount", "-l", str(d)], capture_output=True)


def diskfull(work: Path, procs: int = 2, calls: int = 60, size_mb: int = 3) -> dict[str, Any]:
    H.setup(work)
    (work / "worker.py").write_text(WORKER)
    disk = work / "disk"
    mounted = _mount_tmpfs(disk, f"{size_mb}m")
    disk.mkdir(exist_ok=True)
    store = disk / "store"
    extra = {} if mounted else {"STRESS_ENOSPC": str(size_mb << 20)}
    try:
        ps = [subprocess.Popen([sys.executable, str(work / "worker.py"), str(s), str(calls)], cwd=work,
                               env=H.env(work, store, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for s in range(procs)]
        fig: dict[str, Any] = {"mode": "tmpfs" if mounted else "injected ENOSPC", "calls": 0, "wrong": 0, "raised": []}
        for p in ps:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise AssertionError(f"worker failed ({p.returncode}):\n{err}")
            r = json.loads(out.strip().splitlines()[-1])
            fig["calls"] += r["calls"]
            fig["wrong"] += r["wrong"]
            fig["raised"] += r["raised"]
        fig["full"] = (shutil.disk_usage(disk).free < (256 << 10)) if mounted else None
        if mounted:  # free the space: copy the store out, as a user would after cleaning up
            shutil.copytree(store, work / "store-after", symlinks=True)
            store = work / "store-after"
        v = H.verify(work, store)
        fig.update(stored=v["checked"], lost=v["lost"], wrong_after=v["wrong"], doctor_rc=v["doctor_rc"],
                   doctor=v["doctor"], integrity=v["integrity"])
        return fig
    finally:
        if mounted:
            _umount(disk)


def readonly(work: Path, keys: int = 20, new: int = 5) -> dict[str, Any]:
    H.setup(work)
    (work / "reader.py").write_text(READER)
    store = work / "store"
    stored = [[i, k] for i in range(keys) for k in ("small", "big", "shared")]
    first = H.run_json(work, store, "reader.py", json.dumps(stored), "0")
    assert not first["raised"] and not first["wrong"]
    ro = work / "ro"
    ro.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "--bind", str(store), str(ro)],
                                                   capture_output=True).returncode == 0
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True, capture_output=True)
    else:
        ro.rmdir()
        shutil.copytree(store, ro)
        for p in [ro, *ro.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
    try:
        r = H.run_json(work, ro, "reader.py", json.dumps(stored), str(new))
        cli = []
        for args in (["ls"], ["ls", "f"], ["doctor"], ["gc", "--dry-run"], ["clear", "--yes"]):
            cp = subprocess.run([sys.executable, "-m", "memolab", "--store", str(ro), *args],
                                env=H.env(work, ro), capture_output=True, text=True, timeout=120)
            cli.append((" ".join(args), cp.returncode, "Traceback" in cp.stdout + cp.stderr))
        return {"mode": "read-only mount" if mounted else "chmod a-w", "stored": len(stored), "new": new,
                "wrong": r["wrong"], "raised": r["raised"], "computed": r["computed"], "warnings": r["warnings"],
                "unclosed": r["unclosed"],
                "cli": cli}
    finally:
        if mounted:
            _umount(ro)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    bad = False
    with tempfile.TemporaryDirectory(prefix="memolab-diskfull-") as d:
        fig = diskfull(Path(d), a.procs, a.calls)
    print(f"disk full ({fig['mode']}): {fig['calls']} calls by {a.procs} processes, disk full at the end: "
          f"{fig['full']}; {fig['wrong']} wrong values, {len(fig['raised'])} exceptions out of calls; afterwards "
          f"{fig['stored']} stored results reloaded: {len(fig['lost'])} lost, {len(fig['wrong_after'])} wrong, "
          f"doctor rc {fig['doctor_rc']}, integrity {fig['integrity'][0]}")
    bad |= bool(fig["wrong"] or fig["raised"] or fig["lost"] or fig["wrong_after"] or fig["doctor_rc"]
                or fig["integrity"] != ["ok"])
    with tempfile.TemporaryDirectory(prefix="memolab-readonly-") as d:
        r = readonly(Path(d), keys=60, new=20)
    stored_recomputed = [c for c in r["computed"] if c[0] < 10_000]
    print(f"read-only store ({r['mode']}): {r['stored']} stored results served ({len(stored_recomputed)} recomputed), "
          f"{r['new']} new keys computed {len(r['computed']) - len(stored_recomputed)} times (not stored), "
          f"{r['wrong']} wrong, {len(r['raised'])} exceptions, {len(r['warnings'])} warning(s); "
          f"CLI: {', '.join(f'{a} rc {rc}' + (' TRACEBACK' if tb else '') for a, rc, tb in r['cli'])}")
    bad |= bool(stored_recomputed or r["wrong"] or r["raised"] or any(tb for *_, tb in r["cli"]))
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
