"""A stored row that cannot be read is taken out of use and replaced (issue 22).

Whatever column of an evaluation row is damaged (JSON that does not parse, text that
is not UTF-8, sizes that are not numbers, inline bytes that do not match their
digests), the next call recomputes it once, stores the result in its place, and every
later call, in every process, is a plain hit. ``doctor`` reports such rows and takes
them out of use. ``memolab why`` on a damaged miss record says what is damaged and what
to do, without a traceback. Each damage is written by one process, then read by fresh
ones (``project.run``).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import other_user_python, skip_or_fail

SRC = str(Path(__file__).resolve().parents[1] / "src")

SCRIPT = """
import json, sys, warnings
import memolab
from calls import Calls

calls = Calls()

@memolab.memo
def f(n):
    calls.append(n)
    return list(range(n))

out = {"values": [], "warnings": []}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for n in [int(a) for a in sys.argv[1:]]:
        out["values"].append(len(f(n)))
out["computed"] = list(calls)
out["warnings"] = [str(x.message) for x in w]
print(json.dumps(out))
"""

CALLS = """
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)  # a module-level list would be keyed by value
"""


@pytest.fixture
def proj(project):
    project.write("calls.py", CALLS)
    project.write("f.py", SCRIPT)
    return project


def damage(proj, sql: str, params=()) -> None:
    """Damage the row of f(3) (the smallest result) the way a flipped byte or a hand edit would."""
    with sqlite3.connect(proj.store / "index.sqlite") as c:
        n = c.execute(f"UPDATE evaluations SET {sql} WHERE id=(SELECT id FROM evaluations ORDER BY size LIMIT 1)",
                      params).rowcount
    assert n == 1


def doctor(proj, *args: str) -> subprocess.CompletedProcess:
    cp = proj.run("-m", "memolab", "doctor", *args, check=False)
    assert "Traceback" not in cp.stdout + cp.stderr, cp.stdout + cp.stderr
    return cp


# every column a hit reads, damaged the ways that happen
DAMAGES = {
    "snapshot-not-json": "snapshot='{{broken'",
    "buffers-not-json": "buffers='{{broken'",
    "buffers-not-utf8": "buffers=CAST(X'5bff5d' AS TEXT)",
    "payload-not-utf8": "payload=CAST(X'61ff62' AS TEXT)",
    "payload-size-text": "payload_size='many'",
    "inline-truncated": "inline=X'00'",
}


@pytest.mark.parametrize("what", sorted(DAMAGES))
def test_a_damaged_row_is_recomputed_once_and_replaced_for_every_process(proj, what):
    assert proj.run_json("f.py", "3", "50")["computed"] == [3, 50]
    damage(proj, DAMAGES[what])
    first = proj.run_json("f.py", "3", "3")
    assert first["values"] == [3, 3]
    assert first["computed"] == [3], "one recomputation, then the replaced row is a hit"
    assert not any("cannot be written" in w for w in first["warnings"]), first["warnings"]
    for _ in range(2):  # fresh processes: a plain hit, no warning, nothing computed
        again = proj.run_json("f.py", "3", "50")
        assert again == {"values": [3, 50], "computed": [], "warnings": []}
    with sqlite3.connect(proj.store / "index.sqlite") as c:
        assert c.execute("SELECT count(*) FROM evaluations WHERE status='done'").fetchone()[0] == 2


def test_a_damaged_row_taken_out_of_use_no_longer_blocks_its_key(proj):
    """A row out of use whose snapshot is not JSON was read by every lookup of its key (and
    failed it): every call computed without storing, forever."""
    proj.run_json("f.py", "3")
    damage(proj, "snapshot='{{broken', status='corrupt'")
    assert proj.run_json("f.py", "3")["computed"] == [3]
    assert proj.run_json("f.py", "3") == {"values": [3], "computed": [], "warnings": []}


@pytest.mark.parametrize("what", ["snapshot-not-json", "buffers-not-json", "inline-truncated"])
def test_doctor_reports_a_damaged_row_and_takes_it_out_of_use(proj, what):
    proj.run_json("f.py", "3", "50")
    damage(proj, DAMAGES[what])
    cp = doctor(proj)
    assert cp.returncode == 1 and "index row" in cp.stdout, cp.stdout
    js = json.loads(doctor(proj, "--json").stdout)  # already out of use: nothing left to report
    assert js["ok"] and not js["undecodable"], js
    assert proj.run_json("f.py", "3", "3")["computed"] == [3]
    assert doctor(proj, "--repair", "--yes").returncode == 0
    assert proj.run_json("f.py", "3", "50")["computed"] == []


WORKER = """
import json, sys, time
import memolab
from calls import Calls

