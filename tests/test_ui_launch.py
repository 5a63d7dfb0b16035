"""``memolab ui`` serves before it opens anything, prints its URL (with the token) first, and opens
a browser only where a graphical one can show: never over SSH, never without a display, never a
text browser that would take over the terminal (fake browsers on PATH record whether they ran)."""
from __future__ import annotations

import os
import queue
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import SRC, require, require_tool

HANGING_TEXT_BROWSER = """#!/bin/sh
# a text browser: it takes over the terminal and never returns
echo "$@" > "{marker}"
exec sleep 600
"""

GRAPHICAL_BROWSER = """#!{python}
# a graphical browser: it loads the page it was given (so the server must already answer)
import sys, urllib.request
url = sys.argv[-1]
try:
    status = urllib.request.urlopen(url, timeout=10).status
except Exception as e:
    status = repr(e)
open({marker!r}, "w").write(f"{{url}} {{status}}")
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def stocked(project, tmp_path):
    project.write("job.py", "from memolab import memo\n\n@memo\ndef job():\n    return 1\n\njob()\n")
    project.run("job.py")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "w3m", HANGING_TEXT_BROWSER.format(marker=tmp_path / "w3m-ran"))
    _script(bin_dir / "graphical-browser", GRAPHICAL_BROWSER.format(python=sys.executable,
                                                                   marker=str(tmp_path / "browser-ran")))
    return project, tmp_path


class Ui:
    """``memolab ui --port 0`` in a fresh process, its stdout read line by line."""

    def __init__(self, project, env, *args):
        e = {k: v for k, v in os.environ.items()
             if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "BROWSER")}
        e.update(PYTHONPATH=SRC, MEMOLAB_STORE=str(project.store), TERM="xterm", **env)
        self.p = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--port", "0", *args], cwd=project.root,
                                  env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)

    def line(self, timeout=60.0) -> str:
        return self.lines.get(timeout=timeout)

    def close(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(timeout=10)
        self.p.stderr.close()


def _url(first_line: str) -> str:
    assert first_line.startswith("memolab dashboard for "), first_line
    url = first_line.split(": ", 1)[1].split()[0]
    assert "?token=" in url
    return url


def _wait_for(path: Path, timeout=60.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def test_no_display_no_browser_and_a_text_browser_never_runs(stocked):
    """The issue's box: headless, w3m installed. The URL comes first, the server answers, the
    text browser never starts, and the reason is said."""
    project, tmp = stocked
    ui = Ui(project, {"PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    try:
        url = _url(ui.line())
        assert urllib.request.urlopen(url, timeout=30).status == 200
        why = ui.line()
        assert why.startswith("(no browser opened: no graphical display here") and "ssh -L" in why, why
        time.sleep(0.5)  # (nothing to wait for: checking that something did not happen)
        assert not (tmp / "w3m-ran").exists()
    finally:
        ui.close()


def test_a_text_browser_named_in_BROWSER_is_not_run_even_with_a_display(stocked):
    project, tmp = stocked
    ui = Ui(project, {"PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}", "DISPLAY": ":99", "BROWSER": "w3m"})
    try:
        url = _url(ui.line())
        assert urllib.request.urlopen(url, timeout=30).status == 200
        assert "text browser (w3m)" in ui.line()
        assert not (tmp / "w3m-ran").exists()
    finally:
        ui.close()


def test_a_graphical_browser_opens_the_url_once_the_server_answers(stocked):
    project, tmp = stocked
    ui = Ui(project, {"PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}", "DISPLAY": ":99",
                      "BROWSER": "graphical-browser"})
    try:
        url = _url(ui.line())
        opened, status = _wait_for(tmp / "browser-ran").split()
        assert (opened, status) == (url, "200")  # the browser's first request was answered
    finally:
        ui.close()


@pytest.mark.parametrize("case", ["ssh", "--no-browser"])
def test_no_browser_over_ssh_or_when_asked(stocked, case):
    project, tmp = stocked
    env = {"PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}", "DISPLAY": "localhost:10.0",
           "BROWSER": "graphical-browser"}
    args = []
    if case == "ssh":
        env["SSH_CONNECTION"] = "10.0.0.2 50000 10.0.0.1 22"
    else:
        args = ["--no-browser"]
    ui = Ui(project, env, *args)
    try:
        url = _url(ui.line())
        assert urllib.request.urlopen(url, timeout=30).status == 200
        if case == "ssh":
            assert ui.line().startswith("(no browser opened: this is an SSH session")
        time.sleep(1.0)  # (checking that something did not happen)
        assert not (tmp / "browser-ran").exists()
    finally:
        ui.close()


def test_why_not_by_platform():
    from memolab.ui.browser import why_not

    assert why_not({}, "linux") and why_not({"DISPLAY": ":0"}, "linux") is None
    assert why_not({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert why_not({}, "darwin") is None and why_not({}, "win32") is None
    assert why_not({"SSH_TTY": "/dev/pts/1"}, "darwin") == "this is an SSH session"


def test_the_printed_url_opens_the_dashboard_in_chromium(stocked):
    """The first line's URL, token included, is all a real browser needs: Debian's Chromium
    (driven by Playwright) loads the page and its data from it."""

    chromium = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
    require_tool("chromium", chromium)
    sync_api = require("playwright.sync_api", reason="playwright is pinned in the dev extra")
    project, tmp = stocked
    ui = Ui(project, {}, "--no-browser")
    try:
        url = _url(ui.line())
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page()
                page.goto(url)
                page.wait_for_selector("body[data-ready='1']", timeout=30000)
                assert "job" in page.inner_text("body")
                assert "token=" not in page.url  # dropped from the address bar once the cookie is set
            finally:
                browser.close()
    finally:
        ui.close()
