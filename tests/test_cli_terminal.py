"""The command line on a real 80-column terminal (tmux): tables fit with short run ids that
``show`` takes, ``show`` folds its own lines (the terminal never cuts a number in two), ``gc
--dry-run`` counts rows and log points and estimates the index it frees, and ``export-tb``
onto a file is one line."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from conftest import SRC, require_tool

TMUX = shutil.which("tmux")

def _needs_tmux(fn):
    """A test that drives tmux: skipped without it, failed under CI (conftest.require_tool)."""
    import functools

    @functools.wraps(fn)
    def run(*a, **kw):
        require_tool("tmux")
        return fn(*a, **kw)

    return run


needs_tmux = _needs_tmux

SWEEP = """
    import memolab
    from memolab import log

    @memolab.memo
    def train(lr, weight_decay=0.000123456, warmup_steps=1234567, label_smoothing=0.0987654321,
              scheduler="cosine-with-restarts", seed=20260101):
        for step in range(50):
            log.scalar("train/loss", 1.23456789 / (step + 1) + lr, step=step)
            log.scalar("val/accuracy_top1", 0.876543219 - lr, step=step)
            log.scalar("val/accuracy_top5", 0.987654321 - lr, step=step)
            log.scalar("train/learning_rate_after_warmup", lr * 0.123456789, step=step)
            log.scalar("val/perplexity_on_heldout", 12.3456789 + lr, step=step)
        return lr

    for lr in (0.1, 0.01, 0.001, 0.0001):
        train(lr)
"""


class Terminal:
    """A tmux server of its own with one 80x50 window; ``run`` types nothing: each command is the
    window's program, and its screen is read back."""

    def __init__(self, tmp_path, project) -> None:
        self.sock = str(tmp_path / f"tmux-{uuid.uuid4().hex[:8]}")
        self.project = project
        # a session that outlives the others: tmux's server exits with its last session, and a
        # new session asked of a server on its way out fails ("server exited unexpectedly")
        subprocess.run([TMUX, "-S", self.sock, "new-session", "-d", "-s", "keep", "sleep", "3600"], check=True)

    def run(self, *args: str, width: int = 80, timeout: float = 120) -> str:
        """The screen (lines as the terminal shows them, joined where the terminal wrapped them
        when ``joined``) after ``memolab ARGS`` ran in a ``width``-column terminal."""
        env = {"PYTHONPATH": SRC, "MEMOLAB_STORE": str(self.project.store), "TERM": "xterm-256color"}
        cmd = (" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
               + " ".join(shlex.quote(a) for a in [sys.executable, "-m", "memolab", *args]))
        name = uuid.uuid4().hex[:8]
        script = f"unset COLUMNS LINES; cd {shlex.quote(str(self.project.root))}; {cmd}; echo __EXIT_$?__; sleep 600"
        subprocess.run([TMUX, "-S", self.sock, "new-session", "-d", "-s", name, "-x", str(width), "-y", "50",
                        "sh", "-c", script], check=True)
        deadline = time.monotonic() + timeout
        try:
            while True:
                screen = self.capture(name)
                if "__EXIT_" in screen:
                    return screen
                assert time.monotonic() < deadline, screen
                time.sleep(0.1)
        finally:
            self.last_wrapped = self.capture(name, joined=True)
            subprocess.run([TMUX, "-S", self.sock, "kill-session", "-t", name], check=False)

    def capture(self, name: str, joined: bool = False) -> str:
        return subprocess.run([TMUX, "-S", self.sock, "capture-pane", "-p", "-t", name] + (["-J"] if joined else []),
                              capture_output=True, text=True, check=True).stdout

    def close(self) -> None:
        subprocess.run([TMUX, "-S", self.sock, "kill-server"], check=False, capture_output=True)


@pytest.fixture
def terminal(tmp_path, project):
    project.write("sweep.py", SWEEP)
    project.run("sweep.py")
    t = Terminal(tmp_path, project)
    yield t
    t.close()


def _lines(screen: str) -> list:
    return [ln for ln in screen.splitlines() if ln.strip() and "__EXIT_" not in ln]


def _unwrapped(t: Terminal, screen: str) -> None:
    """The terminal folded no line (what it shows is what memolab wrote, each line at most 80)
    but one holding a single word longer than the terminal (a long path, alone on its line)."""
    long = [ln for ln in _lines(t.last_wrapped) if len(ln) > 80]
    assert all(" " not in ln.strip() for ln in long), "the terminal wrapped a line:\n" + "\n".join(long)
    assert _lines(t.last_wrapped), screen


