"""A fork server for the tests' fresh processes that import heavy third-party libraries.

Most end-to-end tests run a script in a new process, several times, and most of those
scripts import torch: about 2 s of CPU each on this project's 2 cores, before a line of
memolab runs. A test module that opts in with ``pytestmark = pytest.mark.preload("torch",
"numpy")`` gets its ``project.run`` children forked from a server process that has imported
those libraries and nothing else. What makes such a child a fresh process for what the
tests check:

- memolab, the user's script and its modules are imported by the child itself: nothing of
  memolab (its caches, its patches, its store handles) exists before the script runs;
- the script runs as ``__main__`` in a module of its own with ``sys.argv``, ``sys.path``
  (its folder, then ``PYTHONPATH``), the working directory and the environment the test
  gave, and the child leaves as an interpreter does: non-daemon threads joined, then the
  ``atexit`` functions, then the streams flushed;
- what ``multiprocessing`` took at import is the run's: ``ORIGINAL_DIR`` (its working
  directory), the main process's ``authkey`` (random in each process), and ``sys.orig_argv``;
- the global generators get fresh entropy as at a real start: ``random`` reseeds after
  every fork by itself, numpy's and torch's default generators are reseeded here (a
  real start seeds both from the operating system; the server's seeds would otherwise be
  shared by every child, and a test of unseeded generators could pass by accident), and so
  are the generators a preloaded library makes for itself at import (``_SEEDED_AT_IMPORT``:
  datasets' random fingerprints were equal in every child).

``python -m module ...`` runs as the interpreter runs it (``runpy``: the module's spec, its file
as ``sys.argv[0]``, the working directory first on ``sys.path``).

What a child shares with its server: the interpreter and its options (a run whose first
argument starts with ``-``, other than ``-m module``, is a real ``subprocess.run``), the hash seed (children share the
server's; hash-order dependence is caught by the golden digests, computed under each pytest
process's own random seed), and the environment the preloaded libraries and the interpreter
read at start (``TORCH*``, ``OMP_*``, ``CUDA_*``, ``PYTHON*`` …): a run that sets other values
forks from a server started with them. Tests of what a process imports, or of memolab
imported before torch, must not opt in: the preloaded modules are in ``sys.modules`` first
(``@pytest.mark.preload()`` on a test of a marked file gives it real starts).

``MEMOLAB_TEST_NO_FORK_SERVER=1`` turns the server off (every run a real start), to compare.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: environment variables whose value a preloaded library may have read at import
#: (``PYTHON*``: the interpreter's own start-up options, the hash seed among them)
_READ_AT_IMPORT = ("TORCH", "PYTORCH", "OMP_", "MKL", "KMP_", "CUDA", "NUMPY", "OPENBLAS", "GOTO", "NVIDIA",
                   "LD_", "PYTHON", "HF_", "TOKENIZERS", "TRANSFORMERS", "ARROW")
#: what a child reads itself, as a real start would
_READ_BY_THE_CHILD = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}


def _send(sock: socket.socket, obj: object, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    msg = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], fds)
    else:
        sock.sendall(msg)


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[object, list[int]]:
    fds: list[int] = []
    head = b""
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, with_fds)
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            raise EOFError("the fork server closed the connection")
        head += more
    (n,) = struct.unpack("!I", head)
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise EOFError("the fork server closed the connection")
        data += more
    return json.loads(data), fds


class ForkServer:
    """One per pytest process and set of preloaded modules, started at its first run."""

    def __init__(self, preload: tuple[str, ...], env: dict[str, str]) -> None:
        self.preload = preload
        self.dir = tempfile.mkdtemp(prefix="memolab-fork-server-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(env)
        self.proc = subprocess.Popen([sys.executable, __file__, self.path, *preload], env=self.env,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the fork server preloading {preload} exited ({self.proc.returncode})")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the fork server preloading {preload} did not start in 120 s")
            time.sleep(0.02)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def can_run(self, args: tuple[str, ...], env: dict[str, str]) -> bool:
        """``script.py ...`` or ``-m module ...``, started with the server's import-time variables."""
        if args[:1] == ("-m",) and len(args) > 1 and not args[1].startswith("-"):
            return _at_import(env) == _at_import(self.env)
        if not args or args[0].startswith("-") or not args[0].endswith(".py"):
            return False
        return _at_import(env) == _at_import(self.env)

    def run(self, args: tuple[str, ...], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                open(os.devnull, "rb") as devnull, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(self.path)
            _send(s, {"argv": list(args), "cwd": str(cwd), "env": env}, [devnull.fileno(), out.fileno(), err.fileno()])
            (pid,), _ = _recv(s)  # type: ignore[misc]
            s.settimeout(timeout)
            try:
                status, _ = _recv(s)
            except TimeoutError:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out.seek(0)
                err.seek(0)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout, out.read(), err.read()) from None
            out.seek(0)
            err.seek(0)
            cp = subprocess.CompletedProcess([sys.executable, *args], int(status),  # type: ignore[call-overload]
                                             out.read().decode(errors="replace"), err.read().decode(errors="replace"))
            cp.pid = pid  # type: ignore[attr-defined]  # its process group's id too (what it left: killpg)
            return cp

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


