"""``memolab doctor`` lists the leases of owners that are provably gone, in the local store and in
the team index, and ``--drop-dead-leases`` drops them (issue 49, item 2). A live owner's lease is
never listed nor touched. Real processes (one SIGKILLed mid-computation) on PostgreSQL + S3."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

from test_team_layer import JOB, Machine


def _wait_for(path, proc) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the computation never started"
        time.sleep(0.02)


def _team_leases(team) -> list[str]:
    import psycopg

    with psycopg.connect(team.env["MEMOLAB_REMOTE"], autocommit=True) as c:
        return [r[0] for r in c.execute("SELECT owner FROM memolab_leases ORDER BY owner")]


def _local_leases(m) -> list[str]:
    with sqlite3.connect(m.store / "index.sqlite") as c:
        return [r[0] for r in c.execute("SELECT owner FROM leases ORDER BY owner")]


def test_doctor_lists_and_drops_the_leases_of_dead_owners_here_and_in_the_team(tmp_path, pg_team):
    (tmp_path / "job.py").write_text(JOB)
    m = Machine("A", tmp_path, pg_team, tmp_path / "calls")
    procs = {}
    for n in (1, 2):  # 1: killed while it computes; 2: alive, computing
        hold = tmp_path / f"hold{n}"
        procs[n] = subprocess.Popen([sys.executable, str(tmp_path / "job.py"), str(n)], cwd=tmp_path,
                                    env=m.env(HOLD=str(hold)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(hold, procs[n])
    try:
        dead_pid, live_pid = procs[1].pid, procs[2].pid
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(30)
        assert len(_team_leases(pg_team)) == 2 and len(_local_leases(m)) == 2
        cp = m.cli("doctor")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert cp.stdout.count(f"pid {dead_pid}") == 2 and f"pid {live_pid}" not in cp.stdout, cp.stdout
        assert "--drop-dead-leases" in cp.stdout, cp.stdout
        assert len(_team_leases(pg_team)) == 2 and len(_local_leases(m)) == 2, "doctor dropped without being asked"
        cp = m.cli("doctor", "--drop-dead-leases", "--json")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        got = json.loads(cp.stdout)["dead_leases"]
        assert got["dropped"] == {"local": 1, "team": 1} and got["team_problem"] is None, got
        assert [f":{live_pid}:" in o for o in _team_leases(pg_team)] == [True], "a live owner's team lease was touched"
        assert [f":{live_pid}:" in o for o in _local_leases(m)] == [True], "a live owner's lease was touched"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
