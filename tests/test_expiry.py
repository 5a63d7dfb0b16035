"""Results that expire: ``@memo(max_age=...)`` and ``@memo(validate=...)`` (docs/cache-rules.md,
"Results that expire"). Time is moved with memolab's injectable clock (``memolab.inputs.expiry.set_clock``),
never slept through; the body counts its runs in a list, never by timing."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

import memolab
from conftest import SRC, Calls
from memolab.inputs import expiry
from memolab.inputs.expiry import parse_max_age


class Clock:
    """A clock tests move by hand."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.t


@pytest.fixture
def clock():
    c = Clock()
    old = expiry.set_clock(c)
    yield c
    expiry.set_clock(old)


def test_max_age_parses_numbers_units_and_timedeltas():
    assert parse_max_age(None) is None
    assert parse_max_age(90) == 90.0 and parse_max_age(1.5) == 1.5
    assert parse_max_age("90s") == 90 and parse_max_age("30m") == 1800 and parse_max_age("30min") == 1800
    assert parse_max_age("12h") == 43200 and parse_max_age("1d") == 86400 and parse_max_age("2w") == 14 * 86400
    assert parse_max_age("0.5d") == 43200 and parse_max_age("600") == 600
    assert parse_max_age(dt.timedelta(hours=2)) == 7200
    for bad in ("1 fortnight", "-1d", "d", ""):
        with pytest.raises(ValueError, match="max_age"):
            parse_max_age(bad)
    for bad in (True, [1], object()):
        with pytest.raises(TypeError, match="max_age"):
            parse_max_age(bad)
    with pytest.raises(ValueError, match="0 or more"):
        parse_max_age(-5)
    with pytest.raises(ValueError, match="max_age"):
        memolab.memo(max_age="soon")(lambda x: x)
    with pytest.raises(TypeError, match="validate"):
        memolab.memo(validate=3)(lambda x: x)


def test_a_result_expires_after_max_age_and_is_recomputed(tmp_store, clock):
    calls = Calls()

    @memolab.memo(max_age="1d")
    def fetch(url):
        calls.append(url)
        return f"{url}@{len(calls)}"

    assert fetch("u") == "u@1"
    clock.t += 86400 - 1  # not yet a day
    assert fetch("u") == "u@1" and calls == ["u"]
    assert fetch.explain("u").hit
    clock.t += 2  # a day and a second after it was computed
    ex = fetch.explain("u")
    assert not ex.hit and "expired" in str(ex) and "max_age is 1d" in str(ex)
    assert fetch("u") == "u@2" and calls == ["u", "u"]  # recomputed, and replaced
    assert fetch("u") == "u@2" and calls == ["u", "u"]  # fresh again
    rows = fetch.evaluations()
    assert len(rows) == 1 and rows[0]["started"] == clock.t  # stamped by the same clock
    from memolab.calls.explain import last_miss

    assert "expired" in " ".join(last_miss(fetch.store(), fetch.symbol)["reasons"])


def test_in_memory_copies_expire_too(tmp_store, clock):
    calls = Calls()

    @memolab.memo(max_age=60)
    def f(x):
        calls.append(x)
        return [x, len(calls)]

    assert f(1) == [1, 1]
    assert f(1) == [1, 1]  # this process's in-memory copy
    clock.t += 61
    assert f(1) == [1, 2] and len(calls) == 2


def test_the_clock_is_read_once_a_call_so_a_result_expiring_during_it_is_returned(tmp_store):
    """No wall-clock race: a call judges every row by the instant it started. A clock that jumps
    past the expiry on every later read cannot make the call refuse a row it found fresh."""
    calls = Calls()

    @memolab.memo(max_age=100)
    def f(x):
        calls.append(x)
        return x * 2

    start = Clock(5_000.0)
    old = expiry.set_clock(start)
    try:
        assert f(2) == 4 and calls == [2]

        class Jumping:
            """Fresh at the first read of each call; a year later at any read after it."""

            def __init__(self):
                self.first = True

            def __call__(self):
                if self.first:
                    self.first = False
                    return 5_050.0
                return 5_050.0 + 365 * 86400

        jumping = Jumping()
        expiry.set_clock(jumping)
        f.store().forget()  # from the store, not this process's memory: the longer path
        assert f(2) == 4 and calls == [2]
    finally:
        expiry.set_clock(old)


