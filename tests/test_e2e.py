"""End to end: real scripts in fresh interpreters, edits between runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = """
import json, sys
from memolab import memo

@memo
def work(n, scale=1.0):
    # the body runs only on a miss: it logs itself so the test can count
    with open("runs.log", "a") as f:
        f.write(f"work {n}\\n")
    return [n * scale, n + 1]

print(json.dumps({"value": work(int(sys.argv[1]) if len(sys.argv) > 1 else 3)}))
"""


def runs(project) -> int:
    p = project.root / "runs.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_hit_across_processes_and_code_edits(project):
    project.write("job.py", SCRIPT)
    assert project.run_json("job.py")["value"] == [3.0, 4]
    assert runs(project) == 1
    assert project.run_json("job.py")["value"] == [3.0, 4]  # new process: hit
    assert runs(project) == 1

    # comments, docstrings and formatting do not change the code digest
    project.write("job.py", SCRIPT.replace("def work(n, scale=1.0):",
                                           'def work(n,   scale=1.0):  # tuned\n    """Docs."""\n    # more comment'))
    assert project.run_json("job.py")["value"] == [3.0, 4]
    assert runs(project) == 1

    # an edit of the body is a miss
    project.write("job.py", SCRIPT.replace("n + 1]", "n + 2]"))
    assert project.run_json("job.py")["value"] == [3.0, 5]
    assert runs(project) == 2
    # and reverting the edit brings the old result back without recomputing
    project.write("job.py", SCRIPT)
    assert project.run_json("job.py")["value"] == [3.0, 4]
    assert runs(project) == 2


def test_truncated_blob_is_recomputed_with_a_warning_and_repaired(project):
    project.write("job.py", SCRIPT.replace("return [n * scale, n + 1]", "return list(range(n * 100000))"))
    project.run("job.py", "2")
    blobs = sorted((project.store / "blobs").rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0)
    biggest = [b for b in blobs if b.is_file()][-1]
    os.chmod(biggest, 0o644)
    data = biggest.read_bytes()
    biggest.write_bytes(data[: len(data) // 2])  # a crash or a full disk, say

    cp = project.run("job.py", "2")
    assert "cannot be used" in cp.stderr and "recomputing" in cp.stderr
    assert json.loads(cp.stdout)["value"] == list(range(200000))
    assert runs(project) == 2
    cp = project.run("job.py", "2")  # repaired: a clean hit
    assert cp.stderr == ""
    assert runs(project) == 2


def test_corrupted_blob_in_place_is_never_returned(blob_results, project):
    """Same size, different bytes: the digest check catches it."""
    project.write("job.py", SCRIPT)
    project.run("job.py")
    for b in (project.store / "blobs").rglob("*"):
        if b.is_file():
            os.chmod(b, 0o644)
            data = bytearray(b.read_bytes())
            data[-2] ^= 0xFF
            b.write_bytes(bytes(data))
    cp = project.run("job.py")
    assert json.loads(cp.stdout)["value"] == [3.0, 4]
    assert "recomputing" in cp.stderr
    assert runs(project) == 2
    assert list((project.store / "quarantine").iterdir())


def test_hash_error_names_the_path(project):
    project.write("job.py", """
        from memolab import memo, HashError

        class Loader:
            def __init__(self):
                self.dataset = type("DS", (), {})()
                self.dataset.gen = (i for i in range(3))

        @memo
        def train(loader):
            return 1

        try:
            train(Loader())
        except HashError as e:
            print(e)
    """)
    out = project.run("job.py").stdout.strip()
    assert out == ("args['loader'].dataset.gen: cannot hash a live generator (its position is hidden state); "
                   "pass what creates it instead\n"
                   "  if 'loader' cannot change the result, leave it out of the key: @memo(ignore=['loader'])")


SLOW = """
import json, os, sys, time
from memolab import memo

@memo
def slow(x):
    with open("runs.log", "a") as f:
        f.write(f"start {os.getpid()}\\n")
    time.sleep(float(os.environ.get("SLOW_SECONDS", "2")))
    return x * 2

