"""``memolab ui``: a local dashboard over the store, standard library only.

``server.py`` serves a JSON API (backed by ``memolab.tracking.query``) and the
static page in ``static/`` (plain HTML/JS/CSS with hand-written canvas charts,
so it works offline and ships inside the wheel). ``memolab.ui()`` serves it from a
notebook (``notebook.py``).
"""
from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    # ``memolab.ui()`` serves the dashboard from this process (``notebook.open_dashboard``): the
    # package itself is the function, as ``memolab.runs`` is
    def __call__(self, store: Any = None, port: int = 0, host: str = "127.0.0.1") -> Any:
        from .notebook import open_dashboard

        return open_dashboard(store, port, host)


sys.modules[__name__].__class__ = _CallableModule
