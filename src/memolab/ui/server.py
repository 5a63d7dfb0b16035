"""The dashboard's HTTP server: ``ThreadingHTTPServer`` + a small JSON API.

Binds to 127.0.0.1 only: the store holds code and results, and the server has
no authentication. Each request thread gets its own SQLite connection from the
index (connections cannot cross threads); reads never block the training
processes writing logs thanks to WAL.
"""
from __future__ import annotations

import json
import mimetypes
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlparse

from ..tracking import query

STATIC = Path(__file__).resolve().parent / "static"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _ints(s: str, name: str) -> List[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ApiError(400, f"{name} must be comma-separated run ids, got {s!r}") from None


#: the most points one series may ask for: a request must not make the server build (and the
#: browser parse) a million-point JSON series; downsampling keeps extremes and the last point
MAX_POINTS = 10_000


def _id(s: str, name: str) -> int:
    try:
        return int(s)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer id, got {s!r}") from None


def _max_points(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise ApiError(400, f"max must be a positive number of points, got {s!r}")
    return min(n, MAX_POINTS)


def _one(q: Dict[str, List[str]], name: str, default: Optional[str] = None) -> str:
    v = q.get(name)
    if not v:
        if default is None:
            raise ApiError(400, f"missing query parameter {name!r}")
        return default
    return v[0]


class Handler(BaseHTTPRequestHandler):
    server: "DashboardServer"
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes; with Nagle + delayed ACKs every response would wait ~40 ms
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: Any) -> None:  # keep the terminal quiet; errors are sent to the client
        if self.server.verbose:
            super().log_message(fmt, *args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        try:
            if url.path.startswith("/api/"):
                status, ctype, body = self._api(url.path[5:], parse_qs(url.query))
            else:
                status, ctype, body = self._static(url.path)
        except ApiError as e:
            status, ctype, body = e.status, "application/json", json.dumps({"error": str(e)}).encode()
        except Exception as e:  # report, never kill the server thread silently
            status, ctype = 500, "application/json"
            body = json.dumps({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _static(self, path: str) -> Tuple[int, str, bytes]:
        name = "index.html" if path in ("", "/") else unquote(path).lstrip("/").removeprefix("static/")
        f = (STATIC / name).resolve()
        if STATIC not in f.parents or not f.is_file():  # no ../ escapes
            return 404, "text/plain", b"not found"
        ctype = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return 200, ctype, f.read_bytes()

    def _api(self, route: str, q: Dict[str, List[str]]) -> Tuple[int, str, bytes]:
        index = self.server.index
        if route.startswith("image/"):
            data = query.event_data(index, _id(route[6:], "image id"), kind="image")
            if data is None:
                raise ApiError(404, f"no image {route[6:]}")
            return 200, "image/png", data
        fn: Optional[Callable[[], Any]] = {
            "info": lambda: {"store": str(self.server.store_root)},
            "functions": lambda: query.functions(index),
            "runs": lambda: query.runs(index, q.get("fn", [None])[0]),
            "tags": lambda: query.tags(index, _ints(_one(q, "runs", ""), "runs")),
            "scalars": lambda: {str(r): query.scalars(index, r, _one(q, "tag"), _max_points(_one(q, "max", "1000")))
                                for r in _ints(_one(q, "runs"), "runs")},
            "histograms": lambda: query.events(index, _id(_one(q, "run"), "run"), "histogram", _one(q, "tag")),
            "images": lambda: query.events(index, _id(_one(q, "run"), "run"), "image", _one(q, "tag")),
            "texts": lambda: query.texts(index, _id(_one(q, "run"), "run"), _one(q, "tag")),
            "hparams": lambda: query.hparams(index, _one(q, "fn")),
            "diff": lambda: _diff(index, _one(q, "a"), _one(q, "b")),
        }.get(route)
        if fn is None:
            raise ApiError(404, f"unknown API route {route!r}")
        return 200, "application/json", json.dumps(fn(), allow_nan=False, default=str).encode()


def _diff(index: Any, a: str, b: str) -> Dict[str, Any]:
    try:
        return query.code_diff(index, int(a), int(b))
    except KeyError as e:
        raise ApiError(404, str(e.args[0])) from None
    except ValueError:
        raise ApiError(400, f"a and b must be evaluation ids, got {a!r}, {b!r}") from None


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store_root: Path, port: int = 0, host: str = "127.0.0.1", verbose: bool = False) -> None:
        from ..store import get_store

        self.store_root = Path(store_root)
        self.index = get_store(self.store_root).index
        self.verbose = verbose
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def serve_in_thread(store_root: Path, port: int = 0) -> Tuple[DashboardServer, threading.Thread]:
    """Start a server on 127.0.0.1 (``port=0``: any free port) in a daemon thread; for tests and notebooks."""
    srv = DashboardServer(store_root, port)
    t = threading.Thread(target=srv.serve_forever, name="memolab-ui", daemon=True)
    t.start()
    return srv, t
