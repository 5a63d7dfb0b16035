"""A lease expires by its heartbeat, judged on the observer's own clock (issue 36, item 2).

A call that failed on a full disk in a process that stayed alive (a notebook kernel) left its
lease, and the next caller waited for the life of that process, whatever the TTL. Two machines
sharing a store with clocks an hour apart either waited an hour for a killed holder whose clock
was ahead, or computed the key twice while a holder whose clock was behind was alive. Every test
runs the holder and the caller as separate processes (store/leases.py has the rules; the long
GIL-holding call that must keep its lease is ``test_store_integrity``'s
``test_owner_in_a_long_gil_holding_call_keeps_its_lease``).
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import SRC

WORK = """
import os, time, memolab

@memolab.memo
def work(x):
    with open("computed.log", "a") as f:
        f.write(f"{os.getpid()}\\n")
    open(f"started.{os.getpid()}", "w").close()
    if os.environ.get("FULL_DISK"):
        FULL[0] = True  # the disk fills up now: the result cannot be stored, nor the lease released
        raise OSError(28, "No space left on device")
    time.sleep(float(os.environ.get("WORK_SECONDS", "0")))  # (time.sleep lets the heartbeat thread run)
    return x * 2

FULL = [False]
"""

# What makes a holder play a notebook kernel on a full disk: every index write fails once the
# function has started, then the process lives on.
FULL_DISK = """
import sqlite3, time
from memolab.store.sqlite import Index
import work

real = Index.write
def write(self, *a, **k):
    if work.FULL[0]:
        raise sqlite3.OperationalError("database or disk is full")
    return real(self, *a, **k)
Index.write = write
try:
    work.work(21)
except OSError:
    pass