calls = Calls()

@memolab.memo
def f(n):
    calls.append(n)
    time.sleep(0.3)  # long enough for the other processes to reach the damaged row meanwhile
    return list(range(n))

start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.005)
print(json.dumps({"value": len(f(3)), "computed": list(calls)}))
"""


def test_processes_reading_one_damaged_row_at_once_recompute_it_once(proj):
    """A damaged row found by several processes at once: one computes, the others wait for it
    and hit its result; one row is left, and it is the recomputed one."""
    proj.write("w.py", WORKER)
    assert proj.run_json("w.py", "0")["computed"] == [3]
    damage(proj, "snapshot='{{broken'")
    start = str(time.time() + 2.0)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, str(proj.root)]), MEMOLAB_STORE=str(proj.store),
               PYTHONDONTWRITEBYTECODE="1")
    procs = [subprocess.Popen([sys.executable, "w.py", start], cwd=proj.root, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = []
    for p in procs:
        so, se = p.communicate(timeout=120)
        assert p.returncode == 0, se
        outs.append(json.loads(so.strip().splitlines()[-1]))
    assert [o["value"] for o in outs] == [3, 3, 3]
    assert sum(len(o["computed"]) for o in outs) == 1, outs
    with sqlite3.connect(proj.store / "index.sqlite") as c:
        rows = c.execute("SELECT status FROM evaluations").fetchall()
    assert rows == [("done",)], rows
    assert proj.run_json("w.py", "0")["computed"] == []


def test_a_damaged_row_on_a_store_that_cannot_be_written_costs_a_computation_not_a_hang(proj, tmp_path):
    """The row cannot be taken out of use there: the call computes without storing (it looped
    on the row forever)."""
    if not shutil.which("setpriv") or os.geteuid() != 0:
        skip_or_fail("needs root and setpriv to read the store as another user")
    proj.run_json("f.py", "3")
    damage(proj, "buffers='{{broken'")
    shared = Path(tempfile.mkdtemp(prefix="memolab-ro-", dir="/tmp"))
    try:
        shutil.copytree(proj.root, shared / "p")
        for d, _, fs in os.walk(shared):
            os.chmod(d, 0o755)
            for x in fs:
                os.chmod(os.path.join(d, x), 0o644)
        python, src = other_user_python()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(shared / "p")]),
                   MEMOLAB_STORE=str(shared / "p" / ".memolab"), PYTHONDONTWRITEBYTECODE="1")
        cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "f.py", "3"],
                            cwd=shared / "p", env=env, capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        out = json.loads(cp.stdout.strip().splitlines()[-1])
        assert out["values"] == [3] and out["computed"] == [3]
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# -- `memolab why` on a damaged miss record ------------------------------------------------------

@pytest.mark.parametrize("text", ["{{broken", "{}", "[1, 2]", '{"fn": "f.f", "hit": false, "reasons": "abc"}',
                                  '{"pending": true, "fn": "f.f"}', "null"])
def test_why_on_a_damaged_miss_record_says_what_is_damaged_and_what_to_do(proj, text):
    proj.run_json("f.py", "3")
    with sqlite3.connect(proj.store / "index.sqlite") as c:
        assert c.execute("UPDATE misses SET explanation=? WHERE id=(SELECT max(id) FROM misses)", (text,)).rowcount == 1
    for args in (["why", "f"], ["why", "f", "--json"]):
        cp = proj.run("-m", "memolab", *args, check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert "Traceback" not in cp.stdout + cp.stderr and "Error" not in cp.stdout + cp.stderr, cp.stdout + cp.stderr
        assert "record of this miss is damaged" in cp.stdout and "doctor" in cp.stdout, cp.stdout
    cp = doctor(proj)
    assert cp.returncode == 1 and "damaged miss record" in cp.stdout, cp.stdout
    assert doctor(proj).returncode == 0
    assert "no miss recorded" in proj.run("-m", "memolab", "why", "f").stdout
