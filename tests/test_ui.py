"""The dashboard's HTTP API and the `memolab ui` command (no browser here; see test_ui_browser.py)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import memolab
from memolab import memo
from memolab.store import get_store
from memolab.tracking import query
from memolab.ui.server import serve_in_thread

settings.register_profile("memolab", deadline=None)  # (no timing asserted: a loaded machine's first example
settings.load_profile("memolab")  # may take longer than hypothesis's 200 ms deadline)


def get(url, raw=False):
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
        return (r.headers["Content-Type"], body) if raw else json.loads(body)


@contextlib.contextmanager
def authorized(srv):
    """``urllib`` requests (``get``) carry the server's access token while in the block, as a
    script's ``Authorization: Bearer`` header: every request needs it, on loopback too."""
    opener = urllib.request.build_opener()
    opener.addheaders = [("Authorization", f"Bearer {srv.token}")]
    urllib.request.install_opener(opener)
    try:
        yield srv
    finally:
        urllib.request.install_opener(None)


@pytest.fixture
def server(tmp_store):
    get_store()  # create the store
    srv, t = serve_in_thread(tmp_store)
    with authorized(srv):
        yield srv
    srv.shutdown()
    srv.server_close()


def test_api_serves_runs_and_their_logs(server):
    @memo
    def train(lr, tag="x"):
        for i in range(20):
            memolab.log.scalar("loss", lr * (20 - i))
        memolab.log.histogram("w", np.arange(10.0), step=0)
        memolab.log.image("img", np.zeros((2, 3), dtype=np.uint8), step=0)
        memolab.log.text("t", "hi <b>", step=0)
        return lr

    train(1.0)
    train(2.0)
    assert server.server_address[0] == "127.0.0.1"
    u = server.base + "api/"
    fns = get(u + "functions")
    assert [f["fn"] for f in fns] == [train.symbol] and fns[0]["runs"] == 2 and fns[0]["evaluations"] == 2
    runs = get(u + "runs?fn=" + train.symbol)
    assert sorted(r["hparams"]["lr"] for r in runs) == [1.0, 2.0]
    assert all(r["status"] == "done" and r["stored"] and r["result"] in ("1.0", "2.0") for r in runs)
    ids = ",".join(str(r["id"]) for r in runs)
    assert get(u + "tags?runs=" + ids) == {"scalar": ["loss"], "histogram": ["w"], "image": ["img"], "text": ["t"]}
    series = get(u + f"scalars?runs={ids}&tag=loss")
    for r in runs:
        s = series[str(r["id"])]
        assert s["n"] == 20 and s["step"] == list(range(20))
        assert s["value"] == [r["hparams"]["lr"] * (20 - i) for i in range(20)]
    rid = runs[0]["id"]
    (h,) = get(u + f"histograms?run={rid}&tag=w")
    assert h["meta"]["num"] == 10
    (im,) = get(u + f"images?run={rid}&tag=img")
    ctype, png = get(u + f"image/{im['id']}", raw=True)
    assert ctype == "image/png" and png.startswith(b"\x89PNG")
    assert get(u + f"texts?run={rid}&tag=t")[0]["text"] == "hi <b>"
    hp = get(u + "hparams?fn=" + train.symbol)
    assert hp["hparams"] == ["lr", "tag"] and hp["metrics"] == ["loss"]
    assert sorted(r["metrics"]["loss"] for r in hp["rows"]) == [1.0, 2.0]
    ctype, html = get(server.base, raw=True)
    assert ctype.startswith("text/html") and all(f"/static/{f}".encode() in html for f in ("app.js", "charts.js", "panels.js"))
    ctype, js = get(server.base + "static/charts.js", raw=True)
    assert "javascript" in ctype and b"drawScalarCard" in js
    for lib in ("uPlot.iife.min.js", "marked.umd.js", "purify.min.js"):  # vendored: the page works offline
        ctype, body = get(server.base + "static/vendor/" + lib, raw=True)
        assert "javascript" in ctype and len(body) > 10_000


def test_api_errors_are_clear(server):
    u = server.base
    for path, status, msg in [("api/nope", 404, "unknown API route 'nope'"),
                              ("api/scalars?runs=1", 400, "missing query parameter 'tag'"),
                              ("api/scalars?runs=a,b&tag=x", 400, "runs must be a positive integer id"),
                              ("api/diff?a=1&b=2", 404, "no evaluation #1")]:
        with pytest.raises(urllib.error.HTTPError) as e:
            get(u + path)
        assert e.value.code == status and msg in json.loads(e.value.read())["error"]
    for path in ("static/../server.py", "static/%2e%2e/server.py", "../../index.sqlite"):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(u + path, raw=True)
        assert e.value.code == 404


def test_long_series_are_downsampled_keeping_extremes_and_the_last_point(tmp_store):
    @memo
    def long_run():
        for i in range(200_000):
            memolab.log.scalar("x", 1000.0 if i == 123_457 else -5.0 if i == 77 else (i % 100) / 100.0)
        memolab.log.scalar("x", 0.5)  # final value at step 200000
        return 0

    long_run()
    (run,) = [r for r in query.runs(get_store().index, long_run.symbol)]
    s = query.scalars(get_store().index, run["id"], "x", max_points=1000)
    assert s["n"] == 200_001 and s["downsampled"]
    assert len(s["step"]) <= 1002
    assert s["step"][-1] == 200_000 and s["value"][-1] == 0.5
    assert max(s["max"]) == 1000.0 and min(s["min"]) == -5.0  # one-point spikes survive
    assert s["step"] == sorted(s["step"])


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 700), seed=st.integers(0, 2**32 - 1), max_points=st.integers(1, 50),
       stride=st.integers(1, 7), backwards=st.booleans(), flushes=st.integers(1, 4))
