"""The dashboard's series API at sweep scale (no browser): one batched request per view, each
series sized to the chart's pixel width with extremes kept, incremental live refresh, a cheap
heartbeat. Stores are written in bulk through the tracking sink, as a sweep's processes would."""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request

import pytest

from memolab.store import get_store
from memolab.tracking import sink as S
from memolab.ui import series
from memolab.ui.server import serve_in_thread
from test_ui import authorized


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def write(index, records):
    sk = S.Sink(index)
    sk.q.extend(records)
    sk.flush()


def points(run, tag, steps, f=lambda s: math.sin(s / 50.0), wall0=1000.0):
    return [(S.SCALAR, run, tag, s, wall0 + s, f(s)) for s in steps]


def start(run, fn="sweep:f", **hp):
    return (S.START, run, {"fn": fn, "started": float(run), "hparams": hp})


@pytest.fixture
def server(tmp_store):
    get_store()
    srv, _ = serve_in_thread(tmp_store)
    with authorized(srv):
        yield srv
    srv.shutdown()
    srv.server_close()


def test_one_request_serves_every_tag_of_every_run_sized_to_the_chart(server):
    index = get_store().index
    spike = {1: 2345, 2: 77}
    recs = []
    for run in (1, 2, 3):
        recs.append(start(run, lr=run / 10))
        for tag in ("train/loss", "val/loss", "x"):
            # 5,000 steps; one one-point spike per run that a mean would hide
            recs += points(run, tag, range(5000), lambda s, r=run: 100.0 if s == spike.get(r) else math.sin(s / 50.0))
        recs += points(run, "short", range(30))
    write(index, recs)
    got = get(server.base + "api/series?runs=1,2,3&px=400")
    assert sorted(got) == ["short", "train/loss", "val/loss", "x"] and all(sorted(v) == ["1", "2", "3"] for v in got.values())
    assert [p for p, _ in server.served if "/api/series" in p] and len(server.served) == 1  # one request
    for tag in ("train/loss", "val/loss", "x"):
        for run in ("1", "2", "3"):
            s = got[tag][run]
            assert s["n"] == 5000 and s["downsampled"]
            assert len(s["step"]) <= 2 * 400 and len(s["min"]) == len(s["max"]) == len(s["value"]) == len(s["step"])
            assert s["step"] == sorted(s["step"]) and s["step"][0] == 0 and s["step"][-1] == 4999
            assert s["value"][-1] == pytest.approx(math.sin(4999 / 50.0))  # the last point is exact
            assert all(lo <= v <= hi for lo, v, hi in zip(s["min"], s["value"], s["max"], strict=False))
            assert (max(s["max"]) == 100.0) == (int(run) in spike)  # the spike survives
            assert min(s["min"]) == pytest.approx(-1.0, abs=1e-3)
    assert got["short"]["1"]["step"] == list(range(30)) and "min" not in got["short"]["1"]  # short: as logged
    # the summary level does not depend on the chart's width (issue 40: a 1,400 px window read
    # every point, a 1,280 px one the blocks): one bucket per 64-point block, and the last point
    wide = get(server.base + "api/series?runs=1&px=1400&tag=x")
    assert list(wide) == ["x"] and wide["x"]["1"] == got["x"]["1"] and len(got["x"]["1"]["step"]) == 79 + 1
    # only a chart narrower than its blocks gets fewer buckets (two blocks each), at most one a pixel
    narrow = get(server.base + "api/series?runs=1&px=50&tag=x")["x"]["1"]
    assert len(narrow["step"]) == 40 + 1 and max(narrow["max"]) == 100.0
    # the charts in view first (tag=), then every other tag (skip=): together the whole, nothing twice
    first = get(server.base + "api/series?runs=1,2,3&px=400&tag=x&tag=val%2Floss")
    rest = get(server.base + "api/series?runs=1,2,3&px=400&skip=x&skip=val%2Floss")
    assert sorted(first) == ["val/loss", "x"] and sorted(rest) == ["short", "train/loss"]
    assert {**first, **rest} == got


def test_a_series_whose_steps_went_back_is_bucketed_by_step(tmp_store):
    index = get_store().index
    recs = [start(5)] + points(5, "t", range(3000)) + points(5, "t", range(1000, 3000), lambda s: -3.0)
    write(index, recs)
    s = series.batch(index, [5], None, 300)["t"]["5"]
    assert s["n"] == 5000 and len(s["step"]) <= 600 and s["step"] == sorted(set(s["step"]))
    assert min(s["min"]) == -3.0