def test_a_row_stored_while_the_call_waited_is_never_expired_for_it():
    row = {"id": 1, "started": 0.0, "finished": 120.0, "duration": 120.0}
    assert expiry.verdict(row, 100.0, 10.0, None, "f") is None  # stored after the call began
    assert "expired" in expiry.verdict(row, 130.0, 10.0, None, "f")
    assert "start time is not recorded" in expiry.verdict({"id": 2, "finished": 5.0}, 10.0, 60.0, None, "f")


def test_a_validation_callback_sees_the_metadata_and_can_refuse(tmp_store, clock):
    calls, seen = Calls(), []

    def recent_enough(meta):
        seen.append(meta)
        return meta["age"] < 10

    @memolab.memo(validate=recent_enough)
    def f(x):
        calls.append(x)
        return len(calls)

    assert f(1) == 1
    clock.t += 5
    assert f(1) == 1 and seen[-1]["age"] == 5 and seen[-1]["id"] == 1 and seen[-1]["time"] == seen[-1]["started"]
    assert seen[-1]["duration"] is not None and seen[-1]["now"] == clock.t
    clock.t += 10
    why = f.explain(1)  # the row, 15 s old now, is refused by the callback: a miss that says so
    assert not why.hit and "validate=" in str(why), str(why)
    assert f(1) == 2 and len(calls) == 2
    assert f.explain(1).hit  # the new row is 0 s old: fresh again right after


def test_an_expiring_function_and_its_waiters_compute_once(tmp_store, clock):
    """Two threads find the same row expired: one recomputes, the other waits for it and uses
    the new row (stored after it began: never expired for it)."""
    import threading

    calls = Calls()
    gate = threading.Event()
    held = Calls([gate])  # (opaque: the event stays out of the code digest)

    @memolab.memo(max_age=10)
    def f(x):
        calls.append(x)
        if len(calls) == 2:
            held[0].wait(30)
        return len(calls)

    assert f(1) == 1
    clock.t += 11
    out = []
    t1 = threading.Thread(target=lambda: out.append(f(1)))
    t1.start()
    while len(calls) < 2:  # the first thread recomputes and holds the lease
        threading.Event().wait(0.01)
    t2 = threading.Thread(target=lambda: out.append(f(1)))
    t2.start()
    t2.join(0.3)
    assert t2.is_alive()  # waiting on the lease, not computing
    gate.set()
    t1.join(30)
    t2.join(30)
    assert out == [2, 2] and len(calls) == 2


JOB = '''
import json, os, sys, time
import memolab
from memolab.inputs import expiry

expiry.set_clock(lambda: time.time() + float(os.environ.get("SKEW", "0")))

@memolab.memo(max_age="1d")
def fetch(n):
    with open("body.log", "a") as f:
        f.write(f"fetch {n}\\n")
    return {"n": n, "pid": os.getpid()}

print(json.dumps(fetch(int(sys.argv[1]))))
'''


