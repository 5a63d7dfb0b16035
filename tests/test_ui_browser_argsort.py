"""A sort and a filter by an argument in the runs table, in a real headless Chromium (see
test_ui_browser.py), over a function with more runs than the page ever loads at once (the newest
2,000, app.js RUN_WINDOW, were all a filter or a sort by an argument saw): the server sorts and
filters every run (tracking/argpages.py), the page asks for a screen of them, and the runs it shows
are the oldest ones, which no window of the newest 2,000 holds."""
from __future__ import annotations

import time
import urllib.parse

from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)
from test_ui_browser_paging import runs_asked

N = 2400  # the newest 2,000 are runs 401..2400: every run below asserted on is older
LRS = [0.1, 0.2, 0.3, 0.4]


def opt(r: int) -> str:
    return "sgd" if r % 3 == 0 else "adam"


def fill(n: int = N) -> None:
    from memolab.tracking.sink import END, START, sink_for

    s = sink_for(get_store().index)
    for r in range(1, n + 1):
        s.q.append((START, r, {"fn": "many:f", "started": float(r),
                               "hparams": {"lr": LRS[r % 4], "seed": r, "opt": opt(r)}}))
        s.q.append((END, r, "done", float(r) + 1, None))
    s.flush()


SHOWN = "() => [...document.querySelectorAll('#runs tbody tr[data-run]')].map(r => +r.dataset.run)"


def first_rows(pg, want: list[int]) -> None:
    """Wait until the table's first rows are ``want`` (no page of it still asked for)."""
    pg.wait_for_function(f"w => {{ const s = ({SHOWN})(); return !document.querySelector('#runs tbody tr.pending')"
                         " && JSON.stringify(s.slice(0, w.length)) === JSON.stringify(w); }", arg=want)


def sort_by(pg, label: str, key: str, direction: int) -> None:
    """Click the column's head until the table is sorted by ``key`` in ``direction`` (1: ascending),
    as the page's state says (its head's arrow is drawn only once the rows have come)."""
    for _ in range(3):
        if pg.evaluate("() => [state.sort.key, state.sort.dir]") == [key, direction]:
            return
        pg.click(f"#runs thead th[data-col='{label}']")
    raise AssertionError(f"not sorted by {key} {direction}")


def test_a_sort_and_a_filter_by_an_argument_see_every_run(tmp_store, page):  # noqa: F811
    fill()
    srv, _ = serve_in_thread(tmp_store)
    try:
        pg = page
        pg.goto(srv.link("?fn=many:f"))
        pg.wait_for_selector("body[data-ready='1']")
        assert f"{N} evaluation(s)" in pg.inner_text("#run-count")
        screen = int(runs_asked(srv)[-1]["limit"][0])
        assert screen < 200

        # sorted by seed (a number: as a number), the server's order over every run: 1, 2, 3 first,
        # then the other way round
        sort_by(pg, "seed", "a:seed", 1)
        first_rows(pg, [1, 2, 3, 4, 5])
        sort_by(pg, "seed", "a:seed", -1)
        first_rows(pg, [N, N - 1, N - 2])
        # sorted by opt (a text): "adam" before "sgd"; runs of one value newest first, and the
        # descending order is the ascending one reversed (the oldest "sgd" run last of all: run 3)
        sort_by(pg, "opt", "a:opt", 1)
        first_rows(pg, [N - 1, N - 2, N - 4])
        sort_by(pg, "opt", "a:opt", -1)
        first_rows(pg, [3, 6, 9])
        sorts = [q for q in runs_asked(srv) if q.get("sort", [""])[0].startswith("a:")]
        assert {q["sort"][0] for q in sorts} == {"a:seed", "a:opt"}
        assert all(int(q["limit"][0]) == screen for q in sorts), "a screen a page, never the 2,000-run window"

        # filters by arguments (numbers as numbers, texts as texts), applied by the server over every run
        for words, want in (("seed<=3", [3, 2, 1]), ("lr=0.1 seed<50", [r for r in range(49, 0, -1) if r % 4 == 0]),
                            ("opt=sgd seed<10", [9, 6, 3]), ("seed>=2398", [2400, 2399, 2398]),
                            ("seed<10 opt!=sgd", [8, 7, 5, 4, 2, 1])):
            sort_by(pg, "started", "started", -1)  # (the table in start order, newest first)
            pg.fill("#run-filter", words)
            first_rows(pg, want)
            assert pg.evaluate(SHOWN) == want, words
            assert pg.inner_text("#run-count").startswith(f"{len(want)} of {N} evaluation(s)"), words
            asked = [q for q in runs_asked(srv) if "arg" in q][-1]
            assert asked.get("arg") == words.split() and int(asked["limit"][0]) == screen, asked
        # a filter and a sort by another argument together: the four oldest runs of lr=0.1, by seed
        pg.fill("#run-filter", "lr=0.1")
        sort_by(pg, "seed", "a:seed", 1)
        first_rows(pg, [4, 8, 12, 16])
        assert f"{N // 4} of {N} evaluation(s)" in pg.inner_text("#run-count")
        assert pg.errors == []
    finally:
        srv.shutdown()
        srv.server_close()


