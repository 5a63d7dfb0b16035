"""What memolab says as calls run (``memolab.calls.report``, docs/logging.md "What memolab says") and
its progress bars (``memolab.settings.progress``), each in fresh processes as a user's script runs."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

from conftest import SRC, read_terminal

LINE = re.compile(r"^memolab: .*$", re.M)

TRAIN = """
    import sys, time
    import memolab

    class Net:
        def forward(self, x):
            return x * 2

    @memolab.memo
    def train(lr, epochs=3, api_key=None):
        return Net().forward(lr) + epochs

    for lr in sys.argv[1:]:
        train(float(lr), api_key="sk-very-secret")
"""


def said(cp) -> list:
    return LINE.findall(cp.stderr)


def test_the_default_says_a_first_miss_why_and_its_store_and_nothing_on_a_hit(project):
    """Level 1 (the default): the first miss of a function in a process says why, with the
    command that explains it further, then that it was stored; a quick function's later misses
    in the same process say nothing (one line, not one per call); hits say nothing. An edit
    of code the function depends on is named. Secrets in arguments are masked."""
    project.write("job.py", TRAIN)
    cp = project.run("job.py", "0.1", "0.2", "0.3")
    lines = said(cp)
    assert len(lines) == 2, cp.stderr
    assert lines[0] == ("memolab: train(lr=0.1, epochs=3, api_key=<masked>) miss — no stored evaluation of this "
                        "function yet (memolab why job.py:train)")
    assert re.fullmatch(r"memolab: train stored \d+ B in [\d.]+ (µs|ms|s) \(computed in [\d.]+ (µs|ms|s)\)", lines[1])
    assert "sk-very-secret" not in cp.stderr
    assert said(project.run("job.py", "0.1", "0.2")) == []  # hits from the store: quiet
    project.write("job.py", TRAIN.replace("return x * 2", "return x * 3"))
    lines = said(project.run("job.py", "0.1"))
    assert lines[0] == ("memolab: train(lr=0.1, epochs=3, api_key=<masked>) miss — code of Net.forward changed "
                        "(memolab why job.py:train)"), lines
    lines = said(project.run("job.py", "0.4"))
    assert lines[0] == ("memolab: train(lr=0.4, epochs=3, api_key=<masked>) miss — new arguments: lr 0.1 -> 0.4 "
                        "(memolab why job.py:train)"), lines


def test_a_slow_function_says_every_miss(project):
    """A function whose computations take ``report.SLOW`` or more says every miss (with why:
    deferred miss records are explained by the same machinery `memolab why` uses)."""
    project.write("slow.py", """
        import sys, time
        import memolab, memolab.calls.report
        memolab.calls.report.SLOW = 0.05  # (1 s by default)

        @memolab.memo
        def slow(x):
            time.sleep(0.06)
            return x

        for x in sys.argv[1:]:
            slow(int(x))
    """)
    lines = said(project.run("slow.py", "1", "2", "3"))
    misses = [ln for ln in lines if " miss — " in ln]
    assert [ln.split(" miss — ")[0] for ln in misses] == ["memolab: slow(x=1)", "memolab: slow(x=2)",
                                                            "memolab: slow(x=3)"], lines
    assert misses[1].endswith("miss — new arguments: x 1 -> 2 (memolab why slow.py:slow)"), misses
    assert len([ln for ln in lines if ln.startswith("memolab: slow stored ")]) == 3


def test_level_2_says_every_store_hit_and_level_0_nothing(project):
    project.write("job.py", TRAIN)
    project.run("job.py", "0.1", "0.2")
    cp = project.run("job.py", "0.1", "0.2", env={"MEMOLAB_VERBOSE": "2"})
    lines = said(cp)
    assert len(lines) == 2 and all(re.fullmatch(
        r"memolab: train\(lr=0\.[12], epochs=3, api_key=<masked>\) loaded \d+ B from the store in [\d.]+ (µs|ms|s) "
        r"\(evaluation #[12]\)", ln) for ln in lines), lines
    cp = project.run("job.py", "0.5", "0.6", env={"MEMOLAB_VERBOSE": "2"})
    assert [ln.split(" — ")[0] for ln in said(cp) if " miss " in ln] == [
        "memolab: train(lr=0.5, epochs=3, api_key=<masked>) miss", "memolab: train(lr=0.6, epochs=3, api_key=<masked>) miss"]
    assert said(project.run("job.py", "0.7", env={"MEMOLAB_VERBOSE": "0"})) == []
    assert said(project.run("job.py", "0.8", env={"MEMOLAB_VERBOSE": "off"})) == []


def test_the_function_configure_and_environment_choose_in_that_order(project):
    project.write("order.py", """
        import sys
        import memolab

        @memolab.memo(verbose=False)
        def hush(x):
            return x

        @memolab.memo(verbose=2)
        def chatty(x):
            return x

        @memolab.memo
        def plain(x):
            return x

        if sys.argv[1] == "configure0":
            memolab.configure(verbose=0)
        for x in range(2):
            hush(x); chatty(x); plain(x)
    """)
    cp = project.run("order.py", "env2", env={"MEMOLAB_VERBOSE": "2"})
    names = [ln.split("(")[0] for ln in said(cp)]
    assert "memolab: hush" not in names and names.count("memolab: chatty") == 2 and names.count("memolab: plain") == 2
    cp = project.run("order.py", "configure0", env={"MEMOLAB_VERBOSE": "2"})
    names = [ln.split("(")[0].split(" stored")[0] for ln in said(cp)]
    assert set(names) == {"memolab: chatty"}, cp.stderr  # configure() outranks the environment, @memo both


def test_fresh_says_it_recomputes(project):
    project.write("fresh.py", """
        import memolab

        @memolab.memo
        def f(x):
            return x

        f(1)
        f.fresh(1)
    """)
    lines = said(project.run("fresh.py", env={"MEMOLAB_VERBOSE": "2"}))
    assert "memolab: f(x=1) recomputed — fresh() asked for it (memolab why fresh.py:f)" in lines, lines


def test_ranks_other_than_0_are_quiet_unless_asked(project):
    project.write("job.py", TRAIN)
    assert said(project.run("job.py", "1.5", env={"RANK": "1"})) == []
    assert said(project.run("job.py", "1.6", env={"RANK": "0"}))
    assert said(project.run("job.py", "1.7", env={"LOCAL_RANK": "3", "MEMOLAB_VERBOSE": "1"}))


def test_lines_go_through_logging_once(project):
    """A program that configures logging gets each line once, through its own handler, at
    INFO of the ``memolab`` logger; a level set on that logger silences it."""
    project.write("logged.py", """
        import logging, sys
        import memolab

        if sys.argv[1] == "basic":
            logging.basicConfig(format="%(name)s|%(levelname)s|%(message)s", level=logging.WARNING)
        elif sys.argv[1] == "quiet":
            logging.getLogger("memolab").setLevel(logging.WARNING)

        @memolab.memo
        def g(x):
            return x

        g(int(sys.argv[2]))
        if sys.argv[1] == "late":  # configured after memolab spoke once: still once per line
            logging.basicConfig(format="late|%(message)s")
            g(int(sys.argv[2]) + 100)
    """)
    cp = project.run("logged.py", "basic", "1", env={"MEMOLAB_VERBOSE": "2"})
    assert "memolab|INFO|g(x=1) miss — " in cp.stderr and "memolab: g(" not in cp.stderr, cp.stderr
    assert cp.stderr.count("g(x=1) miss") == 1
    assert said(project.run("logged.py", "quiet", "2", env={"MEMOLAB_VERBOSE": "2"})) == []
    cp = project.run("logged.py", "late", "3", env={"MEMOLAB_VERBOSE": "2"})
    assert cp.stderr.count("g(x=3) miss") == 1 and cp.stderr.count("g(x=103) miss") == 1, cp.stderr
    assert "late|g(x=103) miss" in cp.stderr and "memolab: g(x=103)" not in cp.stderr


def test_verbose_off_costs_a_miss_nothing(project):
    """At level 0 a miss makes no explanation it would not make anyway (``explain.settle`` is
    never run: a deferred miss stays deferred) and ``logging`` is never imported; at level 1
    a quick function's later misses do not pay for one either."""
    project.write("cost.py", """
        import json, sys
        import memolab, memolab.calls.explain

        settled = []
        real = memolab.calls.explain.settle
        memolab.calls.explain.settle = lambda *a, **k: settled.append(1) or real(*a, **k)

        @memolab.memo
        def h(x):
            return x

        for x in range(20):
            h(x + int(sys.argv[1]))
        print(json.dumps({"settled": len(settled), "logging": "logging" in sys.modules}))
    """)
    out = project.run_json("cost.py", "0", env={"MEMOLAB_VERBOSE": "0"})
    assert out == {"settled": 0, "logging": False}
    out = project.run_json("cost.py", "100", env={"MEMOLAB_VERBOSE": "1"})
    assert out["settled"] == 0  # the first miss: explained at once (new code); the rest are quick: unsaid
    out = project.run_json("cost.py", "200", env={"MEMOLAB_VERBOSE": "2"})
    assert out["settled"] >= 18  # each deferred miss explained to be said