def test_expiry_across_processes_and_ls_shows_what_has_expired(project):
    project.write("job.py", JOB)
    day = 86400
    first = project.run_json("job.py", "1")
    assert project.run_json("job.py", "1") == first  # a new process: a hit
    assert project.run_json("job.py", "1", env={"SKEW": str(day - 60)}) == first  # not a day yet
    second = project.run_json("job.py", "1", env={"SKEW": str(2 * day)})  # two days later
    assert second["pid"] != first["pid"]
    assert project.run_json("job.py", "1", env={"SKEW": str(2 * day + 60)}) == second
    assert len((project.root / "body.log").read_text().splitlines()) == 2

    old = project.run_json("job.py", "2", env={"SKEW": str(-3 * day)})  # computed three days ago
    e = dict(os.environ, PYTHONPATH=SRC, MEMOLAB_STORE=str(project.store))
    ls = subprocess.run([sys.executable, "-m", "memolab", "ls", "fetch", "--json"], env=e, capture_output=True,
                        text=True, cwd=project.root, check=True)
    evs = {ev["arguments"]["n"]: ev for ev in json.loads(ls.stdout)["evaluations"]}
    assert evs["2"]["expired"] is True and evs["1"]["expired"] is False and evs["1"]["expires"] > 0
    text = subprocess.run([sys.executable, "-m", "memolab", "ls", "fetch"], env=e, capture_output=True, text=True,
                          cwd=project.root, check=True).stdout
    assert "expired" in text
    fns = json.loads(subprocess.run([sys.executable, "-m", "memolab", "ls", "--json"], env=e, capture_output=True,
                                    text=True, cwd=project.root, check=True).stdout)["functions"]
    assert fns[0]["expired"] == 1
    assert "EXPIRED" in subprocess.run([sys.executable, "-m", "memolab", "ls"], env=e, capture_output=True,
                                       text=True, cwd=project.root, check=True).stdout
    assert project.run_json("job.py", "2")["pid"] != old["pid"]  # and a call recomputes it
    why = subprocess.run([sys.executable, "-m", "memolab", "why", "fetch"], env=e, capture_output=True, text=True,
                         cwd=project.root, check=True).stdout
    assert "expired" in why and "max_age is 1d" in why


SCRIPT = '''
import json, os, sys, time
import memolab
from memolab.inputs import expiry

expiry.set_clock(lambda: time.time() + float(os.environ.get("SKEW", "0")))

@memolab.memo(max_age="1d")
def train(n):
    return {"n": n, "script": %r}

print(json.dumps(train(int(sys.argv[1]))))
'''


def test_ls_counts_each_scripts_expired_results_on_its_own_row(project):
    """Two scripts' ``train`` are both ``__main__:train`` in the index; ``ls`` lists them apart
    (``a.py:train``, ``b.py:train``), and each row's EXPIRED counts only its own script's results."""
    project.write("a.py", SCRIPT % "a")
    project.write("b.py", SCRIPT % "b")
    old = {"SKEW": str(-3 * 86400)}  # computed three days ago: expired now
    for n in ("1", "2"):
        project.run_json("a.py", n, env=old)
    project.run_json("b.py", "1")  # fresh
    project.run_json("b.py", "2", env=old)
    project.run_json("b.py", "3")
    e = dict(os.environ, PYTHONPATH=SRC, MEMOLAB_STORE=str(project.store), COLUMNS="200")
    fns = json.loads(subprocess.run([sys.executable, "-m", "memolab", "ls", "--json"], env=e, capture_output=True,
                                    text=True, cwd=project.root, check=True).stdout)["functions"]
    rows = {f.get("label"): f for f in fns}
    assert set(rows) == {"a.py:train", "b.py:train"}, fns
    assert (rows["a.py:train"]["evaluations"], rows["a.py:train"]["expired"]) == (2, 2)
    assert (rows["b.py:train"]["evaluations"], rows["b.py:train"]["expired"]) == (3, 1)
    text = subprocess.run([sys.executable, "-m", "memolab", "ls", "--wide"], env=e, capture_output=True, text=True,
                          cwd=project.root, check=True).stdout
    lines = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.startswith(("a.py", "b.py"))}
    assert lines["a.py:train"][1] == "2" and lines["a.py:train"][-1] == "2", text
    assert lines["b.py:train"][1] == "3" and lines["b.py:train"][-1] == "1", text
