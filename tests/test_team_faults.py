"""The team store under real network and server faults (issue 24): every wait is bounded.

A memoized call meets a fault of the team store after its process has connected
(``tests/servers/faultproxy.py`` between memolab and PostgreSQL / moto S3; a second
session locking the table; the server frozen with SIGSTOP). For each fault: the call
returns its right value within ``MEMOLAB_REMOTE_TIMEOUT * 3 + margin`` (a generous
bound: a hang is what is tested, not speed), with at most one warning; after the fault
clears, ``memolab sync`` uploads what was computed meanwhile (nothing lost) and another
machine gets the right values from the team store without computing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import SRC, output_of
from servers.faultproxy import FaultProxy

TIMEOUT = 1.0  # MEMOLAB_REMOTE_TIMEOUT in these tests
BOUND = 3 * TIMEOUT + 2.5  # "no hang": connecting alone may take libpq's floor of 2 s

JOB = '''
import json, os, sys, time
import memolab

@memolab.memo
def f(n):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} {n}\\n")
    # n even: a small result (inline in the index row); n odd: a blob on S3
    return {"n": n, "data": bytes([n % 256]) * (60000 if n % 2 else 10)}

@memolab.memo
def g(size):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} big\\n")
    return b"g" * size

times = {}
for a in sys.argv[1:]:
    if a.startswith("wait:"):  # the test injects its fault now
        open(a[5:] + ".ready", "w").close()
        while not os.path.exists(a[5:] + ".go"):
            time.sleep(0.01)
        continue
    if a.startswith("confirm:"):  # the background confirmation's delay (10 s) shortened
        import memolab.team.journal
        memolab.team.journal.CONFIRM_AFTER = float(a[8:])
        continue
    if a.startswith("until:"):  # wait (at most 20 s) until the team index holds this many rows
        import psycopg
        with psycopg.connect(os.environ["TEAM_DSN"], autocommit=True) as c:
            for _ in range(2000):
                if c.execute("SELECT count(*) FROM memolab_evaluations WHERE status = 'done'").fetchone()[0] >= int(a[6:]):
                    break
                time.sleep(0.01)
        continue
    t0 = time.monotonic()
    if a == "big":  # 24 MB: a multipart upload to S3
        r = g(24 << 20)
        assert len(r) == 24 << 20 and r[:1] == b"g" and r[-1:] == b"g"
    else:
        r = f(int(a))
        assert r == {"n": int(a), "data": bytes([int(a) % 256]) * (60000 if int(a) % 2 else 10)}, a
    times[a] = time.monotonic() - t0
print(json.dumps(times), flush=True)
'''


class Rig:
    """Machines whose team store is reached through fault proxies (or directly)."""

    def __init__(self, root: Path, pg, s3, dsn: str, bucket_url: str) -> None:
        self.root, self.pg, self.s3, self.dsn = root, pg, s3, dsn
        (root / "job.py").write_text(JOB)
        self.calls = root / "calls"
        self.pg_proxy = FaultProxy(pg.port)
        self.s3_proxy = FaultProxy(s3.port)
        self.bucket_url = bucket_url
        self.proxied_dsn = dsn.replace(f":{pg.port}/", f":{self.pg_proxy.port}/")

    def env(self, machine: str, proxied: bool = True) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MEMOLAB_"))}
        e.update(self.s3.env)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(self.root / f"store-{machine}"), CALLS=str(self.calls),
                 MACHINE=machine, MEMOLAB_REMOTE_TIMEOUT=str(TIMEOUT), MEMOLAB_REMOTE_DRAIN="3",
                 PYTHONDONTWRITEBYTECODE="1", MEMOLAB_REMOTE=self.proxied_dsn if proxied else self.dsn,
                 MEMOLAB_REMOTE_BLOBS=self.bucket_url,
                 MEMOLAB_CODE_CACHE=os.environ.get("MEMOLAB_CODE_CACHE", ""), TEAM_DSN=self.dsn,
                 MEMOLAB_TEAM_UNSIGNED="1")  # an unsigned team store, loaded by opting in (docs/team.md, Trust)
        if proxied:
            e["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{self.s3_proxy.port}"
        return e

    def run(self, machine: str, *args: str, proxied: bool = True,
            env: dict[str, str] | None = None) -> tuple[dict[str, float], str]:
        cp = subprocess.run([sys.executable, str(self.root / "job.py"), *args], cwd=self.root,
                            env={**self.env(machine, proxied), **(env or {})}, capture_output=True, text=True,
                            timeout=60)
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout.strip().splitlines()[-1]), cp.stderr

    def run_with_fault(self, machine: str, before: list[str], after: list[str], inject: Callable[[], None],
                       clear: Callable[[], None]) -> tuple[dict[str, float], str]:
        """Run ``before`` (team store fine), inject the fault, run ``after``, clear it."""
        flag = self.root / f"flag-{machine}"
        proc = subprocess.Popen([sys.executable, str(self.root / "job.py"), *before, f"wait:{flag}", *after],
                                cwd=self.root, env=self.env(machine), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not Path(f"{flag}.ready").exists():
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the job never got ready"
                time.sleep(0.01)
            inject()
            try:
                Path(f"{flag}.go").touch()
                out, err = proc.communicate(timeout=60)
            finally:
                clear()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1]), err

    def cli(self, machine: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memolab", *args], cwd=self.root,
                              env=self.env(machine, proxied=False), capture_output=True, text=True, timeout=60)

    def computed(self) -> list[str]:
        return self.calls.read_text().split("\n")[:-1] if self.calls.exists() else []

    def team_args(self) -> int:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            return int(c.execute("SELECT count(*) FROM memolab_evaluations WHERE status = 'done'").fetchone()[0])

    def close(self) -> None:
        self.pg_proxy.close()
        self.s3_proxy.close()


@pytest.fixture
def rig(tmp_path, postgres_server, postgres_dsn, s3_server, s3_bucket) -> Iterator[Rig]:
    r = Rig(tmp_path, postgres_server, s3_server, postgres_dsn, s3_bucket)
    try:
        yield r
    finally:
        r.close()


def _postgres_pids(pg) -> list[int]:
    """The postmaster and its children (the backends, the background processes)."""
    main = int((pg.data / "postmaster.pid").read_text().split("\n")[0])
    pids = [main]
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == main:
                pids.append(int(d.name))
    return pids


class Lock:
    """A second session holding ``LOCK TABLE memolab_evaluations IN ACCESS EXCLUSIVE MODE``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = None

    def take(self) -> None:
        import psycopg

        self.conn = psycopg.connect(self.dsn)
        self.conn.execute("LOCK TABLE memolab_evaluations IN ACCESS EXCLUSIVE MODE")

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()