def _at_import(env: dict[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in env.items() if k.startswith(_READ_AT_IMPORT) and k not in _READ_BY_THE_CHILD)


#: ``random.Random`` instances a preloaded library makes at import, unseeded (so from the OS
#: at a real start): reseeded in each child, else every child would draw the server's numbers
#: (datasets' random fingerprints of transforms it cannot hash: equal in two runs)
_SEEDED_AT_IMPORT = (("datasets.fingerprint", "fingerprint_rng"),)

_SERVERS: dict[tuple[tuple[str, ...], frozenset[tuple[str, str]]], ForkServer] = {}
#: servers kept per pytest process (each holds the preloaded libraries' memory)
_MAX_SERVERS = 3


def server(preload: tuple[str, ...], env: dict[str, str]) -> ForkServer | None:
    """The fork server for ``preload`` started with ``env``'s import-time variables (None when
    turned off): a test that sets ``OMP_NUM_THREADS`` gets a server that imported torch with it."""
    if os.environ.get("MEMOLAB_TEST_NO_FORK_SERVER") == "1":
        return None
    key = (preload, _at_import(env))
    s = _SERVERS.get(key)
    if s is None or not s.alive():
        while len(_SERVERS) >= _MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        s = _SERVERS[key] = ForkServer(preload, env)
    return s


def run(args: tuple[str, ...] | list[str], cwd: Path | str, env: dict[str, str], preload: tuple[str, ...],
        timeout: float) -> subprocess.CompletedProcess:
    """``python *args`` in ``cwd`` with ``env`` (its output captured as text), forked from the
    server for ``preload`` where it can be (else, or with the server off, a real start): for the
    tests' own helpers that run scripts without ``Project.run``."""
    s = server(tuple(preload), env) if preload else None
    if s is not None and s.can_run(tuple(args), env):
        return s.run(tuple(args), Path(cwd), env, timeout)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def close_all() -> None:
    for s in _SERVERS.values():
        s.close()
    _SERVERS.clear()


# -- the server side ------------------------------------------------------------------


def _child(req: dict, fds: list[int]) -> None:
    """Become the run: never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # a timeout kills the run and whatever it started
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        argv = req["argv"]
        module = argv[1] if argv[0] == "-m" else None  # ``python -m module ...``: as runpy runs it
        script = os.path.abspath(argv[0])
        extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd() if module else os.path.dirname(script), *extra, *_BASE_PATH]
        sys.argv[:] = argv[1:] if module else argv  # (-m: argv[0] becomes the module's file below)
        sys.orig_argv = [sys.orig_argv[0], *argv]  # (the server's own otherwise)
        mp = sys.modules.get("multiprocessing.process")
        if mp is not None:  # what it took at import in the server: its folder, its key
            mp.ORIGINAL_DIR = os.getcwd()  # (spawned workers resolve the main script's path from it)
            mp.current_process().authkey = os.urandom(32)
        sys.dont_write_bytecode = req["env"].get("PYTHONDONTWRITEBYTECODE", "") != ""
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if "torch" in sys.modules:
            sys.modules["torch"].seed()
        for owner, name in _SEEDED_AT_IMPORT:  # their own generators, seeded from the OS at import
            if owner in sys.modules:
                getattr(sys.modules[owner], name).seed()
        import builtins
        import importlib.machinery
        import types
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        try:
            if module is None:
                main.__file__ = script
                main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
                main.__spec__ = None
                with open(script, "rb") as f:
                    # dont_inherit: not this file's ``from __future__ import annotations`` (the
                    # script's own flags only: its functions' code and annotations as at a real start)
                    program = compile(f.read(), script, "exec", dont_inherit=True)
            else:
                import runpy
                try:
                    _, spec, program = runpy._get_module_details(module, runpy._Error)  # type: ignore[attr-defined]
                except runpy._Error as e:  # type: ignore[attr-defined]  # as the interpreter reports it
                    print(f"{sys.executable}: {e}", file=sys.stderr)
                    raise SystemExit(1) from None
                sys.argv[0] = spec.origin
                main.__file__, main.__spec__, main.__loader__ = spec.origin, spec, spec.loader
                main.__package__, main.__cached__ = spec.parent, spec.cached  # type: ignore[attr-defined]
            sys.modules["__main__"] = main
            exec(program, main.__dict__)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the interpreter prints any uncaught exception, as here
            import traceback
            traceback.print_exc()
            code = 1
        import atexit
        import threading
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does at exit, in its order
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream at exit is the script's business
                pass
        os._exit(code)


def _serve(path: str) -> None:
    import select
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the client waits for the name: bound and listening by then
    while True:
        if not select.select([listener], [], [], 1.0)[0]:
            if os.getppid() != parent:  # the pytest process is gone (killed): so is the server
                os._exit(0)
            continue
        conn, _ = listener.accept()
        try:
            req, fds = _recv(conn, with_fds=3)
        except (OSError, EOFError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:  # the waiter: forks the run, reports its pid and then its exit status
            try:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                pid = os.fork()
                if pid == 0:
                    conn.close()
                    _child(req, fds)  # type: ignore[arg-type]
                try:
                    os.setpgid(pid, pid)  # also here: a timeout may come before the child's own call
                except OSError:
                    pass
                for fd in fds:
                    os.close(fd)
                _send(conn, [pid])
                _, status = os.waitpid(pid, 0)
                _send(conn, os.waitstatus_to_exitcode(status))
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        conn.close()


if __name__ == "__main__":
    _BASE_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    for name in sys.argv[2:]:
        __import__(name)
    _serve(sys.argv[1])