def test_a_live_refresh_sends_only_the_new_points(server):
    index = get_store().index
    write(index, [start(1), start(2)] + points(1, "a", range(3000)) + points(1, "b", range(100))
          + points(2, "a", range(3000)))
    url = server.base + "api/series?runs=1,2&px=500"
    full = get(url)
    held = {r: {t: [full[t][r]["n"], full[t][r]["step"][-1]] for t in full if r in full[t]} for r in ("1", "2")}
    # nothing new: nothing but an empty object
    n0 = len(server.served)
    assert get(url + "&seen=" + urllib.parse.quote(json.dumps(held))) == {}
    empty_bytes = server.served[-1][1]
    # run 1 logs 10 more points on "a" and 3 on "b"; run 2 nothing
    write(index, points(1, "a", range(3000, 3010), lambda s: 7.0) + points(1, "b", range(100, 103)))
    inc = get(url + "&seen=" + urllib.parse.quote(json.dumps(held)))
    assert sorted(inc) == ["a", "b"] and list(inc["a"]) == ["1"]
    assert inc["a"]["1"]["append"] and inc["a"]["1"]["step"] == list(range(3000, 3010)) and inc["a"]["1"]["n"] == 3010
    assert inc["a"]["1"]["value"] == [7.0] * 10 and inc["b"]["1"]["step"] == [100, 101, 102]
    small = server.served[-1][1]
    assert len(server.served) == n0 + 2
    assert empty_bytes < small < 1200  # 13 points, not the 2 x 3000 (bucketed) of the first answer
    # many new points at once are bucketed as well: never more than 2 a pixel
    write(index, points(2, "a", range(3000, 9000)))
    big = get(url + "&seen=" + urllib.parse.quote(json.dumps(held)))
    assert big["a"]["2"]["append"] and len(big["a"]["2"]["step"]) <= 1000 and big["a"]["2"]["step"][0] >= 3000
    assert big["a"]["2"]["step"][-1] == 8999
    # a series whose steps went back cannot be extended: it is sent whole again
    write(index, points(1, "b", range(50, 52)))
    reset = get(url + "&seen=" + urllib.parse.quote(json.dumps({"1": {"b": [103, 102]}})))
    assert reset["b"]["1"]["reset"] and reset["b"]["1"]["n"] == 105 and not reset["b"]["1"].get("append")


def test_the_heartbeat_is_cheap_and_changes_only_when_something_does(server):
    index = get_store().index
    write(index, [start(1)] + points(1, "a", range(10)) + [(S.END, 1, "done", 5.0, None)])
    hb = get(server.base + "api/heartbeat")
    assert hb["running"] == {} and get(server.base + "api/heartbeat") == hb
    assert server.served[-1][1] < 200
    write(index, [start(2)])
    hb2 = get(server.base + "api/heartbeat")
    assert hb2["sig"] != hb["sig"] and list(hb2["running"]) == ["2"]
    write(index, points(2, "a", range(5)))  # a running run logs: its entry moves, the signature does not
    hb3 = get(server.base + "api/heartbeat")
    assert hb3["sig"] == hb2["sig"] and hb3["running"]["2"] >= hb2["running"]["2"]
    write(index, [(S.END, 2, "done", 9.0, None)])
    assert get(server.base + "api/heartbeat")["running"] == {}


def test_metric_stats_give_last_min_max_and_points(server):
    index = get_store().index
    write(index, [start(1)] + points(1, "a", range(200), lambda s: float(s % 17) - 3.0))
    got = get(server.base + "api/metrics?fn=sweep:f&minmax=1")
    assert got == {"1": {"a": [float(199 % 17) - 3.0, -3.0, 13.0, 200]}}
    assert get(server.base + "api/metrics?fn=sweep:f") == {"1": {"a": [float(199 % 17) - 3.0, None, None, 200]}}