def _faults(rig: Rig) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    lock = Lock(rig.dsn)
    frozen: list[int] = []

    def freeze() -> None:
        frozen.extend(_postgres_pids(rig.pg))
        for p in frozen:
            os.kill(p, signal.SIGSTOP)

    def thaw() -> None:
        for p in frozen:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass

    px = rig.pg_proxy
    return {
        # the open connection goes silent (a partition, a frozen middlebox)
        "pg-silent": (lambda: px.set("stall"), px.heal),
        # the open connection is reset, and a new one is a black hole after connecting
        "pg-reset-then-silent": (lambda: (px.set("stall"), px.reset()), px.heal),
        # the connection is reset: one reconnect, transparently
        "pg-reset": (px.reset, px.heal),
        # +50 ms per chunk each way: slower, never wrong
        "pg-latency": (lambda: px.set("pass", latency=0.05), px.heal),
        # another session holds the table
        "pg-table-locked": (lock.take, lock.drop),
        # the server frozen (SIGSTOP of the postmaster and its backends)
        "pg-frozen": (freeze, thaw),
        # the server killed (pg_ctl stop -m immediate), started again once the calls are made
        "pg-killed": (rig.pg.crash, rig.pg.start),
    }


@pytest.mark.parametrize("fault", ["pg-silent", "pg-reset-then-silent", "pg-reset", "pg-latency", "pg-table-locked",
                                   "pg-frozen", "pg-killed"])
