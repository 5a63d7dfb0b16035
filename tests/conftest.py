"""Shared fixtures.

``tmp_store`` points memolab at a fresh store for one test. ``project`` builds a
small project on disk and runs its scripts in fresh interpreters, which is how
the end-to-end tests prove a cache survives the process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

# Code analyses cached across processes (memolab/codegraph/code_cache.py): on,
# as for users, but in a directory of this test session, not ~/.cache. Every
# end-to-end test that edits code between fresh processes exercises it.
if "MEMOLAB_CODE_CACHE" not in os.environ:
    import tempfile

    os.environ["MEMOLAB_CODE_CACHE"] = tempfile.mkdtemp(prefix="memolab-code-cache-")

# Loading an unsigned team store's results is opt-in (docs/team.md, "Trust"): the team tests that
# run without MEMOLAB_HMAC_KEY test everything else about the team store, so they opt in (their
# subprocesses inherit it); the tests of the default (tests/test_team_trust.py) take it away.
os.environ.setdefault("MEMOLAB_TEAM_UNSIGNED", "1")

import memolab
import zygote
from memolab.settings import config

# real servers for the team-store tests (tests/servers/): fixtures postgres_server, postgres_dsn;
# s3_server, s3_env, s3_bucket
pytest_plugins = ["servers.postgres", "servers.s3", "servers.team"]

SRC = str(Path(__file__).resolve().parents[1] / "src")
#: how long a test waits for a child script: a bound against a hang, never a timing. 120 s was tuned
#: to an idle machine: under the census's load (6 spinning processes on 2 cores) scripts that import
#: torch or Lightning, or run two dozen cases, took longer and failed though nothing was wrong
HANG = 600


# -- what a test needs: a skip on a developer's machine, a failure under CI ------------------------
# One rule for every test (docs: GUIDE, "a missing tool fails under CI=true"): a pinned dev
# dependency that does not import, a system tool (tmux, Chromium, PostgreSQL), root for a mount.
# Under CI a skip would let a broken extra pass as green. The one skip CI allows is the GPU test
# (tests/test_big_results.py), which says so in its reason.

def under_ci() -> bool:
    """``CI`` set to anything but ``false``/``0``/empty (GitHub, GitLab and most runners set ``true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str, allow_module_level: bool = False) -> NoReturn:
    """Skip with ``reason``; under CI fail with it instead (at module level a collection error)."""
    if under_ci():
        pytest.fail(f"required under CI, never skipped there: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def require(module: str, reason: str | None = None) -> Any:
    """``import module`` for a test (a pinned dev dependency): the module, else ``skip_or_fail``.
    At module level or in a test alike (the replacement of ``pytest.importorskip``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_or_fail(f"{module} cannot be imported ({e}){': ' + reason if reason else ''}; it is pinned in "
                     "the dev extra (pip install -e '.[dev]')", allow_module_level=True)


def require_tool(name: str, path: str | None = None) -> str:
    """The path of the system tool ``name`` (or the file ``path``), else ``skip_or_fail``."""
    import shutil

    found = path if path is not None and os.path.exists(path) else (shutil.which(name) if path is None else None)
    if found is None:
        skip_or_fail(f"{path or name} is not installed (Debian's package: make system-deps)",
                     allow_module_level=True)
    return found


@pytest.fixture(autouse=True)
def _close_test_stores(tmp_path_factory):
    """The stores a test opened under its temporary directories are closed after it: the
    session would otherwise hold three descriptors per store (over a thousand by the end,
    past a common ``ulimit -n`` of 1024)."""
    yield
    from memolab.store import close_open_stores

    close_open_stores(tmp_path_factory.getbasetemp())


@pytest.fixture(autouse=True)
def _no_leaks_between_tests():
    """Whatever a test left in ``os.environ`` or in ``configure()`` is put back after it, so no
    later test sees another's settings (a non-team test once saw the ``MEMOLAB_REMOTE`` of a
    team test's dropped database)."""
    from dataclasses import fields

    env, settings = dict(os.environ), config.settings()
    yield
    if dict(os.environ) != env:
        for k in set(os.environ) - set(env):
            del os.environ[k]
        os.environ.update(env)
    now = config.settings()
    changed = {f.name: getattr(settings, f.name) for f in fields(settings)
               if getattr(now, f.name) != getattr(settings, f.name)}
    if changed:
        memolab.configure(**changed)


@pytest.fixture(autouse=True)
def _sigint_stays_python_s():
    """Ctrl-C reaches every test as Python's ``KeyboardInterrupt``: a SIGINT handler (or signal
    wake-up fd) a test or a library it ran left behind is put back, and the test that left it fails
    naming it. Found under load: nbclient (test_notebook) adds asyncio's no-op SIGINT handler with
    ``loop.add_signal_handler`` and removes it only if the kernel started; a kernel that did not
    start in time left it, and it swallowed ``_thread.interrupt_main()`` in a later file of that
    worker (test_lifecycle waited forever). Only the main thread can set signal handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    yield
    now = signal.getsignal(signal.SIGINT)
    now_fd = signal.set_wakeup_fd(fd)  # (put back whatever it was)
    if now is not handler:
        signal.signal(signal.SIGINT, handler)
    if now is not handler or now_fd != fd:
        pytest.fail(f"this test left SIGINT's handler {now!r} (was {handler!r}) and the signal wake-up fd {now_fd} "
                    f"(was {fd}): both put back; a later test's Ctrl-C would have been swallowed", pytrace=False)


def output_of(proc: subprocess.Popen, timeout: float = 30) -> str:
    """What ``proc`` wrote, for an assertion's message: the process is killed first if it still
    runs. (A message that waited for a process blocked on the test itself, as ``communicate()``
    does on a child waiting for the test's go, hung the test under load instead of failing it:
    seen in the census of the suite under 6 spinners, over an hour on one test.)"""
    if proc.poll() is None:
        proc.kill()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"(pid {proc.pid} did not end within {timeout} s of its kill)"
    return f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"


def read_terminal(fd: int, proc: subprocess.Popen, timeout: float = 120) -> bytes:
    """All that ``proc`` writes to the pseudo-terminal whose main end is ``fd``, until it closes the
    other end, within ``timeout`` seconds: past it ``proc`` is killed and the test fails (a child
    that hangs must fail the test, not the run: every wait has a bound)."""
    import select
    import time

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{proc.args}: its terminal still open after {timeout} s (a hang): "
                                 f"{b''.join(chunks)[-2000:]!r}")
        if not select.select([fd], [], [], min(left, 1.0))[0]:
            continue
        try:
            b = os.read(fd, 65536)
        except OSError:  # EIO: the other end is closed
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


class Calls(list):
    """A list that tests append to from inside a memoized function, to count real runs.

    Closure cells are hashed by value (docs/code-dependencies.md): a plain list
    that the function itself appends to would change the key on every call.
    This type is registered opaque, so it stays out of keys, like a logger.
    """


memolab.register_opaque(Calls)


def tmpfs_at(d: Path, size: str = "2m"):
    """Mount a ``size`` tmpfs at the new directory ``d`` for a fixture to yield; unmounted afterwards.

    Needs root: elsewhere the test is skipped. The small, really full disk
    tests need is one that fills, not a write error injected by hand."""
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True).returncode:
        skip_or_fail("cannot mount a tmpfs here (not root)")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.fixture
def leaf_digests(monkeypatch):
    """``leaf_digests(sample)`` starts counting the leaf digests actually computed
    (identity-cache misses) for ``type(sample)`` (an array, a tensor); returns the counts."""
    from memolab import hashing

    def start(sample):
        counts = {"n": 0}
        hashing.hash_value(sample)  # registers the handlers of its library
        leaf = hashing._leaves[type(sample)]
        real = leaf.digest

        def counting(obj):
            counts["n"] += 1
            return real(obj)

        monkeypatch.setattr(leaf, "digest", counting)
        return counts

    return start


@pytest.fixture
def tmp_store(tmp_path, monkeypatch):
    """A fresh store for this test, used by every @memo function that has no store of its own."""
    path = tmp_path / "store"
    monkeypatch.setenv("MEMOLAB_STORE", str(path))
    old = config.settings()
    memolab.configure(store=str(path))
    yield path
    memolab.configure(store=old.store)


@pytest.fixture
def blob_results(monkeypatch):
    """Store every result in blob files, however small (tests about blob files:
    damage, deduplication, gc); subprocesses inherit it through the environment."""
    import memolab.store

    monkeypatch.setattr(memolab.store.local, "INLINE_MAX", 0)
    monkeypatch.setenv("MEMOLAB_INLINE_MAX", "0")
    yield


class Project:
    """A throw-away project directory with its own store; scripts run in fresh processes.

    ``preload`` (the ``preload`` mark of the test's module, for the ``project`` fixture): the
    third-party modules the runs' fork server has imported (tests/zygote.py says what such a
    child shares and when a run is a real start instead)."""

    def __init__(self, root: Path, preload: tuple[str, ...] = ()) -> None:
        self.preload = preload
        self.root = root
        self.store = root / ".memolab"
        root.mkdir(parents=True, exist_ok=True)
        (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")

    def write(self, rel: str, text: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        # Python caches bytecode by mtime (1 s resolution on some systems): make
        # sure an edit within the same second is never served stale bytecode.
        for pyc in self.root.rglob("__pycache__"):
            for f in pyc.iterdir():
                f.unlink()
        return p

    def env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of this project's runs: memolab from this checkout, the project's store."""
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join([SRC, str(self.root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
        e["MEMOLAB_STORE"] = str(self.store)
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        e.update(env or {})
        return e

    def start(self, *args: str, env: dict[str, str] | None = None, ready: str | None = None,
              bound: float = 60) -> subprocess.Popen:
        """A script started in a real process (to signal it, or to race it), its output piped; with
        ``ready``, once the file the script makes when it is ready exists (a bound against a hang,
        not a timing: past it the test fails with the script's output)."""
        p = subprocess.Popen([sys.executable, *args], cwd=self.root, env=self.env(env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        if ready is not None:
            deadline = time.monotonic() + bound
            while not (self.root / ready).exists():
                assert p.poll() is None and time.monotonic() < deadline, output_of(p)
                time.sleep(0.02)
        return p

    def run(self, *args: str, env: dict[str, str] | None = None, check: bool = True,
            timeout: float = HANG) -> subprocess.CompletedProcess:
        e = self.env(env)
        server = zygote.server(self.preload, e) if self.preload else None
        if server is not None and server.can_run(args, e):
            cp = server.run(args, self.root, e, timeout)
        else:
            cp = subprocess.run([sys.executable, *args], cwd=self.root, env=e, capture_output=True, text=True,
                                timeout=timeout)
        if check and cp.returncode != 0:
            raise AssertionError(f"{args} failed ({cp.returncode}):\nstdout:\n{cp.stdout}\nstderr:\n{cp.stderr}")
        return cp

    def run_json(self, *args: str, **kw) -> dict:
        """Run a script whose last stdout line is JSON."""
        cp = self.run(*args, **kw)
        return json.loads(cp.stdout.strip().splitlines()[-1])


@pytest.fixture
def project(tmp_path, request) -> Project:
    mark = request.node.get_closest_marker("preload")
    return Project(tmp_path / "proj", preload=tuple(mark.args) if mark else ())


_OTHER_USER_RUNTIME: dict[str, object] = {}


def other_user_python(*extra_modules: str) -> tuple:
    """``(python, pythonpath)`` with which a child run as another user (``setpriv`` to nobody) can
    import memolab and ``extra_modules``, wherever this checkout lives: from a private (0700) folder
    the checkout and its venv are not readable by that user, so memolab, its dependencies and the
    modules asked for are copied once per test process to a world-readable temporary folder, and the
    child runs the base interpreter (the venv's ``bin/python`` is only a link into the venv)."""
    import atexit
    import importlib.util
    import shutil
    import tempfile

    def reachable(path: str) -> bool:
        try:
            return all(os.stat(p).st_mode & 0o001 for p in [path, *Path(path).parents])
        except OSError:
            return False

    # this interpreter, else the system's of the same version (a pyenv build under a 0700 home is
    # out of reach; the copied extension modules are built for the version, not the build)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    python = next((c for c in candidates if reachable(c)), None)
    if python is None:
        skip_or_fail(f"no Python {version} other users can run ({', '.join(candidates)}), so no child can run as one")
    key = ",".join(sorted(extra_modules))
    if key not in _OTHER_USER_RUNTIME:
        root = Path(tempfile.mkdtemp(prefix="memolab-other-user-"))
        atexit.register(shutil.rmtree, root, True)
        tops = {"memolab", "xxhash", "blake3", *extra_modules}
        for top in sorted(tops):
            spec = importlib.util.find_spec(top)
            if spec is None or spec.origin is None:
                skip_or_fail(f"{top} is not importable here, so it cannot be given to another user's child")
            src = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)
            dst = root / src.name
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "tests"))
                libs = src.parent / f"{top}.libs"  # vendored shared libraries of a manylinux wheel (numpy)
                if libs.is_dir():
                    shutil.copytree(libs, root / libs.name)
            else:
                shutil.copy2(src, dst)
        for d, _, fs in os.walk(root):
            os.chmod(d, 0o755)
            for x in fs:
                os.chmod(os.path.join(d, x), 0o644)
        _OTHER_USER_RUNTIME[key] = str(root)
    return python, str(_OTHER_USER_RUNTIME[key])


# -- test files ordered longest first --------------------------------------------------------------
# ``make test`` runs two workers that take whole files (--dist loadfile, --no-loadscope-reorder);
# with the slowest files first, the run ends on short ones and neither worker idles long at its
# end (the longest-processing-time rule). The seconds per file are recorded by
# ``pytest --record-durations`` (a whole run writes tests/durations.json); a file not recorded
# yet is placed as a 10 s one.
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_configure(config):
    """(And Ctrl-C as Python's ``KeyboardInterrupt``: a pytest started in the background of a
    non-interactive shell, as ``cmd &`` or a CI runner's step may be, inherits SIGINT ignored,
    and Python installs no handler of its own then: every test of an interrupted call failed.)

    memolab's own modules compiled once, before any test runs: the suite starts a thousand
    fresh processes, each told not to write bytecode (a project file edited within the second
    must never be served stale bytecode), so without this each compiled memolab from source
    (0.1 s a process: the code-graph tests took twice as long)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config, "workerinput"):
        return  # the controller compiles, before the workers start
    import compileall

    try:
        compileall.compile_dir(os.path.join(SRC, "memolab"), quiet=2)
    except OSError:
        pass  # a checkout that cannot be written: the processes compile what they import


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help="write each test file's total seconds to tests/durations.json at the end")


def pytest_collection_modifyitems(config, items):
    try:
        seconds = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    order = {}
    for i, item in enumerate(items):
        order.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda it: (-float(seconds.get(it.nodeid.split("::")[0], 10.0)),
                               order[it.nodeid.split("::")[0]]))


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _recorded[report.nodeid.split("::")[0]] = _recorded.get(report.nodeid.split("::")[0], 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    zygote.close_all()
    if session.config.getoption("--record-durations") and not hasattr(session.config, "workerinput") and _recorded:
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(_recorded.items())}, indent=0) + "\n")