def test_a_broken_handler_never_fails_a_call(project):
    project.write("broken.py", """
        import logging
        import memolab

        class Broken(logging.Handler):
            def emit(self, record):
                raise RuntimeError("the program's handler is broken")

            def handleError(self, record):
                raise RuntimeError("and so is its error handling")

        logging.getLogger("memolab").addHandler(Broken())

        @memolab.memo
        def k(x):
            return x + 1

        print(k(1), k(2))
    """)
    cp = project.run("broken.py", env={"MEMOLAB_VERBOSE": "2"})
    assert cp.stdout.split() == ["2", "3"]


# -- progress bars ---------------------------------------------------------------------------

BIG = """
    import sys
    import numpy as np
    import memolab

    @memolab.memo
    def big(n):
        return np.ones(n)

    x = big(int(sys.argv[1]))
    print(json.dumps({"n": int(x.shape[0]), "modules": sorted(m for m in ("tqdm", "rich") if m in sys.modules)}))
""".replace("import sys\n", "import json, sys\n", 1)


def on_a_terminal(project, *args, env=None):
    """Run a script with stderr on a pseudo-terminal: (its stdout, what was written to the terminal)."""
    main, sub = pty.openpty()
    e = {**os.environ, "PYTHONPATH": SRC + os.pathsep + str(project.root), "MEMOLAB_STORE": str(project.store),
         **(env or {})}
    try:
        p = subprocess.Popen([sys.executable, *args], cwd=project.root, env=e, stdout=subprocess.PIPE, stderr=sub,
                             stdin=subprocess.DEVNULL)
        os.close(sub)
        chunks = [read_terminal(main, p)]
        out = p.stdout.read().decode()
        assert p.wait(timeout=120) == 0, (out, b"".join(chunks).decode(errors="replace"))
        return out, b"".join(chunks).decode(errors="replace")
    finally:
        os.close(main)


