"""The dashboard's HTTP server: ``ThreadingHTTPServer`` + a small JSON API.

Binds to 127.0.0.1 by default: the store holds code and results. Guards:

- Every request carries a random access token, on loopback too (as Jupyter does):
  127.0.0.1 is reachable by every user of the machine, and a private (0700) store
  must not be readable through its dashboard by another local user. The printed URL
  carries it (``?token=``); the browser keeps it in a cookie named after the port
  (two dashboards on one host do not overwrite each other's); scripts may send
  ``Authorization: Bearer <token>``. No token: 401; a wrong one (any text, non-ASCII
  included): 403.
- DNS rebinding: a page on ``evil.example`` whose name is re-pointed at 127.0.0.1
  would otherwise reach the API from the victim's browser. On loopback every
  request's ``Host`` header must be a loopback name (127.0.0.1, localhost, [::1]) or
  the ``--host`` the server was started with; anything else gets 403. Bound to any
  other address (``memolab ui --host 0.0.0.0`` on a remote GPU box) the Host check is
  left to the token, since the name a remote browser uses for the box cannot be known.
- A failure never sends a traceback or a server path to the browser: it is
  logged on the server's stderr and the client gets "internal error". A path the
  file system cannot even name (``/static/%00``) is a 404.
- Bounded clients (127.0.0.1 is every local user's, and a browser keeps idle
  connections open): a connection that sends nothing for ``Handler.timeout``
  seconds (half a request line, an idle keep-alive) is closed; at most
  ``DashboardServer.max_connections`` are served at once (each holds a thread and
  a descriptor), more are answered 503 and closed at once, without a thread. A
  client that goes away mid-response is not an error: logged at DEBUG, never a
  traceback on the user's terminal.

Each request thread gets its own SQLite connection from the index (connections
cannot cross threads); reads never block the training processes writing logs
thanks to WAL.
"""
from __future__ import annotations

import gzip
import hmac
import json
import logging
import mimetypes
import secrets
import socket
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from ..cli.ids import short_length
from ..key import key_of
from ..settings.text import mask_args
from ..store import edges
from ..tracking import argpages, codediff, pages, query
from . import series, views

STATIC = Path(__file__).resolve().parent / "static"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


log = logging.getLogger("memolab.ui")

#: ids are SQLite integers: anything outside 1..2**63-1 cannot name a row (and would overflow)
MAX_ID = 2**63 - 1
#: the most runs one request may name
MAX_IDS = 1000


def _bounded(x: str, name: str) -> int:
    x = x.strip()
    if not x.isdigit() or len(x) > 19 or not 0 < int(x) <= MAX_ID:
        raise ApiError(400, f"{name} must be a positive integer id, got {x[:40]!r}")
    return int(x)


def _ints(s: str, name: str) -> list[int]:
    ids = [_bounded(x, name) for x in s.split(",") if x.strip()]
    if len(ids) > MAX_IDS:
        raise ApiError(400, f"at most {MAX_IDS} {name} per request, got {len(ids)}")
    return ids


#: the most points one series may ask for: a request must not make the server build (and the
#: browser parse) a million-point JSON series; downsampling keeps extremes and the last point
MAX_POINTS = 10_000


#: the most points one CSV download may read (every point of the runs named, as logged)
MAX_DOWNLOAD = 2_000_000


def _points(index: Any, runs: list[int], tag: str) -> dict[str, dict[str, list[Any]]]:
    n = series.point_count(index, runs, tag)
    if n > MAX_DOWNLOAD:
        raise ApiError(400, f"{n:,} points of {tag!r} in these runs, more than one download takes ({MAX_DOWNLOAD:,}): "
                            "select fewer runs, or read them with memolab.runs()")
    return series.points(index, runs, tag)


def _step(s: str, name: str) -> int:
    """A step bound of a zoomed chart: any 64-bit integer."""
    try:
        v = int(s)
    except ValueError:
        v = None
    if v is None or not -2 ** 63 <= v < 2 ** 63:
        raise ApiError(400, f"{name} must be a step (an integer), got {s[:40]!r}")
    return v