class Held:
    """The page's first request of the runs that ``hold``'s test passes is held (not sent on) until
    ``release``: the server's answer to it comes after what the page does meanwhile, as on a loaded
    machine, but every time."""

    def __init__(self, pg) -> None:
        self.pg, self.tests, self.routes = pg, {}, {}
        pg.route("**/api/runs?*", self.handle)

    def handle(self, route) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlparse(route.request.url).query)
        for name, test in self.tests.items():
            if name not in self.routes and test(q):
                self.routes[name] = route
                return
        route.continue_()

    def hold(self, words: str, sort: str | None = None) -> str:
        """The first page of the runs filtered by ``words`` (and sorted by ``sort``, as the query says it)."""
        def test(q: dict[str, list[str]]) -> bool:
            return (" ".join(q.get("arg", [])) == words and "offset" not in q
                    and (sort is None or f"{q.get('sort', [''])[0]} {q.get('dir', [''])[0]}" == sort))
        name = f"{words} {sort}"
        self.tests[name] = test
        return name

    def wait(self, name: str) -> None:
        """Until the page has asked (the request is held): a bounded look at a condition."""
        end = time.monotonic() + 30
        while name not in self.routes:
            assert time.monotonic() < end, f"the page never asked for {name}"
            self.pg.wait_for_timeout(20)  # (lets Playwright deliver the route; the condition is above)

    def typed(self, words: str) -> str:
        """``words`` typed into the filter, its first page held: the page has asked and waits."""
        h = self.hold(words)
        self.pg.fill("#run-filter", words)
        self.wait(h)
        return h

    def release(self, name: str) -> None:
        del self.tests[name]
        self.routes.pop(name).continue_()


def count(pg, text: str) -> None:
    pg.wait_for_function("t => document.querySelector('#run-count').textContent.startsWith(t)", arg=text)


def test_a_response_that_comes_late_never_leaves_the_table_on_another_query(tmp_store, page):  # noqa: F811
    """What a demanding user sees while the server is slow: each answer is drawn only if it answers
    what the table is asked for NOW (its filter, its sort, the newest request); select all selects the
    rows of the filter just typed, not the ones still drawn. Every step fails on the page before
    (s5-ui: the table stayed on lr=0.1's newest runs under the seed column's arrow; select all took
    the previous filter's rows)."""
    n = 400  # a filter by lr keeps 100: more than a screen (paged by the server)
    fill(n)
    srv, _ = serve_in_thread(tmp_store)
    try:
        pg = page
        held = Held(pg)
        pg.goto(srv.link("?fn=many:f"))
        pg.wait_for_selector("body[data-ready='1']")
        pg.click("#select-none")
        six = [8, 7, 5, 4, 2, 1]
        pg.fill("#run-filter", "seed<10 opt!=sgd")
        first_rows(pg, six)

        # select all while the filter's rows are on their way: the filter's rows, not the six drawn
        h = held.typed("seed<=3")
        pg.click("#select-all")
        held.release(h)
        count(pg, f"3 of {n} evaluation(s), 3 selected")
        assert pg.evaluate("() => state.selected") == ["3", "2", "1"]
        first_rows(pg, [3, 2, 1])

        # a sort clicked while a filter's rows are on their way (the six held were every run: the sort
        # asked nothing): the answer, in start order, is not drawn under the seed column's arrow
        pg.fill("#run-filter", "seed<10 opt!=sgd")
        first_rows(pg, six)
        h = held.typed("lr=0.1")
        pg.click("#runs thead th[data-col='seed']")
        assert pg.evaluate("() => [state.sort.key, state.sort.dir]") == ["a:seed", 1]
        held.release(h)
        first_rows(pg, [4, 8, 12, 16])
        count(pg, f"{n // 4} of {n} evaluation(s)")
        # scrolled to the end, the pages come in the same order (seed ascending, lr=0.1 only)
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = w.scrollHeight; w.dispatchEvent(new Event('scroll')); }")
        pg.wait_for_function(f"() => !document.querySelector('#runs tbody tr.pending') && ({SHOWN})().includes({n})")
        tail = pg.evaluate(SHOWN)
        assert tail == sorted(tail) and all(r % 4 == 0 for r in tail), tail

        # an older filter's answer, come after the newer one's, is dropped
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = 0; w.dispatchEvent(new Event('scroll')); }")
        h = held.typed("lr=0.2")
        pg.fill("#run-filter", "lr=0.3")
        first_rows(pg, [2, 6, 10])
        held.release(h)
        pg.wait_for_function("() => !state.inflight")
        first_rows(pg, [2, 6, 10])
        assert all(r % 4 == 2 for r in pg.evaluate(SHOWN))
        count(pg, f"{n // 4} of {n} evaluation(s)")

        # the sort turned while its answer is on its way: the pages scrolled to meanwhile are of the
        # order drawn (seed ascending, under its arrow), never the next order's pages mixed in
        h = held.hold("lr=0.3", "a:seed desc")
        pg.click("#runs thead th[data-col='seed']")
        held.wait(h)
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = w.scrollHeight; w.dispatchEvent(new Event('scroll')); }")
        pg.wait_for_function(f"() => !document.querySelector('#runs tbody tr.pending') && ({SHOWN})().includes({n - 2})")
        tail = pg.evaluate(SHOWN)
        assert tail == sorted(tail) and all(r % 4 == 2 for r in tail), tail
        assert "seed ▲" in pg.inner_text("#runs thead")
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = 0; w.dispatchEvent(new Event('scroll')); }")
        held.release(h)
        first_rows(pg, [n - 2, n - 6, n - 10])
        assert "seed ▼" in pg.inner_text("#runs thead")
        assert pg.errors == []
    finally:
        srv.shutdown()
        srv.server_close()