def test_a_hit_imports_no_progress_library(project):
    """Hits (from the store, of a small and of a blob result; then from memory) never import
    tqdm or rich, on a terminal where bars would be drawn, even with no delay."""
    project.write("big.py", BIG)
    for n in ("10", "100000"):
        project.run("big.py", n)
        out, _ = on_a_terminal(project, "big.py", n, env={"MEMOLAB_PROGRESS_DELAY": "3600"})
        assert json.loads(out.splitlines()[-1]) == {"n": int(n), "modules": []}


def test_storing_and_loading_a_big_result_draws_a_bar_on_a_terminal_only(project):
    """A result of 64 MiB or more is stored and loaded with a bar (tqdm's) on a terminal, once
    the work lasts the delay (0 here); on a pipe, or with MEMOLAB_PROGRESS=off, none."""
    project.write("big.py", BIG)
    n = str((72 << 20) // 8)
    now = {"MEMOLAB_PROGRESS_DELAY": "0"}
    out, term = on_a_terminal(project, "big.py", n, env=now)
    assert re.search(r"storing big: +\d+%\|", term), term
    assert json.loads(out.splitlines()[-1])["modules"] == ["tqdm"]
    assert re.search(r"memolab: big stored 75.5 MB in [\d.]+ (ms|s)", term)
    out, term = on_a_terminal(project, "big.py", n, env={**now, "MEMOLAB_VERBOSE": "2"})
    assert re.search(r"loading big: +\d+%\|", term), term
    assert re.search(r"memolab: big\(n=\d+\) loaded 75.5 MB from the store in [\d.]+ (µs|ms|s) \(evaluation #1\)", term)
    _, term = on_a_terminal(project, "big.py", n, env={**now, "MEMOLAB_PROGRESS": "off"})
    assert "loading big" not in term
    # the default level says what a big result's hit loaded, however fast
    assert re.search(r"memolab: big\(n=\d+\) loaded 75.5 MB from the store in ", term), term
    cp = project.run("big.py", n, env=now)
    assert "loading big" not in cp.stderr  # a pipe


def test_without_tqdm_a_plain_bar(project):
    """tqdm is optional: without it the bar is memolab's own one-line bar."""
    project.write("tqdm.py", "raise ImportError('tqdm is not installed here')\n")
    project.write("big.py", BIG)
    n = str((72 << 20) // 8)
    out, term = on_a_terminal(project, "big.py", n, env={"MEMOLAB_PROGRESS_DELAY": "0"})
    assert re.search(r"storing big \[#*\s*\] [\d.]+ (B|KB|MB)/75.5 MB +\d+%", term), term
    assert json.loads(out.splitlines()[-1])["modules"] == []
