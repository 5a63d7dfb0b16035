"""An HTTP proxy on 127.0.0.1 that answers some S3 requests with S3's back-pressure errors.

``S3Throttle(target_port)`` forwards every request to ``127.0.0.1:target_port`` (moto), except
those its rule picks, which get ``503 SlowDown`` (S3's throttling signal) or ``500
InternalError``, as a busy S3 answers: the request's body is read, the error is sent, the
connection stays usable. Rules, changeable at any time:

- ``every(n, *statuses)``: requests number 1, n+1, 2n+1, ... (counted over all connections) get
  the statuses in turn (503 by default): 1 in n failed, deterministically (``n=3``: a third);
- ``all(*statuses)``: every request (S3 throttling for a while), ``heal()``: none.

``requests``/``failed``: counts so far. Deterministic (no randomness); threads are daemons.
Plain ``http.server`` + ``http.client``: bodies in full (tests move small objects).
"""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ERRORS = {503: ("SlowDown", "Please reduce your request rate."),
           500: ("InternalError", "We encountered an internal error. Please try again.")}
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _any(self) -> None:
        body = self._body()
        status = self.server.verdict()
        if status:
            code, msg = _ERRORS[status]
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{msg}</Message>'
                   f"<RequestId>memolab-test</RequestId></Error>").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(xml)
            return
        up = getattr(self, "_up", None)
        if up is None:
            up = self._up = http.client.HTTPConnection("127.0.0.1", self.server.target_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        up.request(self.command, self.path, body=body, headers=headers)
        r = up.getresponse()
        data = r.read()
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else r.getheader("Content-Length") or 0))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815 (http.server's naming)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.target_port = target_port
        self.lock = threading.Lock()
        self.n, self.statuses = 0, (503,)
        self.requests = self.failed = 0

    def verdict(self) -> int:
        with self.lock:
            i = self.requests
            self.requests += 1
            if not (self.n and i % self.n == 0):
                return 0
            self.failed += 1
            return self.statuses[(self.failed - 1) % len(self.statuses)]


class S3Throttle:
    def __init__(self, target_port: int) -> None:
        self._srv = _Server(target_port)
        self.port = self._srv.server_address[1]
        self._thread = threading.Thread(target=self._srv.serve_forever, name="s3-throttle", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> int:
        return self._srv.requests

    @property
    def failed(self) -> int:
        return self._srv.failed

    def every(self, n: int, *statuses: int) -> None:
        with self._srv.lock:
            self._srv.n, self._srv.statuses = n, statuses or (503,)

    def all(self, *statuses: int) -> None:
        self.every(1, *statuses)

    def heal(self) -> None:
        self.every(0)

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
