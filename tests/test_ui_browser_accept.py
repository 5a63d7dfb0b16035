"""The dashboard marks accepted code changes (`memolab accept`), in a real headless Chromium (the
set-up: test_ui_browser.py). A run of the new code and the evaluation whose results it uses say
"accepted change" (with who accepted it, in the badge's title) instead of "code changed"; taken
back, the edit is a plain "code changed" again."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import SRC
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)

JOB = '''
import os
from memolab import memo

@memo
def train(n):
    print("training", n)  # LOG
    if os.environ.get("STOP"):
        raise SystemExit("stopped by hand")
    return n * 2

train(3)
'''


def _memolab(project, *args):
    env = dict(os.environ, PYTHONPATH=SRC, MEMOLAB_STORE=str(project.store))
    env.pop("MEMOLAB_HMAC_KEY", None)
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, env=env, capture_output=True,
                        text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    return cp


def _badges(pg):
    """run id -> the badges of its code cell."""
    out = {}
    for row in pg.query_selector_all("#runs tbody tr[data-run]"):
        out[row.get_attribute("data-run")] = [(b.inner_text(), b.get_attribute("title") or "")
                                              for b in row.query_selector_all("td.code .badge")]
    return out


def test_the_dashboard_marks_an_accepted_change_on_both_code_versions(project, page):  # noqa: F811
    project.write("job.py", JOB)
    project.run("job.py", env={"MEMOLAB_HMAC_KEY": ""})
    project.write("job.py", JOB.replace('print("training", n)  # LOG', 'print("training", n, "now")  # LOG'))
    cp = project.run("job.py", env={"STOP": "1", "MEMOLAB_HMAC_KEY": ""}, check=False)
    assert "stopped by hand" in cp.stderr
    srv, _ = serve_in_thread(project.store)
    try:
        page.goto(srv.link("?fn=__main__:train"))
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_selector("#runs tbody tr[data-run]")
        before = _badges(page)
        assert sorted(len(b) for b in before.values()) == [0, 1]
        assert [t for b in before.values() for t, _ in b] == ["code changed"]

        _memolab(project, "accept", "train", "--yes")
        project.run("job.py", env={"MEMOLAB_HMAC_KEY": ""})  # a hit through the accept
        page.reload()
        page.wait_for_selector("#runs tbody tr[data-run] .badge.accepted")
        after = _badges(page)
        assert len(after) == 2 and all([t for t, _ in b] == ["accepted change"] for b in after.values()), after
        assert all("accept #1" in title and "accepted by" in title for b in after.values() for _, title in b)
        assert page.query_selector_all("#runs tbody .badge.accepted")[0].evaluate(
            "b => getComputedStyle(b).backgroundColor") == "rgb(217, 242, 221)"

        _memolab(project, "accept", "train", "--undo")
        page.reload()
        page.wait_for_selector("#runs tbody tr[data-run]")
        page.wait_for_function("() => !document.querySelector('#runs tbody .badge.accepted')")
        assert sorted(t for b in _badges(page).values() for t, _ in b) == ["code changed"]
        assert page.errors == []
    finally:
        srv.shutdown()
        srv.server_close()