@needs_tmux
def test_runs_at_80_columns_short_ids_that_show_takes(terminal):
    screen = terminal.run("runs", "train")
    assert "__EXIT_0__" in screen, screen
    _unwrapped(terminal, screen)
    rows = [ln for ln in _lines(screen) if re.match(r"^\s*\d+\s+done\s", ln)]
    assert len(rows) == 4, screen
    ids = [ln.split()[0] for ln in rows]
    assert all(6 <= len(i) < 16 for i in ids), ids  # short ids: the names keep their room
    for lr in ("lr=0.1", "lr=0.01", "lr=0.001", "lr=0.0001"):
        assert any(re.search(rf"\s{re.escape(lr)}\s", ln) for ln in rows), (lr, screen)  # never `lr=0.00…`
    shown = terminal.run("show", ids[0])
    assert "__EXIT_0__" in shown, shown
    full = re.search(r"^run (\d{10,})", shown, re.M).group(1)
    assert full.startswith(ids[0])


@needs_tmux
def test_show_folds_its_lines_and_never_cuts_a_number(terminal):
    """An evaluation and a run with long argument lists and many scalars: every line fits, the
    terminal folds nothing, each number is whole on one line."""
    for what in ("1", None):
        if what is None:
            runs = terminal.run("runs", "train")
            what = next(ln.split()[0] for ln in _lines(runs) if re.match(r"^\s*\d+\s+done\s.* lr=0\.1 ", ln))
        screen = terminal.run("show", what)
        assert "__EXIT_0__" in screen, screen
        _unwrapped(terminal, screen)
        for number in ("0.0987654321", "20260101", "1234567", "0.000123456"):
            assert number in screen, (number, screen)
        assert re.search(r"val/accuracy_top1 = 0\.7765\b", screen), screen


@needs_tmux
def test_gc_dry_run_counts_rows_and_log_points_on_a_terminal(terminal):
    screen = terminal.run("gc", "--dry-run", "--older-than", "0s")
    assert "__EXIT_0__" in screen, screen
    joined = " ".join(_lines(terminal.last_wrapped))
    m = re.search(r"would drop 4 evaluations, 4 runs, 1,000 log points; would free ~([\d.]+) (KB|MB)", joined)
    assert m, joined


def test_gc_dry_run_estimates_what_the_index_frees(project):
    """The dry run's estimate of the index's share is close to what gc then frees (within a
    factor 2 both ways), and its JSON says it is an estimate."""
    import json

    project.write("sweep.py", SWEEP)
    project.run("sweep.py")
    dry = json.loads(project.run("-m", "memolab", "gc", "--dry-run", "--older-than", "0s", "--json").stdout)
    assert (dry["evaluations"], dry["runs"], dry["log_points"], dry["index_estimated"]) == (4, 4, 1000, True)
    done = json.loads(project.run("-m", "memolab", "gc", "--older-than", "0s", "--yes", "--json").stdout)
    freed = done["index_bytes_before"] - done["index_bytes_after"]
    estimate = dry["index_bytes_before"] - dry["index_bytes_after"]
    assert freed > 0 and freed / 2 <= estimate <= freed * 2, (estimate, freed)


def test_export_tb_onto_a_file_is_one_line(project, tmp_path):
    project.write("sweep.py", SWEEP)
    project.run("sweep.py")
    target = tmp_path / "events.txt"
    target.write_text("not a directory")
    for where in (target, target / "sub"):
        cp = project.run("-m", "memolab", "export-tb", str(where), check=False)
        assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and cp.stderr.startswith("memolab: export-tb: "), \
            cp.stderr
        assert "Traceback" not in cp.stderr and "FileExistsError" not in cp.stderr
    assert target.read_text() == "not a directory"


def test_show_takes_a_unique_prefix_and_refuses_an_ambiguous_one(project):
    import json
    import sqlite3

    project.write("sweep.py", SWEEP)
    project.run("sweep.py")
    with sqlite3.connect(project.store / "index.sqlite") as c:
        ids = sorted(str(i) for (i,) in c.execute("SELECT id FROM runs"))
    run = json.loads(project.run("-m", "memolab", "show", ids[0][:9], "--json").stdout)
    assert str(run["id"]) == ids[0]
    assert json.loads(project.run("-m", "memolab", "show", "r" + ids[0][:9], "--json").stdout)["id"] == run["id"]
    assert json.loads(project.run("-m", "memolab", "show", "#1", "--json").stdout)["id"] == 1  # an evaluation
    cp = project.run("-m", "memolab", "show", "e" + ids[0][:9], check=False)
    assert cp.returncode == 1  # `e`: an evaluation only
    with sqlite3.connect(project.store / "index.sqlite") as c:  # two runs sharing a prefix
        first = int(ids[0])
        twin = int(str(first)[:10] + ("0" if str(first)[10] != "0" else "1") + str(first)[11:])
        c.execute("INSERT INTO runs (id, fn, name, started, status) SELECT ?, fn, 'twin', started, status FROM runs "
                  "WHERE id=?", (twin, first))
    cp = project.run("-m", "memolab", "show", str(first)[:10], check=False)
    assert cp.returncode == 2 and "is the start of several run ids" in cp.stderr, cp.stderr