@pytest.mark.parametrize("path, msg", [
    ("series?runs=1&px=0", "px must be"),
    ("series?runs=1&px=abc", "px must be"),
    ("series?runs=1&seen=%5B1%5D", "seen must be"),
    ("series?runs=1&seen=%7B%221%22%3A%7B%22a%22%3A%5B1%5D%7D%7D", "seen must be"),
    ("series?runs=1&seen=nope", "seen must be"),
    ("series?runs=x", "runs must be"),
    ("metrics", "missing query parameter 'fn'"),
    ("series?runs=1&tag=a&from=x&to=3", "from must be a step"),
    ("series?runs=1&tag=a&from=1&to=99999999999999999999", "to must be a step"),
    ("series?runs=1&from=1&to=2", "missing query parameter 'tag'"),
])
def test_bad_series_requests_get_a_clear_400(server, path, msg):
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server.base + "api/" + path)
    assert e.value.code == 400 and msg in json.loads(e.value.read())["error"]


def test_nan_and_inf_are_gaps_in_raw_and_summarised_series(tmp_store):
    index = get_store().index
    bad = {3: float("inf"), 4: float("-inf"), 5: float("nan")}
    f = lambda s: bad.get(s % 1000, 1.0)  # noqa: E731
    write(index, [start(1), start(2)] + points(1, "t", range(20), f) + points(2, "t", range(5000), f)
          + points(2, "u", range(2999, -1, -1), f))  # u: steps went backwards, bucketed from the points
    got = series.batch(index, [1, 2], None, 100)
    assert got["t"]["1"]["value"][3:6] == [None, None, None] and got["t"]["1"]["value"][0] == 1.0
    json.dumps(got, allow_nan=False)  # no inf or NaN left anywhere, summarised series included
    assert got["t"]["2"]["downsampled"] and got["u"]["2"]["downsampled"]


def test_the_csv_download_reads_every_point_as_logged(server, monkeypatch):
    """The charts hold bucket means (5,000 steps -> ~80 on a narrow chart): a chart's CSV reads the
    points themselves, every one, NaN and inf as a CSV reader spells them; a download too large is
    refused with a clear 400."""
    index = get_store().index
    bad = {3: float("inf"), 4: float("-inf"), 5: float("nan")}
    f = lambda s: bad.get(s, (s * 7919 % 1000) / 7.0)  # noqa: E731  (noisy: a bucket mean is none of these)
    write(index, [start(1), start(2)] + points(1, "loss", range(5000), f) + points(2, "loss", range(0, 5000, 2), f)
          + points(1, "other", range(10)))
    summary = get(server.base + "api/series?runs=1,2&px=400&tag=loss")["loss"]["1"]
    assert summary["downsampled"] and len(summary["value"]) < 1000
    got = get(server.base + "api/points?runs=1,2&tag=loss")
    assert sorted(got) == ["1", "2"]
    assert got["1"]["step"] == list(range(5000)) and got["2"]["step"] == list(range(0, 5000, 2))
    assert got["1"]["wall"][:3] == [1000.0, 1001.0, 1002.0]
    assert got["1"]["value"][3:6] == ["inf", "-inf", "nan"]
    assert got["1"]["value"][6:] == [f(s) for s in range(6, 5000)]
    assert get(server.base + "api/points?runs=1&tag=nope") == {}
    from memolab.ui import server as ui_server

    monkeypatch.setattr(ui_server, "MAX_DOWNLOAD", 7000)
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server.base + "api/points?runs=1,2&tag=loss")
    assert e.value.code == 400 and "7,500 points of 'loss'" in json.loads(e.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server.base + "api/points?runs=1")
    assert e.value.code == 400 and "tag" in json.loads(e.value.read())["error"]


def test_a_zoomed_range_is_sent_as_its_points(server):
    """``from``/``to``: the points of one tag in a step range (bounds included), as logged while
    they are at most 2 a pixel, else bucketed from that range's points with min/max kept."""
    index = get_store().index
    write(index, [start(1), start(2)] + points(1, "t", range(5000), lambda s: 100.0 if s == 1777 else 1.0)
          + points(2, "t", range(0, 1000)))
    got = get(server.base + "api/series?runs=1,2&px=200&tag=t&from=1500&to=1800")["t"]
    assert sorted(got) == ["1"]  # run 2 has no point there
    assert got["1"]["step"] == list(range(1500, 1801)) and got["1"]["n"] == 301 and not got["1"].get("downsampled")
    wide = get(server.base + "api/series?runs=1&px=200&tag=t&from=1000&to=2999")["t"]["1"]
    assert wide["downsampled"] and wide["n"] == 2000 and len(wide["step"]) == 200
    assert wide["step"][0] == 1000 and wide["step"][-1] == 2990 and max(wide["max"]) == 100.0
    assert get(server.base + "api/series?runs=1&px=200&tag=t&from=7000&to=8000") == {}
