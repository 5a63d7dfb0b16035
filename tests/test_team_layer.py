"""The team store layer (docs/team.md): two "machines" sharing one team store.

Each machine is a local store directory used by its own fresh processes; the
team store is real: PostgreSQL + an S3 server (moto) where their fixtures are
available, and a SQLite team index + a file:// blob folder (the one-host option)
always. Real computations are counted through a side-effect file, never by timing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import memolab
from conftest import SRC, output_of
from memolab.settings import config
from servers.team import LocalTeam  # noqa: F401  (the `team` and `pg_team` fixtures come from there too)

# MEMOLAB_REMOTE_TIMEOUT and MEMOLAB_REMOTE_DRAIN of a process whose team store is healthy (or
# stopped: a refusal costs no wait): a statement slowed by load (load 20-30 on 2 cores) is not an
# outage, and an exit's upload is not cut. The drain returns once the uploads are done, and a
# process that knows its store is down does not drain: healthy runs wait no longer for it.
HEALTHY = "120"
HANG = 300  # seconds: a bound on each process, against a hang only

JOB = '''
import json, os, sys, time
import memolab

@memolab.memo
def f(n):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.environ['MACHINE']} {n}\\n")
    memolab.log.scalar("loss", 1.0 / (n + 1), step=0)  # logs travel with the evaluation
    for i in range(int(os.environ.get("POINTS", "0"))):  # more logs: a bundle too large for a row
        memolab.log.scalar("noise", int.from_bytes(os.urandom(6), "big") / 2**48, step=i + 1)
    if os.environ.get("HOLD"):
        open(os.environ["HOLD"], "w").close()
        time.sleep(600)
    if os.environ.get("GATE"):  # computing until the test opens the gate (a file), 120 s at most
        open(os.environ["GATE"] + ".in", "w").close()
        t = time.monotonic()
        while not os.path.exists(os.environ["GATE"]) and time.monotonic() - t < 120:
            time.sleep(0.02)
    # n even: a small result (inline in the index row); n odd: blob files
    return {"n": n, "data": bytes([n % 256]) * (60000 if n % 2 else 10)}

if os.environ.get("FAKE_HOST"):  # another machine: its lease owner names another host
    import memolab.store.leasing as s
    s.host_name = lambda: os.environ["FAKE_HOST"]

out = []
for a in sys.argv[1:]:
    r = f(int(a))
    assert r["data"] == bytes([int(a) % 256]) * (60000 if int(a) % 2 else 10), a
    out.append(r["n"])
print(json.dumps(out), flush=True)
if os.environ.get("CRASH"):
    os._exit(0)  # no exit handlers: as a SIGKILL right after the result was stored
'''


class Machine:
    """One machine: a local store directory, used by fresh processes."""

    def __init__(self, name: str, root: Path, team, calls: Path, extra: dict[str, str] | None = None) -> None:
        self.name, self.root, self.team, self.calls = name, root, team, calls
        self.store = root / f"store-{name}"
        self.extra = dict(extra or {})

    def env(self, **kw: str) -> dict[str, str]:
        e = dict(os.environ)
        e.pop("MEMOLAB_HMAC_KEY", None)
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(self.store), CALLS=str(self.calls), MACHINE=self.name,
                 MEMOLAB_REMOTE_TIMEOUT=HEALTHY, MEMOLAB_REMOTE_DRAIN=HEALTHY, PYTHONDONTWRITEBYTECODE="1",
                 **self.team.env)
        e.update(self.extra)
        e.update(kw)
        return e

    def run(self, *ns: int, check: bool = True, **kw: str) -> subprocess.CompletedProcess:
        cp = subprocess.run([sys.executable, str(self.root / "job.py"), *map(str, ns)], cwd=self.root,
                            env=self.env(**kw), capture_output=True, text=True, timeout=HANG)
        if check:
            assert cp.returncode == 0, cp.stderr
            assert json.loads(cp.stdout.strip().splitlines()[-1]) == list(ns)
        return cp

    def cli(self, *args: str, **kw: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memolab", *args], cwd=self.root, env=self.env(**kw),
                              capture_output=True, text=True, timeout=HANG)


def computed(calls: Path) -> list[str]:
    return calls.read_text().split("\n")[:-1] if calls.exists() else []


@pytest.fixture
def machines(tmp_path, team):
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    return Machine("A", tmp_path, team, calls), Machine("B", tmp_path, team, calls), calls


def test_two_machines_share_work_offline_and_sync(machines, team):
    """Issue 12's scenario: B hits what A computed; B works offline on what it pulled;
    A keeps computing while the team store is down; `memolab sync` uploads it after."""
    a, b, calls = machines
    a.run(1, 2)  # an upload-sized (blob) result and an inline one; uploaded at exit
    assert computed(calls) == ["A 1", "A 2"]
    b.run(1, 2)
    assert computed(calls) == ["A 1", "A 2"], "B recomputed what A had computed"
    if team.name == "postgresql+s3":  # (a SQLite team index has no logs column)
        import sqlite3

        with sqlite3.connect(b.store / "index.sqlite") as c:
            got = c.execute("SELECT e.fn, s.tag, s.value FROM runs r JOIN evaluations e ON e.id = r.eval_id "
                            "JOIN scalars s ON s.run = r.id ORDER BY s.value").fetchall()
        assert [(t, v) for _, t, v in got] == [("loss", 1 / 3), ("loss", 1 / 2)], got

    a.run(3, 4)
    pulled = b.cli("pull", "f", "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["imported"] == 2
    if team.name == "postgresql+s3":
        assert json.loads(pulled.stdout)["runs"] == 2  # their logs came with them
    assert not list((b.store / "tmp").glob("download.*")), "a pull leaves no temporary file behind"

    team.down()
    cp = b.run(1, 2, 3, 4)  # offline: what B used or pulled is local
    assert computed(calls) == ["A 1", "A 2", "A 3", "A 4"]
    assert "unreachable" not in cp.stderr, "a local hit must not touch the team store"

    cp = a.run(5, 6, 7)  # A computes on while the team store is down
    assert computed(calls)[-3:] == ["A 5", "A 6", "A 7"]
    assert cp.stderr.count("team store unreachable") == 1, cp.stderr  # said once, not per call
    st = a.cli("remote", "status", "--json")
    assert st.returncode == 1
    s = json.loads(st.stdout)
    assert s["reachable"] is False and s["queued"] == 3
    failed = a.cli("sync")
    assert failed.returncode == 1 and "unreachable" in failed.stderr

    team.up()
    synced = a.cli("sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout) == {"uploaded": 3, "added_by_all": 0, "queued": 0, "resent": 0,
                                         "accepts": 0, "undos": 0, "keep_marks": 0}
    b.run(5, 6, 7)
    assert computed(calls)[-3:] == ["A 5", "A 6", "A 7"] and len(computed(calls)) == 7, "B recomputed after sync"
    st = json.loads(a.cli("remote", "status", "--json").stdout)
    assert st["reachable"] and st["queued"] == 0 and st["uploaded"] == 7


def test_logs_travel_inline_when_small_and_as_a_blob_when_large(tmp_path, pg_team):
    """A small logs bundle rides in the team row (no request of its own on a hit or a
    pull); a large one is a blob in the object store, named by its digest. Both reach
    another machine, on a hit and on a pull."""
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    a, b, c = (Machine(n, tmp_path, pg_team, calls) for n in "ABC")
    a.run(40)
    a.run(41, POINTS="3000")
    import sqlite3

    import psycopg

    with psycopg.connect(pg_team.env["MEMOLAB_REMOTE"]) as conn:
        refs = dict(conn.execute("SELECT args, logs FROM memolab_evaluations").fetchall())
    small, large = sorted(refs.values(), key=len, reverse=True)
    assert small.startswith("z:") and len(small) < 2 * 8192
    assert len(large) == 64
    s3 = pg_team.s3.client()
    keys = {o["Key"].rsplit("/", 1)[1] for o in s3.list_objects_v2(Bucket=pg_team.bucket).get("Contents", [])}
    assert large in keys, "the large bundle is a blob"

    def points(m: Machine) -> dict[str, int]:
        with sqlite3.connect(m.store / "index.sqlite") as conn:
            return dict(conn.execute("SELECT s.tag, count(*) FROM runs r JOIN scalars s ON s.run = r.id "
                                     "GROUP BY s.tag").fetchall())

    assert points(a) == {"loss": 2, "noise": 3000}
    # team hits: the logs are imported in the background, at the latest at exit (which waits for
    # an import the background thread has in flight: the large bundle's GET was lost to the exit)
    b.run(40, 41)
    pulled = json.loads(c.cli("pull", "f", "--json").stdout)
    assert (pulled["imported"], pulled["runs"]) == (2, 2)
    assert computed(calls) == ["A 40", "A 41"]
    assert points(b) == points(c) == {"loss": 2, "noise": 3000}


def test_code_texts_travel_so_a_team_result_explains_its_miss_with_a_diff(machines, team):
    """B hits (and C pulls) what A computed, never computing it: their stores still get
    the source text of the code it was computed with, so when B's code changes, B's miss
    shows the diff (the texts come with a pull, and after a team hit in the background or
    at the process's exit)."""
    a, b, calls = machines
    a.run(51)
    b.run(51)  # a team hit
    c = Machine("C", a.root, team, calls)
    assert json.loads(c.cli("pull", "f", "--json").stdout)["imported"] == 1
    assert computed(calls) == ["A 51"]
    import sqlite3

    for m in (b, c):
        with sqlite3.connect(m.store / "index.sqlite") as conn:
            texts = [src for (src,) in conn.execute("SELECT source FROM sources")]
        assert any("def f(n):" in t for t in texts), (m.name, texts)
    job = a.root / "job.py"
    job.write_text(job.read_text().replace('return {"n": n,', 'return {"n": n + 0,'))
    b.run(51)  # its code changed: a miss, explained against A's evaluation
    assert computed(calls) == ["A 51", "B 51"]
    why = b.cli("why", "f", "--json")
    assert why.returncode == 0, why.stderr
    miss = json.loads(why.stdout)["miss"]
    (diff,) = miss["diffs"].values()
    assert '-    return {"n": n,' in diff and '+    return {"n": n + 0,' in diff, diff


def test_a_crash_after_storing_loses_nothing(machines, team):
    """The local store is the journal: a process killed right after storing (no exit
    handlers, no upload) leaves its upload queued; the next process uploads it."""
    a, b, calls = machines
    a.run(11, CRASH="1")
    st = json.loads(a.cli("remote", "status", "--json").stdout)
    assert st["queued"] == 1
    a.run(11)  # a local hit: the next process with the team store uploads the queue at exit
    assert json.loads(a.cli("remote", "status", "--json").stdout)["queued"] == 0
    b.run(11)
    b.run(11)
    assert computed(calls) == ["A 11"]
    # every machine's hits reach the team row, each once: at the exit of a process that used the
    # team store, else (B's second run: local hits only) by its uploader if it woke (a pending logs
    # import does), by the next process or by sync: 2 or already 3 here, never more
    assert list(team.hits().values()) in ([2], [3])
    assert b.cli("sync").returncode == 0
    assert list(team.hits().values()) == [3]


def test_sync_all_uploads_results_from_before_the_remote(machines):
    a, b, calls = machines
    a.run(21, 22, MEMOLAB_REMOTE="", MEMOLAB_REMOTE_BLOBS="")  # computed before the team store existed
    out = a.cli("sync", "--all", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"uploaded": 2, "added_by_all": 2, "queued": 0, "resent": 0, "accepts": 0,
                                      "undos": 0, "keep_marks": 0}
    c = Machine("C", a.root, a.team, calls)
    later = json.loads(c.cli("pull", "--since", "2999-01-01", "--json").stdout)
    assert later["imported"] == 0 and later["team_rows"] == 0
    pulled = json.loads(c.cli("pull", "--json").stdout)
    assert (pulled["imported"], pulled["function"]) == (2, None)
    b.run(21, 22)
    c.run(21, 22)
    assert computed(calls) == ["A 21", "A 22"]


def test_corrupt_team_blob_is_refused_and_replaced(machines, team):
    """A team blob that does not match its digest is never returned: B recomputes,
    the team row is taken out of use and B's upload replaces it for everyone."""
    a, b, calls = machines
    a.run(31)
    import sqlite3

    with sqlite3.connect(a.store / "index.sqlite") as c:
        payload, buffers = c.execute("SELECT payload, buffers FROM evaluations").fetchone()
    for digest in [payload, *(d for d, _ in json.loads(buffers))]:
        team.corrupt_blob(digest)
    cp = b.run(31)
    assert computed(calls) == ["A 31", "B 31"]
    assert "cannot be used" in cp.stderr
    c = Machine("C", a.root, team, calls)
    c.run(31)
    assert computed(calls) == ["A 31", "B 31"], "the recomputed result was not uploaded in place of the corrupt one"


def test_team_lease_of_a_killed_machine_is_taken_over_after_ttl(machines, tmp_path):
    """Single flight across machines: B waits while A (another host, so its pid cannot
    be asked) computes; A is SIGKILLed; B takes the key over once A's lease is stale."""
    a, b, calls = machines
    hold = tmp_path / "holding"
    ttl = dict(MEMOLAB_LEASE_TTL="2.5", MEMOLAB_HEARTBEAT="0.2")  # roomy: a loaded machine must not stall it
    pa = subprocess.Popen([sys.executable, str(a.root / "job.py"), "41"], cwd=a.root,
                          env=a.env(HOLD=str(hold), FAKE_HOST="other-box", **ttl),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not hold.exists():
            assert pa.poll() is None and time.monotonic() < deadline, pa.stderr.read().decode() if pa.poll() else ""
            time.sleep(0.05)
        pb = subprocess.Popen([sys.executable, str(b.root / "job.py"), "41"], cwd=b.root, env=b.env(**ttl),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(3.5)  # past the TTL: A heart-beats, so B must still be waiting
            assert pb.poll() is None, pb.communicate()
            assert computed(calls) == ["A 41"]
        finally:
            pa.send_signal(signal.SIGKILL)
            pa.wait()
        out, err = pb.communicate(timeout=HANG)
        assert pb.returncode == 0, err
        assert json.loads(out.decode().strip().splitlines()[-1]) == [41]
        assert computed(calls) == ["A 41", "B 41"]
    finally:
        if pa.poll() is None:
            pa.kill()
            pa.wait()


def test_single_flight_across_machines_at_the_default_remote_timeout(machines, tmp_path):
    """The default MEMOLAB_REMOTE_TIMEOUT (10 s) and MEMOLAB_REMOTE_DRAIN (unset here, where the
    other tests of this file set ``HEALTHY``): B calls the key A is computing, waits on the team's
    lease and gets A's result; computed once. A team statement that ran past the timeout would take
    the team store for down and B would compute the key too. Under `make test-stress`'s load this is
    the test that says whether the default holds on a loaded machine (test_team_dask and test_team_gc
    raise it to 30 s: they test other things)."""
    a, b, calls = machines
    gate = tmp_path / "gate"

    def start(m):
        env = {k: v for k, v in m.env(GATE=str(gate)).items()
               if k not in ("MEMOLAB_REMOTE_TIMEOUT", "MEMOLAB_REMOTE_DRAIN")}
        return subprocess.Popen([sys.executable, str(m.root / "job.py"), "52"], cwd=m.root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def until(what, cond, p):
        deadline = time.monotonic() + 300  # against a hang: a start under heavy load took over 30 s
        while not cond():
            assert p.poll() is None, f"{what}: the process ended: {p.communicate()}"
            assert time.monotonic() < deadline, f"{what} within 300 s: {output_of(p)}"
            time.sleep(0.02)

    def b_waits():  # B holds its local lease while the team says "wait" (or while it asks)
        try:
            with sqlite3.connect(f"{(b.store / 'index.sqlite').as_uri()}?mode=ro", uri=True) as c:
                return c.execute("SELECT COUNT(*) FROM leases").fetchone()[0] > 0
        except sqlite3.Error:
            return False  # not made yet

    import sqlite3

    pa = start(a)
    pb = None
    try:
        until("A computes", Path(f"{gate}.in").exists, pa)
        pb = start(b)
        until("B asks for the key", b_waits, pb)
        gate.touch()
        outs = [p.communicate(timeout=HANG) for p in (pa, pb)]
        for p, (out, err) in zip((pa, pb), outs, strict=True):
            assert p.returncode == 0, err.decode()
            assert json.loads(out.decode().strip().splitlines()[-1]) == [52]
        assert computed(calls) == ["A 52"], "B computed the key too: the team store was taken for down"
    finally:
        for p in (pa, pb):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# -- configuration -------------------------------------------------------------------------

def test_no_remote_imports_nothing_new(tmp_path):
    """Without a remote, a miss and a hit import neither the team package nor psycopg/boto3."""
    script = tmp_path / "s.py"
    script.write_text(
        "import sys, memolab\n"
        "@memolab.memo\n"
        "def f(x):\n    return x + 1\n"
        "assert f(1) == 2\n"
        "bad = [m for m in sys.modules if m.startswith(('memolab.team', 'psycopg', 'boto3', 'botocore', 'tomllib'))]\n"
        "assert not bad, bad\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_REMOTE")}
    env.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(tmp_path / "store"))
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for _ in range(2):  # a miss, then a hit in a fresh process
        cp = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert cp.returncode == 0, cp.stderr


@pytest.fixture
def clean_remote(monkeypatch):
    for k in ("MEMOLAB_REMOTE", "MEMOLAB_REMOTE_BLOBS"):
        monkeypatch.delenv(k, raising=False)
    old = config.settings()
    yield
    memolab.configure(remote=old.remote, remote_blobs=old.remote_blobs)


def test_remote_settings_resolution(tmp_path, monkeypatch, clean_remote):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    monkeypatch.chdir(ws / "sub")
    (ws / "pyproject.toml").write_text("[project]\nname='x'\n")
    assert config.remote() is None
    (ws / "pyproject.toml").write_text("[project]\nname='x'\n[tool.memolab]\nremote = 'postgresql://db/team'\n"
                                       "remote_blobs = 's3://bucket/memo'\n")
    assert config.remote() == ("postgresql://db/team", "s3://bucket/memo")
    monkeypatch.setenv("MEMOLAB_REMOTE", "postgresql://env/team")
    assert config.remote() == ("postgresql://env/team", "s3://bucket/memo")  # env over pyproject
    memolab.configure(remote="sqlite:///x/index.sqlite", remote_blobs="file:///x/blobs")
    assert config.remote() == ("sqlite:///x/index.sqlite", "file:///x/blobs")  # configure() over both


def test_store_is_layered_only_with_a_complete_remote(tmp_path, monkeypatch, clean_remote):
    from memolab.store import Store, get_store

    monkeypatch.chdir(tmp_path)
    assert type(get_store(tmp_path / "s1")) is Store
    memolab.configure(remote=f"sqlite://{tmp_path}/team.sqlite")
    with pytest.warns(memolab.MemolabWarning, match="MEMOLAB_REMOTE_BLOBS"):
        assert type(get_store(tmp_path / "s2")) is Store
    (tmp_path / "tb").mkdir()
    memolab.configure(remote_blobs=f"file://{tmp_path}/tb")
    from memolab.team.layered import TeamStore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = get_store(tmp_path / "s3")
    assert isinstance(s, TeamStore)


def test_signed_team_rows_verify_across_machines_and_forgeries_are_refused(tmp_path, team):
    """With MEMOLAB_HMAC_KEY, a row signed on A verifies on B (fields travel verbatim);
    a machine with another key refuses the team's rows and recomputes."""
    (tmp_path / "job.py").write_text(JOB)
    calls = tmp_path / "calls"
    a = Machine("A", tmp_path, team, calls, {"MEMOLAB_HMAC_KEY": "team-secret"})
    b = Machine("B", tmp_path, team, calls, {"MEMOLAB_HMAC_KEY": "team-secret"})
    m = Machine("M", tmp_path, team, calls, {"MEMOLAB_HMAC_KEY": "another-key"})
    a.run(51, 52)
    cp = b.run(51, 52)
    assert computed(calls) == ["A 51", "A 52"]
    assert "MEMOLAB_HMAC_KEY" not in cp.stderr  # signed: no trust warning
    cp = m.run(51)
    assert computed(calls) == ["A 51", "A 52", "M 51"]
    assert "refused" in cp.stderr


def test_team_store_going_down_mid_process_never_fails_a_call(tmp_path, postgres_server, postgres_dsn, s3_server,
                                                            s3_bucket, clean_remote):
    """A live process whose team store goes away: calls go on locally (one warning for
    all of them), results stay queued, and are uploaded once the store is back."""
    from conftest import Calls

    ran = Calls()

    @memolab.memo
    def g(x):
        ran.append(x)
        return bytes([x]) * 50000

    old = config.settings().store
    old_timeout = config.settings().remote_timeout
    # the servers are stopped, not silenced: every wait after it is a refusal, at once; the timeout
    # bounds only the healthy part before it, where a loaded machine's slow statement is no outage
    memolab.configure(store=str(tmp_path / "live"), remote=postgres_dsn, remote_blobs=s3_bucket, remote_timeout=60.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert g(1) == bytes([1]) * 50000  # connected: computed, uploaded in the background
        store = g.store()
        store.journal.drain()
        # recorded from the moment the servers stop: whichever thread meets the outage
        # first (the caller, the uploader, the lease heartbeat) gives the one warning
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            postgres_server.stop()
            s3_server.stop()
            assert g(2) == bytes([2]) * 50000
            assert g(3) == bytes([3]) * 50000
            assert g(2) == bytes([2]) * 50000  # a local hit
        down = [x for x in w if "team store unreachable" in str(x.message)]
        assert len(down) == 1, [str(x.message) for x in w]
        assert ran == [1, 2, 3]
        from memolab.team import journal

        assert journal.count(store.index) == 2
        postgres_server.start()
        s3_server.start()
        s3_server.client().create_bucket(Bucket=s3_bucket[len("s3://"):].split("/")[0])
        assert store.link.probe()
        # the background uploader may send some or all of them first: what counts is
        # that the queue empties and the team index then has both results
        store.journal.drain()
        assert journal.count(store.index) == 0
        for x in (2, 3):
            assert store.link.index.lookup(g.key(x)) is not None
    finally:
        memolab.configure(store=old, remote_timeout=old_timeout)


def test_environment_changed_mid_process_is_seen_by_the_next_call(tmp_path, monkeypatch):
    """A memo caches its store per settings and environment: ``MEMOLAB_REMOTE`` set (or
    unset) between two calls of one process puts the team store in front (or takes it
    away) at the next call, as ``MEMOLAB_STORE`` moves the store."""
    from memolab.store import Store

    team = LocalTeam(tmp_path)
    old = config.settings()
    monkeypatch.delenv("MEMOLAB_REMOTE", raising=False)
    monkeypatch.delenv("MEMOLAB_REMOTE_BLOBS", raising=False)
    monkeypatch.setenv("MEMOLAB_STORE", str(tmp_path / "s1"))
    memolab.configure(store=None, remote=None, remote_blobs=None)

    @memolab.memo
    def g(x):
        return x * 2

    try:
        assert g(1) == 2
        assert type(g.store()) is Store and g.store().root == tmp_path / "s1"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (no HMAC key: said once)
            for k, v in team.env.items():
                monkeypatch.setenv(k, v)
            assert g(1) == 2
            st = g.store()
            assert type(st).__name__ == "TeamStore" and st.root == tmp_path / "s1"
            monkeypatch.setenv("MEMOLAB_STORE", str(tmp_path / "s2"))
            assert g(1) == 2
            assert g.store().root == tmp_path / "s2"
        monkeypatch.delenv("MEMOLAB_REMOTE")
        monkeypatch.delenv("MEMOLAB_REMOTE_BLOBS")
        assert type(g.store()) is Store
    finally:
        memolab.configure(store=old.store, remote=old.remote, remote_blobs=old.remote_blobs)


def test_an_upload_never_goes_before_the_runs_logs_are_written(tmp_path, postgres_dsn, s3_bucket, clean_remote,
                                                               monkeypatch):
    """A result is recorded (and queued for upload) before its run's logs are written, since the
    run names the evaluation. The background uploader woke in between on a loaded machine (seen
    in CI: more than the 0.3 s it used to wait) and published the row without its logs, for good.
    Here the uploader is made to run exactly there: the row must still go up with every point."""
    from memolab.team import journal
    from memolab.tracking import runs

    @memolab.memo
    def h(x):
        for step in range(50):
            memolab.log.scalar("loss", x / (step + 1), step=step)
        return x * 2

    raced = []
    real_end = runs.end

    def end_after_an_upload(*a, **kw):  # the uploader runs between the save and the logs' flush
        st = h.store()
        raced.append(journal.count(st.index))
        st.journal.upload_batch(min_age=0.0, force=True)
        return real_end(*a, **kw)

    monkeypatch.setattr(runs, "end", end_after_an_upload)
    old = config.settings().store
    memolab.configure(store=str(tmp_path / "a"), remote=postgres_dsn, remote_blobs=s3_bucket)
    try:
        assert h(3) == 6
        st = h.store()
        assert raced == [1]  # queued when the uploader ran
        st.journal.drain()
        assert journal.count(st.index) == 0
        row = st.link.index.lookup(h.key(3))
        assert row is not None and row["logs"], "published without its logs"
        from memolab.store import Store
        from memolab.team import logs as team_logs
        from memolab.tracking import schema

        digest, data = team_logs.parse_ref(row["logs"])
        assert digest is None and data is not None  # 50 points: inline, in the row
        b = Store(tmp_path / "b")
        schema.ensure(b.index.conn())
        assert team_logs.import_bundle(b.index, data, 1) == 1
        (n,) = b.index.conn().execute("SELECT COUNT(*) FROM scalars WHERE tag='loss'").fetchone()
        assert n == 50
    finally:
        memolab.configure(store=old)
