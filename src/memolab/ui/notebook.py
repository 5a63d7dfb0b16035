"""``memolab.ui()``: the dashboard from a notebook or a script, served by this process.

    import memolab
    memolab.ui()          # in Jupyter: a link that opens the dashboard in a new tab

The server runs in a daemon thread of this process (one per store; a second call returns the
same one) and, like ``memolab ui``, on 127.0.0.1 with an access token in its URL. The
notebook shows a link, not an embedded frame: the dashboard refuses to be framed (its
``frame-ancestors 'none'``, a clickjacking guard) and its token cookie is ``SameSite=Strict``,
which a page framed by another site never gets back. A kernel on a remote machine serves on
that machine's 127.0.0.1: reach it with ``ssh -L PORT:127.0.0.1:PORT host`` (the port is in
the URL), or ``memolab.ui(host="0.0.0.0")`` on a trusted network (the token still guards it).
"""
from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any, cast

__all__ = ["Dashboard", "open_dashboard"]

_open: dict[str, Dashboard] = {}
_lock = threading.Lock()


class Dashboard:
    """A dashboard served by this process: ``url`` (with its token), ``stop()``."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        self.store = Path(server.store_root)

    @property
    def url(self) -> str:
        return cast(str, self.server.url)

    def __repr__(self) -> str:
        return f"memolab dashboard for {self.store}: {self.url}"

    def _repr_html_(self) -> str:
        url = html.escape(self.url, quote=True)
        return (f'<div class="memolab-dashboard">memolab dashboard for <code>{html.escape(str(self.store))}</code>: '
                f'<a href="{url}" target="_blank" rel="noopener">open it in a new tab</a> '
                f'<small>(served by this kernel on {html.escape(self.server.base)})</small></div>')

    def stop(self) -> None:
        """Stop serving (a later ``memolab.ui()`` starts a new server, with a new token)."""
        with _lock:
            if _open.get(str(self.store)) is self:
                del _open[str(self.store)]
        self.server.shutdown()
        self.server.server_close()


def open_dashboard(store: None | str | Path = None, port: int = 0, host: str = "127.0.0.1") -> Dashboard:
    """Serve the dashboard of ``store`` (default: the configured store) from this process."""
    from ..settings import config
    from .server import serve_in_thread

    root = Path(store).expanduser() if store is not None else config.store_path()
    if not ((root / "index.sqlite").is_file()):
        raise FileNotFoundError(f"memolab.ui: no store at {root} (nothing memoized there yet?)")
    with _lock:
        d = _open.get(str(root))
        if d is not None and d.thread.is_alive():
            return d
        srv, t = serve_in_thread(root, port, host)
        d = _open[str(root)] = Dashboard(srv, t)
        return d