@example(n=300, seed=0, max_points=5, stride=1, backwards=True, flushes=1)  # block summaries must not be used
@example(n=700, seed=1, max_points=7, stride=3, backwards=False, flushes=3)  # block summaries across flushes
def test_downsampling_property(tmp_path_factory, n, seed, max_points, stride, backwards, flushes):
    """Whatever the series (steps growing or not, written in one flush or several): bounded size, steps
    increasing, first and last step kept, the last step's value exact, every value inside the envelope."""
    from memolab.store import Store
    from memolab.tracking.sink import SCALAR, sink_for

    rng = np.random.default_rng(seed)
    values = [float(v) for v in rng.normal(0, 1, n) * rng.choice([1.0, 1e3], n, p=[0.98, 0.02])]

    store = Store(tmp_path_factory.mktemp("ds"))
    s = sink_for(store.index)
    steps = [i * stride for i in range(len(values))]
    if backwards:
        steps.reverse()
    per = -(-len(values) // flushes)
    for i, (step, v) in enumerate(zip(steps, values, strict=False)):
        s.q.append((SCALAR, 1, "t", step, float(i), v))
        if (i + 1) % per == 0:
            s.flush()
    s.flush()
    out = query.scalars(store.index, 1, "t", max_points=max_points)
    assert out["n"] == len(values)
    assert out["step"][0] == min(steps) and out["step"][-1] == max(steps)
    assert out["step"] == sorted(set(out["step"]))
    at_max = values[steps.index(max(steps))]
    if len(values) <= max_points:
        assert out["value"] == [v for _, v in sorted(zip(steps, values, strict=False))]
    else:
        assert len(out["step"]) <= max_points + 2
        assert min(out["min"]) == min(values) and max(out["max"]) == max(values)
        assert out["value"][-1] == at_max


def test_code_diff_between_two_evaluations(project):
    src = """
        from memolab import memo

        @memo
        def f(x):
            y = x * 2
            return x + {k}

        print(f(1))
    """
    project.write("job.py", src.format(k=1))
    project.run("job.py")
    project.write("job.py", src.format(k=2))
    project.run("job.py")
    index = get_store(project.store).index
    evs = sorted(e["id"] for e in index.evaluations("__main__:f"))
    assert len(evs) == 2
    from memolab.tracking.codediff import code_diff

    d = code_diff(index, evs[0], evs[1])
    assert not d["same"]
    text = "".join(c["diff"] for c in d["changes"])
    assert "-    return x + 1" in text and "+    return x + 2" in text
    assert code_diff(index, evs[0], evs[0])["same"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_memolab_ui_command_serves_on_localhost(project):
    project.write("job.py", """
        import memolab
        from memolab import memo

        @memo
        def job():
            memolab.log.scalar("x", 1.0)
            return 1

        job()
    """)
    project.run("job.py")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), MEMOLAB_STORE=str(project.store))
    p = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--port", str(port), "--no-browser"], cwd=project.root,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert f"http://127.0.0.1:{port}/?token=" in line
        token = line.split("?token=", 1)[1].split()[0]
        with pytest.raises(urllib.error.HTTPError) as e:  # on loopback too: no token, no data
            get(f"http://127.0.0.1:{port}/api/functions")
        assert e.value.code == 401
        fns = get(f"http://127.0.0.1:{port}/api/functions?token={token}")
        assert [f["fn"] for f in fns] == ["__main__:job"]
    finally:
        p.terminate()
        p.wait(10)
    missing = subprocess.run([sys.executable, "-m", "memolab", "--store", str(project.root / "none"), "ui", "--no-browser"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no store at" in missing.stderr


def test_a_run_whose_owner_holds_the_gil_is_not_shown_lost(tmp_path):
    """An owner stuck in one long C call cannot heart-beat; on this host the
    process table, not the stale heartbeat, says whether it is still computing."""
    import subprocess
    import time as _time

    from memolab.store import Store
    from memolab.store.sqlite import _process_table, _start_time, host_name
    from memolab.tracking.query import running_alive as _alive

    store = Store(tmp_path / "s")
    key = ("m:f", "code", "args", "schema")
    proc = subprocess.Popen(["sleep", "60"])
    try:
        owner = f"{host_name()}:{proc.pid}:{_start_time(proc.pid)}/{_process_table()}:t"
        with store.index.write() as c:
            c.execute("INSERT INTO leases(fn, code, args, schema, owner, heartbeat) VALUES (?,?,?,?,?,?)",
                      (*key, owner, _time.time() - 3600))  # not beaten for an hour
        run = dict(zip(("fn", "code", "args", "schema"), key, strict=False))
        assert _alive(store.index.conn())(run)
        proc.kill()
        proc.wait()
        assert not _alive(store.index.conn())(run)  # dead on this host: lost at once
    finally:
        proc.kill()
