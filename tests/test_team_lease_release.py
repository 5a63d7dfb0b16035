"""Team leases whose release was lost with a connection (issue 49, item 2).

20 processes against ``max_connections = 12`` left leases in ``memolab_leases`` after all of them
exited with status 0: a release that met a lost connection was dropped ("it goes stale after its
TTL"), and others waited a TTL. Now a living process releases what it could not when it next
reaches the server (the uploader's round after its probe), and at exit in one bounded try.
PostgreSQL reached through ``servers.faultproxy`` (connections reset, new ones refused), real
processes; the lease table read directly.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from test_team_faults import rig  # noqa: F401  (a fixture)

SCRIPT = """
import os, sys, time
import memolab

def wait(name):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["FLAG"] + name):
        assert time.monotonic() < deadline, name
        time.sleep(0.02)

@memolab.memo
def f(n):
    open(os.environ["FLAG"] + ".computing", "w").close()
    wait(".go")
    raise ValueError("the computation failed")  # its leases are released: here while the connection is lost

try:
    f(int(sys.argv[1]))
except ValueError:
    pass
open(os.environ["FLAG"] + ".failed", "w").close()
wait(".exit")
"""


def _leases(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        return int(c.execute("SELECT count(*) FROM memolab_leases").fetchone()[0])


def _wait(cond, what: str, bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _fail_while_cut(rig, n: int, flag: Path) -> subprocess.Popen:  # noqa: F811
    """A process computing ``n`` (holding its team lease) whose connection is lost and whose
    computation then fails: its release cannot reach the server. Left waiting for ``.exit``."""
    p = subprocess.Popen([sys.executable, str(rig.root / "lease.py"), str(n)], cwd=rig.root,
                         env={**rig.env(f"M{n}"), "FLAG": str(flag)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    _wait(lambda: Path(f"{flag}.computing").exists() or p.poll() is not None, "never computed")
    assert p.poll() is None, p.communicate()[1]
    assert _leases(rig.dsn) == 1
    rig.pg_proxy.set("refuse")
    rig.pg_proxy.reset()  # the open connection is lost, new ones are refused
    Path(f"{flag}.go").touch()
    _wait(lambda: Path(f"{flag}.failed").exists() or p.poll() is not None, "never failed")
    assert _leases(rig.dsn) == 1, "released although the server could not be reached"
    return p


def test_a_lease_whose_release_was_lost_is_released_when_the_server_answers_and_at_exit(rig):  # noqa: F811
    (rig.root / "lease.py").write_text(SCRIPT)
    # a process that lives on (a notebook kernel): released once its probe finds the server again
    flag = rig.root / "live"
    p = _fail_while_cut(rig, 1, flag)
    try:
        rig.pg_proxy.heal()
        t0 = time.monotonic()
        _wait(lambda: _leases(rig.dsn) == 0, "a living process never released the lease it lost")
        print(f"released {time.monotonic() - t0:.2f} s after the server answered again (probe at 2 s)")
        assert p.poll() is None
    finally:
        Path(f"{flag}.exit").touch()
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    # a process that exits before its next probe: released by the exit
    flag = rig.root / "exits"
    p = _fail_while_cut(rig, 2, flag)
    rig.pg_proxy.heal()
    Path(f"{flag}.exit").touch()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert _leases(rig.dsn) == 0, "the lease stayed after its owner exited with status 0"
    assert "Traceback" not in err, err