print(json.dumps({"value": slow(21), "pid": os.getpid()}))
"""


def _popen(project, *args, env=None):
    e = dict(os.environ)
    from conftest import SRC

    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)])
    e["MEMOLAB_STORE"] = str(project.store)
    e.update(env or {})
    return subprocess.Popen([sys.executable, *args], cwd=project.root, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_concurrent_callers_compute_once(project):
    project.write("job.py", SLOW)
    project.run("-c", "import memolab.store as s; s.get_store()")  # create the store first
    procs = [_popen(project, "job.py") for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    values = [json.loads(o[0])["value"] for o in outs]
    assert values == [42, 42, 42]
    assert runs(project) == 1  # exactly one process computed


@pytest.mark.slow
def test_crashed_owner_lease_expires_and_another_process_takes_over(project):
    project.write("job.py", SLOW)
    env = {"SLOW_SECONDS": "60", "MEMOLAB_LEASE_TTL": "2", "MEMOLAB_HEARTBEAT": "0.3"}
    owner = _popen(project, "job.py", env=env)
    deadline = time.time() + 30
    while runs(project) == 0:  # wait until the owner holds the lease and computes
        assert time.time() < deadline, owner.stderr.read()
        time.sleep(0.05)
    waiter = _popen(project, "job.py", env={**env, "SLOW_SECONDS": "0"})
    time.sleep(3)  # the owner heart-beats: the waiter must still be waiting
    assert waiter.poll() is None
    assert runs(project) == 1
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert json.loads(out)["value"] == 42
    assert runs(project) == 2  # the waiter took over and computed


def test_async_and_exception_in_fresh_processes(project):
    project.write("job.py", """
        import asyncio, json, sys
        from memolab import memo

        @memo
        async def fetch(x):
            with open("runs.log", "a") as f:
                f.write("fetch\\n")
            if x < 0:
                raise ValueError("negative")
            return x + 1

        try:
            print(json.dumps({"value": asyncio.run(fetch(int(sys.argv[1])))}))
        except ValueError as e:
            print(json.dumps({"error": str(e)}))
    """)
    assert project.run_json("job.py", "1") == {"value": 2}
    assert project.run_json("job.py", "1") == {"value": 2}
    assert runs(project) == 1
    assert project.run_json("job.py", "-1") == {"error": "negative"}
    assert project.run_json("job.py", "-1") == {"error": "negative"}
    assert runs(project) == 3  # failures are never stored


def test_default_store_is_in_the_workspace(project, tmp_path):
    project.write("job.py", SCRIPT)
    sub = project.root / "notebooks" / "deep"
    sub.mkdir(parents=True)
    env = dict(os.environ)
    env.pop("MEMOLAB_STORE", None)
    from conftest import SRC

    env["PYTHONPATH"] = SRC
    subprocess.run([sys.executable, str(project.root / "job.py")], cwd=sub, env=env, check=True, capture_output=True)
    assert (project.root / ".memolab" / "index.sqlite").exists()
    assert not (sub / ".memolab").exists()


SCALARS = """
import json
from memolab import memo

@memo
def kind(x):
    with open("runs.log", "a") as f:
        f.write(f"kind {x!r}\\n")
    return repr(x)

# equal as dict keys, different as arguments: each its own result, in one process
# (where argument digests of plain scalars are remembered) and in the next
print(json.dumps([kind(v) for v in (1, True, 1.0, 0.0, -0.0, 0, False, "1", b"1", None)]))
"""


def test_scalar_arguments_equal_as_dict_keys_key_apart_across_processes(project):
    want = ["1", "True", "1.0", "0.0", "-0.0", "0", "False", "'1'", "b'1'", "None"]
    project.write("job.py", SCALARS)
    assert project.run_json("job.py") == want
    assert runs(project) == 10
    assert project.run_json("job.py") == want  # a fresh process: every one a hit, none confused
    assert runs(project) == 10
