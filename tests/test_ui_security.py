"""Dashboard security (issue 11): DNS rebinding, no tracebacks or paths in errors, bounded ids,
an access token whenever the server is reachable from other machines."""
from __future__ import annotations

import http.client
import json
import logging
from urllib.parse import urlparse

import pytest

import memolab
from memolab import memo
from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui import server  # noqa: F401  (a fixture)


def request(srv, path, host=None, headers=None, token=True):
    """GET ``path``; with ``token`` (and no other credentials given) as a script would, its Bearer header."""
    port = srv.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = dict(headers or {})
    if token and not h and "token=" not in path:
        h["Authorization"] = f"Bearer {srv.token}"
    if host is not None:
        h["Host"] = host
    c.request("GET", path, headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


@pytest.mark.parametrize("host, ok", [("127.0.0.1:8765", True), ("localhost:1234", True), ("localhost", True),
                                      ("[::1]:8765", True), ("evil.example:8765", False),
                                      ("127.0.0.1.evil.example", False), ("", False)])
def test_host_header_guards_against_dns_rebinding(server, host, ok):
    for path in ("/api/functions", "/"):
        status, _, body = request(server, path, host=host)
        assert (status == 200) == ok, (host, path, status, body[:200])
        if not ok:
            assert status == 403 and b"DNS rebinding" in body


@pytest.mark.parametrize("path", ["/api/histograms?run=99999999999999999999&tag=w", "/api/texts?run=-1&tag=w",
                                  "/api/images?run=0&tag=w", "/api/tags?runs=1,99999999999999999999999",
                                  "/api/image/18446744073709551616", "/api/diff?a=1&b=9223372036854775808"])
def test_out_of_range_ids_are_400_not_500(server, path):
    status, _, body = request(server, path)
    err = json.loads(body)
    assert status == 400 and "positive integer id" in err["error"] and "trace" not in err


def test_a_failure_is_logged_not_shown(server, tmp_store, caplog):
    @memo
    def f():
        memolab.log.scalar("x", 1.0)
        return 1

    f()
    # damage a row the way a crash or a hand edit could: the runs query now raises
    with get_store().index.write() as c:
        c.execute("UPDATE runs SET hparams='{not json'")
    with caplog.at_level(logging.ERROR, logger="memolab.ui"):
        status, _, body = request(server, f"/api/runs?fn={f.symbol}")
    assert status == 500
    err = json.loads(body)
    assert err == {"error": "internal error (the server logged it)"}
    assert b"Traceback" not in body and str(tmp_store).encode() not in body and b".py" not in body
    assert any("JSONDecodeError" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_security_headers(server):
    status, headers, _ = request(server, "/")
    assert status == 200
    assert "script-src" not in headers["Content-Security-Policy"]  # default-src 'self': no inline script runs
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_beyond_loopback_every_request_needs_the_token(tmp_store):
    get_store()
    srv, _ = serve_in_thread(tmp_store, host="0.0.0.0")
    try:
        assert srv.token and len(srv.token) >= 20
        assert f"?token={srv.token}" in srv.url
        for path in ("/", "/api/functions", "/static/app.js"):
            status, _, body = request(srv, path, host="gpubox:8765", token=False)
            assert status == 401, path
        wrong = f"/api/functions?token={srv.token[:-1]}{'y' if srv.token.endswith('x') else 'x'}"
        assert request(srv, wrong, host="gpubox:8765", token=False)[0] == 403
        status, headers, _ = request(srv, f"/?token={srv.token}", host="gpubox:8765")
        assert status == 200 and f"{srv.cookie_name}={srv.token}" in headers["Set-Cookie"]
        assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        # the browser sends the cookie with every later request
        status, _, _ = request(srv, "/api/functions", host="gpubox:8765", headers={"Cookie": f"{srv.cookie_name}={srv.token}"})
        assert status == 200
        status, _, _ = request(srv, "/api/functions", headers={"Authorization": f"Bearer {srv.token}"})
        assert status == 200
    finally:
        srv.shutdown()
        srv.server_close()


def test_ui_command_warns_when_not_on_loopback(project):
    import os
    import subprocess
    import sys

    project.write("job.py", "from memolab import memo\n\n@memo\ndef job():\n    return 1\n\njob()\n")
    project.run("job.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), MEMOLAB_STORE=str(project.store))
    p = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--host", "0.0.0.0", "--port", "0", "--no-browser"],
                         cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        warning = p.stderr.readline()
        line = p.stdout.readline()
        assert "WARNING" in warning and "0.0.0.0" in warning
        url = line.split(": ", 1)[1].split()[0]
        u = urlparse(url)
        assert u.query.startswith("token=") and len(u.query) > 26
    finally:
        p.terminate()
        p.communicate(timeout=10)  # reaps it and closes its pipes


@pytest.mark.parametrize("how", ["none", "wrong", "non-ascii", "non-ascii-cookie", "non-ascii-bearer"])
def test_on_loopback_too_every_request_needs_the_token(server, how):
    """On 127.0.0.1 the dashboard used to need no token: another user of the machine read the runs
    of a private (0700) store. And a non-ASCII ``?token=`` was a 500 with a server traceback."""
    assert server.server_address[0] == "127.0.0.1" and server.token and f"?token={server.token}" in server.url
    path, headers = {"none": ("/api/functions", {}),
                     "wrong": (f"/api/functions?token={server.token[::-1]}", {}),
                     "non-ascii": ("/api/functions?token=%C3%A9t%C3%A9", {}),
                     "non-ascii-cookie": ("/api/functions",
                                          {"Cookie": f"{server.cookie_name}=\u00e9t\u00e9".encode().decode("latin-1")}),
                     "non-ascii-bearer": ("/api/functions", {"Authorization": "Bearer \u00e9t\u00e9".encode().decode("latin-1")}),
                     }[how]
    for p in (path, path.replace("/api/functions", "/"), path.replace("/api/functions", "/static/app.js")):
        status, _, body = request(server, p, headers=headers, token=False)
        assert status == (401 if how == "none" else 403), (p, status, body[:200])
        assert b"Traceback" not in body and b"internal error" not in body
    assert request(server, f"/api/functions?token={server.token}", token=False)[0] == 200
    # the DNS-rebinding guard stays: the right token with a foreign Host header is refused
    status, _, body = request(server, f"/api/functions?token={server.token}", host="evil.example:8765", token=False)
    assert status == 403 and b"DNS rebinding" in body
