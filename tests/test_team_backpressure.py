"""Back-pressure is not an outage (issue 49, item 2), against PostgreSQL + moto S3.

One S3 ``503 SlowDown`` (S3's normal throttling signal) or ``500`` sent a process offline: with a
third of its requests throttled a fresh machine recomputed every result it could have
downloaded. Throttled requests are now asked again with jittered back-off within
``MEMOLAB_REMOTE_TIMEOUT``; throttling that outlasts it marks the team store down, and the
uploader's probe brings it back once S3 answers. S3 is reached through ``servers.httpfault``,
a proxy that answers chosen requests as a busy S3 does.

What is healthy waits ``HEALTHY`` (PostgreSQL always, S3 where it is only throttled a third of
the time): a statement slowed by load is no outage here. Only the blob store that is throttled
for good waits the short timeout, and what that costs is counted (operations failed, the team
store marked down), never timed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import output_of
from servers.httpfault import S3Throttle
from test_team_faults import KNOBS, rig  # noqa: F401  (a fixture)
from test_team_layer import HANG, JOB, Machine, computed

BLOBS = [1, 3, 5, 7, 9, 11]  # odd: results in blob files, each a download from S3

# B: the blob store (throttled for good) waits BLOB_TIMEOUT, the index HEALTHY. The spy of
# test_team_faults (``knobs``, loaded where memolab's scan for planted user code does not look)
# records the main thread's team operations and every ``went_down``.
LATER = """
import json, os, sys, time, types
here = os.path.dirname(os.path.abspath(__file__))
knobs = types.ModuleType("knobs")
exec(compile(open(os.path.join(here, "knobs.py")).read(), "<knobs>", "exec"), knobs.__dict__)
sys.argv = [sys.argv[0]]
exec(open(os.path.join(here, "job.py")).read())
import memolab.store
st = memolab.store.get_store()
HANG = float(os.environ["HANG"])
knobs.CALL[0] = "first"
t0 = time.monotonic()
f(int(os.environ["FIRST"]))  # S3 throttling every request: this one is computed here
first = time.monotonic() - t0
knobs.CALL[0] = None
open(os.environ["FLAG"] + ".offline", "w").close()
deadline = time.monotonic() + HANG  # against a hang only
while not os.path.exists(os.environ["FLAG"] + ".healed"):
    assert time.monotonic() < deadline, f"not healed within {HANG} s"
    time.sleep(0.02)
while not st.link.usable():  # a probe (the uploader's, 2 s after the failure) finds S3 answering again
    assert time.monotonic() < deadline, f"never came back online within {HANG} s: {knobs.SPY}"
    time.sleep(0.05)
knobs.CALL[0] = "second"
t0 = time.monotonic()
n = f(int(os.environ["SECOND"]))["n"]
second = time.monotonic() - t0
knobs.CALL[0] = "exit"
print(json.dumps({"n": n, "first": first, "second": second, "spy": knobs.SPY}), flush=True)
"""
BLOB_TIMEOUT = 1.0  # the throttled blob store's timeout: the throttling outlasts it


@pytest.fixture
def throttle(pg_team):
    port = int(pg_team.env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    t = S3Throttle(port)
    try:
        yield t
    finally:
        t.close()


def test_a_throttled_s3_is_retried_not_taken_for_an_outage(rig):  # noqa: F811
    """A third of the S3 requests throttled (503 SlowDown, then a 500): a fresh machine downloads
    all 6 results, not one operation fails and the team store is never marked down (its remote
    timeout is HEALTHY: a throttled request asked again is no outage, whatever the load); the
    longest call is printed (docs/team.md, Faults)."""
    rig.run("A", *map(str, BLOBS), proxied=False)
    throttle = S3Throttle(rig.s3.port)
    try:
        throttle.every(3, 503, 500)  # a third of the requests, the first of all included
        times, spy = rig.run("B", *map(str, BLOBS), env={"AWS_ENDPOINT_URL": throttle.endpoint})
    finally:
        throttle.close()
    assert rig.computed() == [f"A {n}" for n in BLOBS], f"B recomputed under throttling: {spy}"
    assert throttle.failed >= 3, "the proxy throttled nothing: the test tests nothing"
    assert [a for a in spy["attempts"] if not a["ok"]] == [], spy  # (rig.run: and never marked down)
    assert {a["call"] for a in spy["attempts"]} >= set(map(str, BLOBS)), spy  # each call asked the team
    print(f"{throttle.failed} of {throttle.requests} S3 requests throttled; 6 values checked, 0 recomputed; "
          f"longest call {max(times.values()):.2f} s")


def test_throttling_that_outlasts_the_timeout_goes_offline_and_comes_back_after_a_probe(tmp_path, pg_team, throttle):
    """S3 throttles every request until the test heals it. B's blob store waits BLOB_TIMEOUT (its
    index HEALTHY): the first call asks again while the timeout lasts, then gives up, saying S3 is
    still busy; that costs ONE failed operation and the team store marked down once, by the caller
    (counted); the call is computed locally. Once S3 answers, the uploader's probe brings the team
    store back and the next call is a team hit with no operation failed."""
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "later.py").write_text(LATER)
    (tmp_path / "knobs.py").write_text(KNOBS)
    calls, flag = tmp_path / "calls", tmp_path / "flag"
    Machine("A", tmp_path, pg_team, calls).run(13, 15)
    throttle.all(503)
    b = Machine("B", tmp_path, pg_team, calls, {"AWS_ENDPOINT_URL": throttle.endpoint,
                                                "BLOB_TIMEOUT": f"{BLOB_TIMEOUT:g}", "HANG": str(HANG)})
    p = subprocess.Popen([sys.executable, str(tmp_path / "later.py")], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=b.env(FIRST="13", SECOND="15", FLAG=str(flag)))
    try:
        deadline = time.monotonic() + HANG  # against a hang only: a start under heavy load took over 30 s
        while not (tmp_path / "flag.offline").exists():
            assert p.poll() is None and time.monotonic() < deadline, f"B never went offline: {output_of(p)}"
            time.sleep(0.02)
        throttle.heal()
        (tmp_path / "flag.healed").touch()
        try:
            out, err = p.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"B did not end within {HANG} s: {output_of(p)}") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    spy = got["spy"]
    assert got["n"] == 15
    print(f"throttled out: the call took {got['first']:.2f} s (blob store timeout {BLOB_TIMEOUT:g} s); after the "
          f"probe, a team hit in {got['second']:.2f} s")
    assert computed(calls) == ["A 13", "A 15", "B 13"], "after the probe, 15 was recomputed instead of downloaded"
    failed = [a for a in spy["attempts"] if not a["ok"]]
    assert [a["call"] for a in failed] == ["first"], spy  # ONE failed operation, in the throttled call
    assert "still busy after" in failed[0]["error"] and "team blob store" in failed[0]["error"], spy
    by_caller = [d for d in spy["down"] if d["thread"] == "MainThread"]
    assert [d["call"] for d in by_caller] == ["first"] and "still busy after" in by_caller[0]["error"], spy
    assert all("still busy after" in d["error"] for d in spy["down"]), spy  # the index never went down
    assert any(a["call"] == "second" and a["ok"] for a in spy["attempts"]), spy  # 15 came from the team store
    assert err.count("team store unreachable") == 1 and "still busy after" in err, err  # said once, saying why