def test_a_call_meeting_a_team_index_fault_is_bounded_and_nothing_is_lost(rig, fault):
    inject, clear = _faults(rig)[fault]
    times, err = rig.run_with_fault("A", ["0"], ["1", "2", "3"], inject, clear)
    assert rig.computed() == ["A 0", "A 1", "A 2", "A 3"]
    worst = max(times[n] for n in ("1", "2", "3"))
    print(f"{fault}: longest call {worst:.2f} s; calls {times}")
    assert worst < BOUND, (fault, times, err)
    assert err.count("team store unreachable") + err.count("team store error") <= 1, err
    if fault in ("pg-silent", "pg-reset-then-silent", "pg-table-locked", "pg-frozen", "pg-killed"):
        assert err.count("team store unreachable") == 1, err  # said, once

    synced = rig.cli("A", "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["queued"] == 0
    assert rig.team_args() == 4  # nothing lost
    rig.run("B", "0", "1", "2", "3", proxied=False)  # another machine: right values, nothing recomputed
    assert rig.computed() == ["A 0", "A 1", "A 2", "A 3"]


@pytest.mark.parametrize("fault", ["s3-silent", "s3-refused"])
def test_a_team_hit_whose_blob_store_fails_is_bounded_and_computed_locally(rig, fault):
    rig.run("A", "1", "3")  # blobs on S3, rows in PostgreSQL (uploaded at exit)
    assert rig.team_args() == 2
    px = rig.s3_proxy
    inject = {"s3-silent": lambda: (px.set("stall"), px.reset()),
              "s3-refused": lambda: (px.set("refuse"), px.reset())}[fault]
    times, err = rig.run_with_fault("B", [], ["1", "3", "5"], inject, px.heal)
    worst = max(times.values())
    print(f"{fault}: longest call {worst:.2f} s; calls {times}")
    assert worst < BOUND, (fault, times, err)
    assert err.count("team store unreachable") == 1, err
    assert rig.computed() == ["A 1", "A 3", "B 1", "B 3", "B 5"]  # the blobs unreachable: computed here
    synced = rig.cli("B", "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["queued"] == 0
    assert rig.team_args() == 3  # B's 5 is uploaded; A's rows stand
    rig.run("C", "1", "3", "5", proxied=False)
    assert rig.computed() == ["A 1", "A 3", "B 1", "B 3", "B 5"]


def test_remote_status_is_bounded_read_only_and_checks_the_whole_schema(rig):
    """``memolab remote status``: within its timeout against a silent server, saying what it
    could not reach; it uploads nothing (the queue stays); a missing ``memolab_claim`` is a
    problem, not "fine"."""
    import psycopg

    rig.run("A", "0")  # the schema exists, one row
    px = rig.pg_proxy
    times, err = rig.run_with_fault("A", [], ["2"], lambda: (px.set("stall"), px.reset()), px.heal)
    assert times["2"] < BOUND
    assert rig.team_args() == 1  # 2 is queued locally

    px.set("stall")
    try:
        t0 = time.monotonic()
        st = subprocess.run([sys.executable, "-m", "memolab", "remote", "status", "--json"], cwd=rig.root,
                            env=rig.env("A"), capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        px.heal()
    print(f"remote status against a silent index: {took:.2f} s")
    assert took < BOUND + 2, took  # (+ the interpreter's start)
    out = json.loads(st.stdout)
    assert st.returncode == 1 and out["index_reachable"] is False and out["blobs_reachable"] is True, out
    assert "unreachable" in out["error"] or "did not answer" in out["error"], out

    st = rig.cli("A", "remote", "status", "--json")  # healthy now: read-only all the same
    out = json.loads(st.stdout)
    assert st.returncode == 0 and out["reachable"] and out["queued"] == 1, out
    time.sleep(0.5)
    assert rig.team_args() == 1, "remote status uploaded the queue"

    with psycopg.connect(rig.dsn, autocommit=True) as c:
        c.execute("UPDATE memolab_meta SET value = 'one' WHERE key = 'schema_version'")
    st = rig.cli("A", "remote", "status")
    assert st.returncode == 1 and "'one', not a number" in st.stdout, st.stdout
    with psycopg.connect(rig.dsn, autocommit=True) as c:
        c.execute("UPDATE memolab_meta SET value = '1' WHERE key = 'schema_version'")
        c.execute("DROP FUNCTION memolab_claim")
    st = rig.cli("A", "remote", "status", "--json")
    out = json.loads(st.stdout)
    assert st.returncode == 1 and out["index_reachable"] is False and "function memolab_claim missing" in out["error"]


def test_connect_bounds_are_clamped_for_any_timeout(postgres_dsn):
    """A timeout past the kernel's TCP_KEEPIDLE ceiling (32767 s) or a 32-bit millisecond count
    does not make a healthy server look unreachable (the settings cap it at 600 s anyway)."""
    from memolab.team.pgschema import connect

    for t in (0.1, 600.0, 40000.0, 1e7):
        c = connect(postgres_dsn, t)
        try:
            assert c.execute("SELECT 1").fetchone() == (1,)
            assert c.execute("SHOW statement_timeout").fetchone()[0] != "0"
        finally:
            c.close()


def test_sync_sends_again_what_the_team_index_lost(rig):
    """A database that acknowledged a publish and lost it (``synchronous_commit = off`` and a
    crash) is simulated by deleting the row server-side: ``memolab sync`` looks for what this
    store published, finds it missing and sends it again; another machine then hits it."""
    import psycopg

    rig.run("A", "0", "1", proxied=False)  # both uploaded at exit
    assert rig.team_args() == 2
    with psycopg.connect(rig.dsn, autocommit=True) as c:
        c.execute("DELETE FROM memolab_evaluations WHERE id = (SELECT min(id) FROM memolab_evaluations)")
    assert rig.team_args() == 1
    synced = rig.cli("A", "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    out = json.loads(synced.stdout)
    assert out["resent"] == 1 and out["uploaded"] == 1 and out["queued"] == 0, out
    assert rig.team_args() == 2
    again = json.loads(rig.cli("A", "sync", "--json").stdout)  # confirmed now: nothing to send
    assert again["resent"] == 0 and again["uploaded"] == 0, again
    rig.run("B", "0", "1", proxied=False)
    assert rig.computed() == ["A 0", "A 1"]


def _walwriter(pg) -> int:
    for pid in _postgres_pids(pg)[1:]:
        try:
            if b"walwriter" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError("no walwriter process")


def _crash_and_recover(pg, walwriter: int, dsn: str, seconds: float = 60) -> None:
    """Kill the WAL writer and wait until the server has recovered. A SIGKILL is delivered
    asynchronously: until the killed process has exited and the postmaster has reaped it, the
    server still answers from memory, with the rows the crash is about to lose (one possible cause
    of the "crash lost nothing" seen under load). A new WAL writer starts only once crash recovery
    is over, so the crash is seen when one runs under another pid."""
    os.kill(walwriter, signal.SIGKILL)
    deadline = time.monotonic() + seconds
    while True:
        try:
            if _walwriter(pg) != walwriter:
                break
        except AssertionError:
            pass  # between the crash and the end of recovery: no WAL writer
        assert time.monotonic() < deadline, "PostgreSQL did not restart after its WAL writer was killed"
        time.sleep(0.05)
    _wait_for_recovery(dsn, max(1.0, deadline - time.monotonic()))


def _wait_for_recovery(dsn: str, seconds: float = 60) -> None:
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as c:
                c.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "PostgreSQL did not recover"
            time.sleep(0.1)


def test_sync_sends_again_what_a_crashed_database_lost(rig):
    """A real loss: the test server runs with ``synchronous_commit = off`` (as managed
    PostgreSQL often does), so a commit is acknowledged before its WAL is written. With the
    WAL writer held (SIGSTOP), machine A publishes two results (acknowledged, visible), then
    the WAL writer is killed: the postmaster ends every session and recovers from the WAL on
    disk, without them. ``memolab sync`` finds them missing and sends them again; machine B
    then hits every result without computing."""
    import psycopg

    rig.run("A", "0", proxied=False)
    # Whether PostgreSQL loses the two commits is up to it: in 1 of 5 whole runs, and in 1 of 2 loaded
    # runs of the team files, they were there after the crash (cause not found; a kill seen late by a
    # loaded postmaster is now waited for). Then the premise is tried again with two new rows: what
    # is tested is what memolab does once a write is lost.
    args: list[str] = ["0"]
    for attempt in range(3):
        new = [str(len(args)), str(len(args) + 1)]
        args += new
        with psycopg.connect(rig.dsn, autocommit=True) as c:
            c.execute("CHECKPOINT")  # the schema and the rows so far on disk: only what follows is at risk
        walwriter = _walwriter(rig.pg)
        os.kill(walwriter, signal.SIGSTOP)
        try:
            rig.run("A", *new, proxied=False)  # both published at exit: acknowledged
            assert rig.team_args() == len(args)
        finally:
            _crash_and_recover(rig.pg, walwriter, rig.dsn)
        lost = len(args) - rig.team_args()
        print(f"attempt {attempt + 1}: rows lost by the crash: {lost} of 2 acknowledged")
        if lost:
            break
    assert lost == 2, "the crash lost nothing, 3 times: this test no longer exercises a lost write"
    synced = rig.cli("A", "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    out = json.loads(synced.stdout)
    assert out["resent"] == 2 and out["uploaded"] == 2 and out["queued"] == 0, out
    assert rig.team_args() == len(args)
    rig.run("B", *args, proxied=False)
    assert rig.computed() == [f"A {a}" for a in args]


def test_the_background_uploader_sends_again_what_the_team_index_lost(rig):
    """A long-running process (a notebook) confirms its publishes by itself, ``CONFIRM_AFTER``
    seconds later (10 s; 0.5 s here): a row the database lost meanwhile (deleted server-side)
    is sent again by the background thread, with no ``sync`` and no exit drain (0 s here)."""
    import psycopg

    flag = rig.root / "flag-A"

    def lose_one() -> None:
        deadline = time.monotonic() + 20
        while rig.team_args() < 2:  # the background thread uploaded 0 and 1
            assert time.monotonic() < deadline, "never uploaded"
            time.sleep(0.02)
        with psycopg.connect(rig.dsn, autocommit=True) as c:
            c.execute("DELETE FROM memolab_evaluations WHERE id = (SELECT min(id) FROM memolab_evaluations)")
        time.sleep(0.6)  # older than CONFIRM_AFTER now

    proc = subprocess.Popen([sys.executable, str(rig.root / "job.py"), "confirm:0.5", "0", "1", f"wait:{flag}", "2",
                             "until:3"], cwd=rig.root, env={**rig.env("A", proxied=False), "MEMOLAB_REMOTE_DRAIN": "0"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # a bound against a hang: a start under heavy load took over 30 s
        while not Path(f"{flag}.ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, output_of(proc)
            time.sleep(0.01)
        lose_one()
        assert rig.team_args() == 1
        Path(f"{flag}.go").touch()  # 2 is computed: its upload wakes the thread, which then confirms 0 and 1
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rig.team_args() == 3  # 0 sent again by the thread (the job waited for it; no drain at exit)
    rig.run("B", "0", "1", "2", proxied=False)
    assert rig.computed() == ["A 0", "A 1", "A 2"]


def test_s3_killed_mid_upload_loses_nothing(rig, s3_server):
    """moto SIGKILLed while a 24 MB multipart upload is in flight (slowed by the proxy): the
    process exits within its bounds, the result stays queued locally, no team row names a
    missing blob; with S3 back (empty: moto keeps nothing) ``sync`` uploads it and machine B
    gets it without computing."""
    flag = rig.root / "flag-A"
    px = rig.s3_proxy
    px.set("pass", latency=0.01)  # ~10 ms per 64 KiB: the upload takes seconds
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(rig.root / "job.py"), "big", f"wait:{flag}", "2"], cwd=rig.root,
                            env=rig.env("A"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # a bound against a hang: a start under heavy load took over 30 s
        while not Path(f"{flag}.ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, output_of(proc)
            time.sleep(0.01)
        while sum(c.sent for c in px.conns) < (2 << 20):  # the background upload is under way
            assert time.monotonic() < deadline, "the upload never started"
            time.sleep(0.01)
        s3_server.proc.kill()  # SIGKILL mid-upload
        s3_server.proc.wait()
        t_kill = time.monotonic()
        Path(f"{flag}.go").touch()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t_kill
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        px.heal()
    assert proc.returncode == 0, err
    print(f"s3-killed-mid-upload: {took:.2f} s from the kill to the exit ({time.monotonic() - t0:.2f} s in all)")
    assert took < BOUND + 3, (took, err)  # the call, then a bounded exit (drain 3 s)
    assert rig.team_args() == 0  # no row published for a blob that never arrived
    s3_server.stop()
    s3_server.start()  # empty: the test's bucket again
    s3_server.client().create_bucket(Bucket=rig.bucket_url.split("/")[2])
    synced = rig.cli("A", "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["queued"] == 0
    assert rig.team_args() == 2
    rig.run("B", "big", "2", proxied=False)
    assert rig.computed() == ["A big", "A 2"]


@pytest.mark.parametrize("damage", ["refused", "version-not-a-number", "claim-function-missing"])
def test_team_commands_say_what_is_wrong_in_one_line(rig, damage):
    import psycopg

    rig.run("A", "0", proxied=False)
    if damage == "refused":
        rig.pg_proxy.set("refuse")
    else:
        sql = {"version-not-a-number": "UPDATE memolab_meta SET value = 'one' WHERE key = 'schema_version'",
               "claim-function-missing": "DROP FUNCTION memolab_claim"}[damage]
        with psycopg.connect(rig.dsn, autocommit=True) as c:
            c.execute(sql)
    for cmd in (["gc", "--remote"], ["sync"], ["pull", "f"], ["remote", "status"]):
        cp = subprocess.run([sys.executable, "-m", "memolab", *cmd], cwd=rig.root, env=rig.env("A"),
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 1, (cmd, cp.stdout, cp.stderr)
        assert "Traceback" not in cp.stderr, (cmd, cp.stderr)
        said = [x for x in (cp.stderr + cp.stdout).splitlines() if "unreachable" in x or "damaged" in x
                or "memolab_claim" in x or "not a number" in x]
        assert said and all(x.startswith(("memolab:", "status", "team index")) for x in said), (cmd, cp.stdout,
                                                                                               cp.stderr)
        assert "This probably means" not in cp.stderr + cp.stdout, (cmd, cp.stderr)


def test_the_watchdog_cuts_only_what_overran():
    """``team.deadline.Watchdog``: a blocked read past its deadline is woken (the socket shut
    down); one disarmed in time is left alone; deadlines of several threads in any order."""
    import socket
    import threading

    from memolab.team.deadline import Watchdog

    dog = Watchdog()
    pairs = [socket.socketpair() for _ in range(3)]
    got: dict[int, tuple[bytes, float]] = {}

    def read(i: int, seconds: float) -> None:
        a, _ = pairs[i]
        armed = dog.arm(a.fileno(), seconds)
        t0 = time.monotonic()
        data = a.recv(10)
        got[i] = (data, time.monotonic() - t0)
        dog.disarm(armed)

    threads = [threading.Thread(target=read, args=(0, 5.0)), threading.Thread(target=read, args=(1, 0.2))]
    for t in threads:
        t.start()
    time.sleep(0.05)
    pairs[0][1].send(b"x")  # answered in time
    threads[0].join(5)
    threads[1].join(5)  # the silent one: cut at 0.2 s although armed after a 5 s deadline
    assert got[0][0] == b"x" and got[1][0] == b"" and 0.15 < got[1][1] < 3, got
    a, b = pairs[0]
    b.send(b"y")  # the disarmed socket still works
    assert a.recv(10) == b"y"
    for a, b in pairs:
        a.close()
        b.close()


def test_a_team_call_on_a_link_that_is_down_does_not_open_the_team_index(tmp_path, monkeypatch):
    """A link that is down answers Offline at once: ``link.index`` (which connects on first use)
    is read inside ``Link.run``, never bound before it, so giving up a team lease while the
    team store is down neither waits on a connection nor lets RemoteUnavailable escape."""
    import warnings

    from memolab.errors import RemoteUnavailable
    from memolab.store import Store
    from memolab.team import link as link_mod
    from memolab.team.layered import TeamStore

    opened: list[str] = []

    def refused(url: str, timeout: float) -> None:
        opened.append(url)
        raise RemoteUnavailable("connection refused")

    monkeypatch.setattr(link_mod, "open_index", refused)
    ts = TeamStore(Store(tmp_path / "store"), "postgresql://127.0.0.1:9/none", (tmp_path / "blobs").as_uri())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one warning that the team store is down
        ts.link.went_down(RemoteUnavailable("down"))
    key = ("m:f", "c", "a", "s")
    ts._team_held[key] = "me"
    ts.drop_team_leases([(key, "me")])  # best effort: given up quietly
    assert opened == []
