"""Adversarial review of the dashboard API: hostile inputs get a 400/404 naming the problem, never a 500."""
from __future__ import annotations

import json
import urllib.error

import numpy as np
import pytest

import memolab
from memolab import memo
from test_ui import get, server  # noqa: F401  (server is a fixture)


@pytest.mark.parametrize("path, status, msg", [
    ("api/histograms?run=abc&tag=w", 400, "run must be"),
    ("api/images?run=1e3&tag=w", 400, "run must be"),
    ("api/texts?run=&tag=w", 400, "run"),
    ("api/image/abc", 400, "image id"),
    ("api/image/../../index.sqlite", 400, "image id"),
    ("api/image/99999", 404, "no image 99999"),
    ("api/scalars?runs=1&tag=x&max=0", 400, "max must be"),
    ("api/scalars?runs=1&tag=x&max=-5", 400, "max must be"),
    ("api/scalars?runs=1&tag=x&max=lots", 400, "max must be"),
    ("api/diff?a=1&b=x", 400, "b must be a positive integer id"),
])
def test_hostile_api_inputs_get_a_clear_error(server, path, status, msg):
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server.base + path)
    assert e.value.code == status and msg in json.loads(e.value.read())["error"]


def test_image_route_serves_only_images(server):
    # /api/image/<id> took any event id: a text event's bytes came back labelled image/png
    @memo
    def f():
        memolab.log.text("secret", "not a picture", step=0)
        memolab.log.image("img", np.zeros((2, 2), dtype=np.uint8), step=0)
        return 0

    f()
    runs = [r for r in get(server.base + f"api/runs?fn={f.symbol}") if isinstance(r["id"], int)]
    (img,) = get(server.base + f"api/images?run={runs[0]['id']}&tag=img")
    ctype, body = get(server.base + f"api/image/{img['id']}", raw=True)
    assert ctype == "image/png" and body.startswith(b"\x89PNG")
    for other in range(1, img["id"] + 5):
        if other == img["id"]:
            continue
        with pytest.raises(urllib.error.HTTPError) as e:
            get(server.base + f"api/image/{other}", raw=True)
        assert e.value.code == 404


def test_a_huge_max_is_capped(server):
    from memolab.ui.server import MAX_POINTS

    @memo
    def g():
        for i in range(MAX_POINTS + 2000):
            memolab.log.scalar("x", float(i))
        return 0

    g()
    (run,) = [r for r in get(server.base + f"api/runs?fn={g.symbol}") if isinstance(r["id"], int)]
    s = get(server.base + f"api/scalars?runs={run['id']}&tag=x&max=1000000000000")[str(run["id"])]
    assert s["n"] == MAX_POINTS + 2000 and s.get("downsampled")  # not a series as long as the client asked
    assert len(s["step"]) <= MAX_POINTS + 1 and s["step"][-1] == MAX_POINTS + 1999  # the last point stays exact