def _series(index: Any, q: dict[str, list[str]]) -> Any:
    runs, px = _ints(_one(q, "runs", ""), "runs"), _pixels(_one(q, "px", "600"))
    if "from" in q or "to" in q:  # a zoomed chart's detail: one tag, the points in a step range
        return series.window(index, runs, _one(q, "tag"), px, _step(_one(q, "from"), "from"), _step(_one(q, "to"), "to"))
    # tag=: only these tags (the charts in view, first); skip=: every other one (the rest, next)
    return series.batch(index, runs, q.get("tag"), px, _seen(_one(q, "seen", "{}")), q.get("skip"))  # type: ignore[arg-type]  # lists are sequences


def _id(s: str, name: str) -> int:
    return _bounded(s, name)


def _max_points(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise ApiError(400, f"max must be a positive number of points, got {s!r}")
    return min(n, MAX_POINTS)


def _pixels(s: str) -> int:
    """A chart's width in pixels: the series are sized to it (at most 2 points a pixel)."""
    if not s.isdigit() or not 1 <= int(s) <= 5000:
        raise ApiError(400, f"px must be a chart width in pixels (1..5000), got {s[:40]!r}")
    return max(50, int(s))


def _seen(s: str) -> dict[str, dict[str, list[int]]]:
    """``{run: {tag: [points held, last step held]}}``, as the page sends it for a live refresh."""
    try:
        d = json.loads(s)
        ok = isinstance(d, dict) and all(
            isinstance(r, str) and isinstance(t, dict) and all(
                isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                for v in t.values()) for r, t in d.items())
    except ValueError:
        ok = False
    if not ok:
        raise ApiError(400, "seen must be JSON {run: {tag: [points, last step]}}")
    return d


def _one(q: dict[str, list[str]], name: str, default: str | None = None) -> str:
    v = q.get(name)
    if not v:
        if default is None:
            raise ApiError(400, f"missing query parameter {name!r}")
        return default
    return v[0]


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    #: seconds a connection may stay silent (reading a request, or idle between two): then closed
    timeout = 20.0
    # headers and body go out in two writes; with Nagle + delayed ACKs every response would wait ~40 ms
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: Any) -> None:  # keep the terminal quiet; errors are sent to the client
        if self.server.verbose:
            super().log_message(fmt, *args)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        """The page's one write: a note or a tag (``/api/annotate``, a JSON body)."""
        self.do_GET(post=True)

    def do_GET(self, post: bool = False) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        q = parse_qs(url.query)
        cookie = None
        try:
            self._check_host()
            cookie = self._check_token(q)
            if post:
                status, ctype, body = self._post(url.path)
            elif url.path.startswith("/api/"):
                status, ctype, body = self._api(url.path[5:], q)
            else:
                status, ctype, body = self._static(url.path)
        except ApiError as e:
            status, ctype, body = e.status, "application/json", json.dumps({"error": str(e)}).encode()
        except Exception:  # logged here; the browser learns nothing about the server's files
            log.exception("memolab ui: %s failed", url.path)
            status, ctype = 500, "application/json"
            body = json.dumps({"error": "internal error (the server logged it)"}).encode()
        gz = len(body) > 16384 and ctype == "application/json" and "gzip" in (self.headers.get("Accept-Encoding") or "")
        if gz:  # a sweep's series are ~4x smaller gzipped; level 1 costs ~10 ms a MB
            body = gzip.compress(body, 1)
        self.server.served.append((self.path, len(body)))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        # Logged text is rendered as markdown: even if sanitising failed, no script could run
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; "
                         "style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)

    def _check_host(self) -> None:
        if not self.server.loopback:
            return  # bound beyond loopback: the token guards, whatever name the box is reached by
        host = (self.headers.get("Host") or "").strip().lower()
        if host.startswith("["):
            name = host[: host.find("]") + 1]
        else:
            name = host.rsplit(":", 1)[0] if ":" in host else host
        if name not in self.server.allowed_hosts:
            raise ApiError(403, f"Host {host[:80]!r} is not allowed (a DNS rebinding guard): "
                                f"open the dashboard as {self.server.url}")

    def _check_token(self, q: dict[str, list[str]]) -> str | None:
        """Accept the token from ``?token=`` (then set a cookie), the cookie, or a Bearer header."""
        token = self.server.token
        cookie_name = self.server.cookie_name
        given = (q.get("token") or [""])[0]
        if given and _same(given, token):
            return f"{cookie_name}={token}; Path=/; HttpOnly; SameSite=Strict"
        offered = bool(given)
        for part in (self.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == cookie_name:
                if _same(v, token):
                    return None
                offered = True
        auth = self.headers.get("Authorization") or ""
        if auth.startswith("Bearer "):
            if _same(auth[7:].strip(), token):
                return None
            offered = True
        if offered:
            raise ApiError(403, "wrong access token for this dashboard: open the URL `memolab ui` printed")
        raise ApiError(401, "this dashboard needs its access token: open the URL `memolab ui` printed")

    def _post(self, path: str) -> tuple[int, str, bytes]:
        """A write from the page itself: JSON (a cross-site form cannot send it without asking),
        from this page's origin, at most 64 KB."""
        if path != "/api/annotate":
            raise ApiError(404, f"unknown API route {path!r}")
        origin = self.headers.get("Origin")
        if origin is not None and origin.rstrip("/").lower() != f"http://{(self.headers.get('Host') or '').lower()}":
            raise ApiError(403, "a write must come from the dashboard's own page")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            raise ApiError(415, "send JSON")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 < n <= 65536:
            raise ApiError(400, "a JSON body of at most 64 KB")
        try:
            body = json.loads(self.rfile.read(n))
        except ValueError:
            raise ApiError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        try:
            out = views.annotate(self.server.index, body)
        except views.Refused as e:
            raise ApiError(409, str(e)) from None
        except views.NotFound as e:
            raise ApiError(404, str(e.args[0])) from None
        except (ValueError, TypeError) as e:
            raise ApiError(400, str(e)) from None
        return 200, "application/json", json.dumps(out, allow_nan=False, default=str).encode()

    def _static(self, path: str) -> tuple[int, str, bytes]:
        name = "index.html" if path in ("", "/") else unquote(path).lstrip("/").removeprefix("static/")
        try:
            f = (STATIC / name).resolve()
            found = STATIC in f.parents and f.is_file()  # no ../ escapes
        except (ValueError, OSError):  # a name no file can have (an embedded NUL byte, too long)
            found = False
        if not found:
            return 404, "text/plain", b"not found"
        ctype = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return 200, ctype, f.read_bytes()

    def _api(self, route: str, q: dict[str, list[str]]) -> tuple[int, str, bytes]:
        index = self.server.index
        if route.startswith("image/"):
            data = query.event_data(index, _id(route[6:], "image id"), kind="image")
            if data is None:
                raise ApiError(404, f"no image {route[6:]}")
            return 200, "image/png", data
        fn: Callable[[], Any] | None = {
            "info": lambda: {"store": str(self.server.store_root)},
            "functions": lambda: query.function_entries(index),
            # a script's function: its runs only (``none=1``: the function's runs of no known script)
            # ``limit`` (the page asks so): one window, sorted and filtered in SQLite (tracking/pages.py)
            # ``ids``: these runs (the page's selected runs beyond the rows it holds)
            "runs": lambda: _window(index, q) if "limit" in q else _by_ids(index, _ints(_one(q, "ids"), "ids"))
            if "ids" in q else views.runs_of(
                index, q.get("fn", [None])[0], "" if "none" in q else q["script"][0] if "script" in q else None),
            "run": lambda: _run_page(index, _id(_one(q, "id"), "id")),
            "ids": lambda: {"short": short_length(query.ready(index))},
            "tags": lambda: query.tags(index, _ints(_one(q, "runs", ""), "runs")),
            "scalars": lambda: {str(r): query.scalars(index, r, _one(q, "tag"), _max_points(_one(q, "max", "1000")))
                                for r in _ints(_one(q, "runs"), "runs")},
            "series": lambda: _series(index, q),
            "points": lambda: _points(index, _ints(_one(q, "runs", ""), "runs"), _one(q, "tag")),
            "heartbeat": lambda: series.heartbeat(index),
            "metrics": lambda: series.metric_stats(index, _one(q, "fn"), _one(q, "minmax", "0") == "1",
                                                   _ints(q["runs"][0], "runs") if "runs" in q else None),
            "histograms": lambda: query.events(index, _id(_one(q, "run"), "run"), "histogram", _one(q, "tag")),
            "images": lambda: query.events(index, _id(_one(q, "run"), "run"), "image", _one(q, "tag")),
            "texts": lambda: query.texts(index, _id(_one(q, "run"), "run"), _one(q, "tag")),
            "hparams": lambda: pages.hparams_window(index, _one(q, "fn"), _script(q), _count(_one(q, "limit")))
            if "limit" in q else query.hparams(index, _one(q, "fn"), _script(q)),
            # over every run of the function, not a page's: the best run of a metric, group statistics
            "best": lambda: pages.best(index, _one(q, "fn"), _one(q, "tag"), _one(q, "dir", "min") != "max", _script(q)),
            "groups": lambda: pages.groups(index, _one(q, "fn"), _one(q, "by"), _one(q, "tag"), _script(q)),
            "diff": lambda: _diff(index, _one(q, "a"), _one(q, "b")),
            "evaluation": lambda: _evaluation(index, _id(_one(q, "id"), "id")),
            "lineage": lambda: edges.graph(index, _ints(_one(q, "evals", ""), "evals")),
        }.get(route)
        if fn is None:
            raise ApiError(404, f"unknown API route {route!r}")
        return 200, "application/json", json.dumps(fn(), allow_nan=False, default=str, separators=(",", ":")).encode()


def _script(q: dict[str, list[str]]) -> str | None:
    """A script's function: its runs only (``none=1``: the function's runs of no known script)."""
    return "" if "none" in q else q["script"][0] if "script" in q else None


def _count(s: str, name: str = "limit") -> int:
    if not s.strip().isdigit() or len(s.strip()) > 9:
        raise ApiError(400, f"{name} must be a number of rows, got {s[:40]!r}")
    return int(s)


def _window(index: Any, q: dict[str, list[str]]) -> dict[str, Any]:
    """``/api/runs?fn=F&limit=N`` (``offset``, ``sort=started|m:TAG|a:NAME``, ``dir=asc|desc``,
    ``status`` (repeatable), ``tag``, ``code`` (a digest's start), ``arg=NAME<op>VALUE`` (repeatable;
    ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``: the page's filter words)): one page of runs and their ``total``."""
    args = []
    for word in q.get("arg") or []:
        f = argpages.parse(word)
        if f is None and "=" in word:  # (a name the filter words do not take: NAME=VALUE as it is)
            name, _, value = word.partition("=")
            f = argpages.ArgFilter(name, "=", value)
        if f is None:
            raise ApiError(400, f"arg must be NAME=VALUE (or !=, <, <=, >, >=), got {word[:40]!r}")
        args.append(f)
    return pages.window(index, _one(q, "fn"), _script(q), _count(_one(q, "limit")), _count(_one(q, "offset", "0"), "offset"),
                        _one(q, "sort", "started"), _one(q, "dir", "desc") != "asc", q.get("status") or None,
                        _one(q, "tag", "") or None, args=args, code=_one(q, "code", "") or None)


def _by_ids(index: Any, ids: list[int]) -> list[dict[str, Any]]:
    """``/api/runs?ids=1,2``: these runs as a window's rows (labelled among their function's runs)."""
    return query.labelled(index, query.runs(index, ids=ids)) if ids else []


def _same(given: str, token: str) -> bool:
    """Constant-time comparison of a token offered with ours; text that is not ASCII (which
    ``hmac.compare_digest`` refuses with a TypeError) is simply not the token."""
    return given.isascii() and hmac.compare_digest(given, token)


def _run_page(index: Any, run_id: int) -> dict[str, Any]:
    try:
        return views.run_page(index, run_id)
    except views.NotFound as e:
        raise ApiError(404, str(e.args[0])) from None


def _evaluation(index: Any, eid: int) -> dict[str, Any]:
    """One evaluation as its panel shows it: arguments, result, and its lineage (inputs, users)."""
    rows = index.evaluations(where="id=?", params=(eid,), limit=1)
    if not rows:
        raise ApiError(404, f"no evaluation #{eid}")
    e = rows[0]
    snap = edges.recorded_snapshot(e)
    args = snap.get("args") if isinstance(snap.get("args"), dict) else {}
    shown = {k: v[1] for k, v in mask_args(args).items() if isinstance(v, list) and len(v) > 1}  # type: ignore[arg-type]  # a dict
    return {"id": e["id"], "fn": e["fn"], "code": e["code"], "status": e["status"], "finished": e["finished"],
            "duration": e["duration"], "hits": e["hits"], "size": e["size"], "arguments": shown,
            "result": snap.get("result_summary") or snap.get("result"),
            "inputs": edges.inputs_of(index, e), "used_by": edges.used_by(index, key_of(e))}


def _diff(index: Any, a: str, b: str) -> dict[str, Any]:
    ia, ib = _bounded(a, "a"), _bounded(b, "b")
    try:
        return codediff.code_diff(index, ia, ib)
    except KeyError as e:
        raise ApiError(404, str(e.args[0])) from None


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    #: connections served at once; more are answered 503 and closed (no thread, no descriptor kept)
    max_connections = 64

    def __init__(self, store_root: Path, port: int = 0, host: str = "127.0.0.1", verbose: bool = False,
                 token: str | None = None) -> None:
        from ..store.reading import open_for_reading

        self.store_root = Path(store_root)
        self.index = open_for_reading(self.store_root).index  # a store an older memolab wrote: read, never migrated
        self.verbose = verbose
        #: (path, bytes sent) of the latest requests: what a view costs, for tests and the benchmark
        self.served: deque[tuple[str, int]] = deque(maxlen=10_000)
        self.host = host
        if ":" in host:
            self.address_family = socket.AF_INET6
        # a token on every request, loopback included: other users of this machine reach 127.0.0.1 too
        self.token = token if token else secrets.token_urlsafe(18)
        self.loopback = is_loopback(host)
        h = host.lower()
        self.allowed_hosts = set(LOOPBACK_NAMES) | {h, f"[{h}]" if ":" in h and not h.startswith("[") else h}
        self._slots = threading.BoundedSemaphore(self.max_connections)
        super().__init__((host, port), Handler)
        # cookies are per host, not per port: each dashboard's is named after its port
        self.cookie_name = f"memolab_token_{self.server_address[1]}"

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._busy(request)
            return
        try:
            super().process_request(request, client_address)  # a thread, which gives the slot back
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _busy(self, request: Any) -> None:
        """Every slot taken: a short 503, sent without waiting (a fresh socket's buffer holds it), and closed."""
        try:
            request.setblocking(False)
            request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 37\r\n"
                         b"Connection: close\r\nRetry-After: 5\r\n\r\nthe dashboard is busy: try again soon")
        except OSError as e:
            log.debug("memolab ui: could not send 503 to a connection over the limit: %r", e)
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset, closed before its answer, timed out) is no error of
        the server's: DEBUG only. Anything else: logged with its traceback, as before."""
        import sys

        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            log.debug("memolab ui: client %s went away: %r", client_address, e)
            return
        log.error("memolab ui: serving %s failed", client_address, exc_info=True)

    @property
    def base(self) -> str:
        """``http://host:port/``, without the token."""
        host, port = self.server_address[:2]
        if host in ("0.0.0.0", "::"):  # every interface: the name other machines reach this one by
            host = socket.getfqdn()
        if ":" in host:
            host = f"[{host}]"  # type: ignore[str-bytes-safe]  # an AF_INET/AF_INET6 address: text
        return f"http://{host}:{port}/"  # type: ignore[str-bytes-safe]

    def link(self, rel: str = "") -> str:
        """The URL of ``rel`` (``api/runs?fn=f``, ``?fn=f``) with the access token in its query."""
        path, _, query = rel.partition("?")
        return f"{self.base}{path}?{query + '&' if query else ''}token={self.token}"

    @property
    def url(self) -> str:
        """The dashboard's address with its token: what ``memolab ui`` prints and opens."""
        return self.link()


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_in_thread(store_root: Path, port: int = 0, host: str = "127.0.0.1") -> tuple[DashboardServer, threading.Thread]:
    """Start a server (default 127.0.0.1; ``port=0``: any free port) in a daemon thread; for tests and notebooks."""
    srv = DashboardServer(store_root, port, host)
    t = threading.Thread(target=srv.serve_forever, name="memolab-ui", daemon=True)
    t.start()
    return srv, t
