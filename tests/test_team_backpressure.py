"""Back-pressure is not an outage (issue 49, item 2), against PostgreSQL + moto S3.

One S3 ``503 SlowDown`` (S3's normal throttling signal) or ``500`` sent a process offline: with a
third of its requests throttled a fresh machine recomputed every result it could have
downloaded. Throttled requests are now asked again with jittered back-off within
``MEMOLAB_REMOTE_TIMEOUT``; throttling that outlasts it marks the team store down, and the
uploader's probe brings it back once S3 answers. S3 is reached through ``servers.httpfault``,
a proxy that answers chosen requests as a busy S3 does.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from servers.httpfault import S3Throttle
from test_team_faults import rig  # noqa: F401  (a fixture)
from test_team_layer import JOB, Machine, computed

BLOBS = [1, 3, 5, 7, 9, 11]  # odd: results in blob files, each a download from S3

LATER = """
import json, os, sys, time
sys.argv = [sys.argv[0]]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "job.py")).read())
import memolab.store
st = memolab.store.get_store()
t0 = time.monotonic()
f(int(os.environ["FIRST"]))  # S3 throttling every request: this one is computed here
first = time.monotonic() - t0
open(os.environ["FLAG"] + ".offline", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.environ["FLAG"] + ".healed"):
    assert time.monotonic() < deadline
    time.sleep(0.02)
while not st.link.usable():  # a probe (the uploader's, 2 s after the failure) finds S3 answering again
    assert time.monotonic() < deadline, "never came back online"
    time.sleep(0.05)
t0 = time.monotonic()
n = f(int(os.environ["SECOND"]))["n"]
print(json.dumps([n, first, time.monotonic() - t0]), flush=True)
"""


@pytest.fixture
def throttle(pg_team):
    port = int(pg_team.env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    t = S3Throttle(port)
    try:
        yield t
    finally:
        t.close()


def test_a_throttled_s3_is_retried_not_taken_for_an_outage(rig):  # noqa: F811
    """A third of the S3 requests throttled (503 SlowDown, then a 500), MEMOLAB_REMOTE_TIMEOUT=1:
    a fresh machine downloads all 6 results; the longest call is printed (docs/team.md, Faults)."""
    rig.run("A", *map(str, BLOBS), proxied=False)
    throttle = S3Throttle(rig.s3.port)
    try:
        throttle.every(3, 503, 500)  # a third of the requests, the first of all included
        times, err = rig.run("B", *map(str, BLOBS), env={"AWS_ENDPOINT_URL": throttle.endpoint})
    finally:
        throttle.close()
    assert rig.computed() == [f"A {n}" for n in BLOBS], f"B recomputed under throttling: {err}"
    assert throttle.failed >= 3, "the proxy throttled nothing: the test tests nothing"
    assert "unreachable" not in err, err
    print(f"{throttle.failed} of {throttle.requests} S3 requests throttled; 6 values checked, 0 recomputed; "
          f"longest call {max(times.values()):.2f} s")


def test_throttling_that_outlasts_the_timeout_goes_offline_and_comes_back_after_a_probe(tmp_path, pg_team, throttle):
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "later.py").write_text(LATER)
    calls, flag = tmp_path / "calls", tmp_path / "flag"
    Machine("A", tmp_path, pg_team, calls).run(13, 15)
    throttle.all(503)
    b = Machine("B", tmp_path, pg_team, calls, {"AWS_ENDPOINT_URL": throttle.endpoint, "MEMOLAB_REMOTE_TIMEOUT": "1"})
    p = subprocess.Popen([sys.executable, str(tmp_path / "later.py")], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=b.env(FIRST="13", SECOND="15", FLAG=str(flag)))
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "flag.offline").exists():
            assert p.poll() is None, p.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        throttle.heal()
        (tmp_path / "flag.healed").touch()
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    n, first, second = json.loads(out.strip().splitlines()[-1])
    assert n == 15
    print(f"throttled out: the call took {first:.2f} s (MEMOLAB_REMOTE_TIMEOUT=1); after the probe, a team hit in "
          f"{second:.2f} s")
    assert "still busy after" in err, err  # went offline, saying why
    assert computed(calls) == ["A 13", "A 15", "B 13"], "after the probe, 15 was recomputed instead of downloaded"