open("failed", "w").close()
time.sleep(600)
"""

# What makes a process another machine's, for the store it shares: another host name and
# process table in its lease ids, no lock shared with this kernel, and its clock SKEW off.
ELSEWHERE = """
import os, time
import memolab.store.leasing as ix
ix.host_name = lambda: "gpu-node-7"
ix.process_table = lambda: "4026531836.0123456789ab"
ix.host_locks = lambda path: None
_real = time.time
time.time = lambda: _real() + float(os.environ.get("SKEW", "0"))
"""


def _env(project, **more):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(project.root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["MEMOLAB_STORE"] = str(project.store)
    e.update({k: str(v) for k, v in more.items()})
    return e


def _start(project, code, **env):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=project.root, env=_env(project, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _caller(project, prelude="", timeout=300, **env):
    """A fresh process calling work(21); (its answer, seconds it took). ``timeout`` is what these
    tests bound the wait by: the waits they exist for were for ever (a live holder sleeps 600 s)
    or an hour (a heartbeat an hour ahead); a loaded machine's slower start is far below it."""
    t = time.monotonic()
    try:
        cp = subprocess.run([sys.executable, "-c", prelude + "\nimport work\nprint(work.work(21))"],
                            cwd=project.root, env=_env(project, **env), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the caller still waited after {timeout} s (for the holder's life, or its clock's "
                             f"hour?): {e.stdout!r} {e.stderr!r}") from None
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.strip(), time.monotonic() - t


def _leases(project):
    with sqlite3.connect(project.store / "index.sqlite") as c:
        return c.execute("SELECT COUNT(*) FROM leases").fetchone()[0]


def _computed(project):
    log = project.root / "computed.log"
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("caller", ["this host", "another machine"])
def test_a_lease_whose_release_failed_in_a_live_process_expires_at_its_ttl(project, caller):
    """The holder's call failed on a full disk and could not delete its lease; it lives on. The
    next caller used to wait for as long as that process lived (26-40 s with a 10 s TTL, here
    for ever); now it waits no longer than the TTL (on this host not at all: the holder's key
    lock went with its release)."""
    project.write("work.py", WORK)
    ttl = 3.0
    holder = _start(project, FULL_DISK, FULL_DISK=1, MEMOLAB_LEASE_TTL=ttl)
    try:
        _wait_for(project.root / "failed", holder)
        assert _leases(project) == 1  # left behind, its owner alive
        answer, took = _caller(project, ELSEWHERE if caller == "another machine" else "", MEMOLAB_LEASE_TTL=ttl)
        assert answer == "42", took  # (bounded by _caller's timeout: for ever it is not)
        assert holder.poll() is None  # it was alive all along
    finally:
        holder.kill()
        holder.communicate()
    assert len(_computed(project)) == 2 and _leases(project) == 0


def test_a_live_holder_whose_clock_is_an_hour_behind_keeps_its_lease(project):
    """A holder on another machine, its clock an hour behind, computes for several TTLs and
    heart-beats: its lease must not look an hour stale (the key was computed twice).

    The TTL is 3 s, 30 heartbeats: a live holder keeps its lease only while its heartbeats land
    within one TTL, and under a loaded suite (4 workers on 2 cores, a neighbour writing a GiB) one
    second without a landed heartbeat happened once. The bug this pins judged the lease an hour
    stale at once, whatever the TTL."""
    project.write("work.py", WORK)
    ttl = 3.0
    holder = _start(project, ELSEWHERE + "\nimport work\nprint(work.work(21))", SKEW=-3600, WORK_SECONDS=3 * ttl,
                    MEMOLAB_LEASE_TTL=ttl, MEMOLAB_HEARTBEAT=0.1)
    try:
        _wait_for(project.root / f"started.{holder.pid}", holder)
        answer, took = _caller(project, MEMOLAB_LEASE_TTL=ttl)
        assert answer == "42"
    finally:
        out, err = holder.communicate(timeout=120)
    assert out.strip() == "42", err
    assert _computed(project) == [str(holder.pid)]  # computed once: the caller waited and hit


def test_a_killed_holder_whose_clock_is_an_hour_ahead_is_taken_over_after_the_ttl(project):
    """A holder on another machine, its clock an hour ahead, is killed mid-computation: its last
    heartbeat lies an hour in the future, and the next caller waited that hour."""
    project.write("work.py", WORK)
    ttl = 2.0
    holder = _start(project, ELSEWHERE + "\nimport work\nprint(work.work(21))", SKEW=3600, WORK_SECONDS=3600,
                    MEMOLAB_LEASE_TTL=ttl, MEMOLAB_HEARTBEAT=0.2)
    _wait_for(project.root / f"started.{holder.pid}", holder)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    answer, took = _caller(project, MEMOLAB_LEASE_TTL=ttl)
    # one TTL without a heartbeat (never early), not the hour (bounded by _caller's timeout)
    assert answer == "42" and took >= ttl * 0.9, took
    assert len(_computed(project)) == 2


HOLD_PG = """
import sys, time
from memolab.team.pg import PgIndex
from memolab.store.leasing import process_token
ix = PgIndex(sys.argv[1])
key = ("m:f", "code", "args", "schema")
print(ix.claim(key, process_token() + ":L0:1", ttl=1.0)[0], flush=True)
time.sleep(600)  # alive on this host, never beating: its release failed, say
"""


def test_pg_a_live_holder_that_stopped_beating_loses_its_team_lease_at_the_ttl(postgres_dsn, tmp_path):
    """On the team index a holder on this host that is alive was never taken over, however long
    its heartbeat had stood still: its pid is no proof it still computes the key."""
    from memolab.team.pg import PgIndex

    e = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", HOLD_PG, postgres_dsn], env=e, stdout=subprocess.PIPE, text=True)
    key = ("m:f", "code", "args", "schema")
    try:
        assert p.stdout.readline().strip() == "owner"
        with PgIndex(postgres_dsn) as ix:
            assert ix.claim(key, "B", ttl=1.0)[0] == "wait"  # heart-beaten a moment ago
            deadline = time.monotonic() + 60
            while ix.claim(key, "B", ttl=1.0)[0] != "owner":  # the database's clock decides
                assert time.monotonic() < deadline, "a live holder's still lease was never taken over"
                time.sleep(0.2)
            assert p.poll() is None
    finally:
        p.kill()
        p.communicate()
