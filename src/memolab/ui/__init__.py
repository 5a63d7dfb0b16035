"""``memolab ui``: a local dashboard over the store, standard library only.

``server.py`` serves a JSON API (backed by ``memolab.tracking.query``) and the
static page in ``static/`` (plain HTML/JS/CSS with hand-written canvas charts,
so it works offline and ships inside the wheel).
"""
from __future__ import annotations
