"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package, on loopback.

``initdb`` + ``pg_ctl`` in a temporary directory, trust authentication, listening
on 127.0.0.1 on a free port and nowhere else (no unix socket: nothing in
/var/run is touched, a system PostgreSQL is left alone). PostgreSQL refuses to
run as root, so under root the server runs as the ``postgres`` user of the
Debian package (or ``memolab-pg``, created if neither exists).

Fixtures (registered by ``tests/conftest.py``):

- ``postgres_server`` (session): the ``PgServer``: ``dsn(db)``, ``new_database()``,
  ``stop()`` / ``start()`` (the offline scenarios stop the team store), ``running``.
- ``postgres_dsn``: a fresh, empty database for one test (``CREATE DATABASE …
  TEMPLATE template0``, a few ms), dropped afterwards; the server is (re)started
  around it if a test stopped it.

Where the binaries or psycopg are missing the tests are skipped, except under
``CI=true``, where that is a failure (``make system-deps`` installs the package).
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: the OS user the server runs as when the tests run as root
_USERS = ("postgres", "memolab-pg")


def _unavailable(reason: str) -> None:
    from conftest import skip_or_fail

    skip_or_fail(f"PostgreSQL not available: {reason} (make system-deps installs it)")


def find_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: Debian's newest version, else PATH."""
    def version(p: str) -> list[int]:
        m = re.search(r"/postgresql/([\d.]+)/bin", p)
        return [int(x) for x in m.group(1).split(".") if x] if m else [0]

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl", path=str(Path(initdb).parent)):
        return Path(initdb).parent
    return None


def _server_user() -> pwd.struct_passwd | None:
    """None when not root (the server runs as us); else an unprivileged user, created if needed."""
    if os.geteuid() != 0:
        return None
    for name in _USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _USERS[1]],
                   check=True, capture_output=True)
    return pwd.getpwnam(_USERS[1])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One PostgreSQL cluster in a temporary directory; see the module docstring."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="memolab-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._up = False
        self._names = itertools.count(1)
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--locale=C", "--no-sync", "--no-instructions")

    # -- processes ----------------------------------------------------------------------------
    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        kw: dict[str, object] = {}
        if self.user is not None:
            kw = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["HOME"] = str(self.root)
        cp = subprocess.run([str(self.bindir / tool), *args], cwd=self.root, env=env, capture_output=True,
                            text=True, timeout=120, **kw)  # type: ignore[call-overload]
        if check and cp.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}\n{log}")
        return cp

    def _options(self) -> str:
        # loopback only, no unix socket; durability off (a test server: speed, not crash safety)
        opts = {"listen_addresses": "'127.0.0.1'", "port": str(self.port), "unix_socket_directories": "''",
                "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                "max_connections": "200", "shared_buffers": "32MB", "log_min_messages": "warning"}
        return " ".join(f"-c {k}={v}" for k, v in opts.items())

    @property
    def running(self) -> bool:
        return self._up

    def start(self) -> None:
        """Start the server (on the same port as before, so DSNs handed out stay valid)."""
        first = self.port == 0
        for attempt in range(5):
            if first:
                self.port = _free_port()
            cp = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                           "-o", self._options(), "start", check=False)
            if cp.returncode == 0:
                self._up = True
                return
            if not first and attempt < 4:  # the port may still be in TIME_WAIT/used: retry a moment later
                time.sleep(0.5)
        raise RuntimeError(f"pg_ctl start failed:\n{cp.stdout}\n{cp.stderr}\n"
                           f"{self.log.read_text(errors='replace')[-3000:] if self.log.exists() else ''}")

    def stop(self) -> None:
        """Stop the server now (``-m fast``: open sessions are ended, as when a server goes away)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop", check=False)
        self._up = False

    def crash(self) -> None:
        """Stop the server the hard way (``-m immediate``: every process quits at once, no
        checkpoint; the next start recovers from the WAL, as after a power cut of the server)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop", check=False)
        self._up = False

    def ensure_running(self) -> None:
        if not self.running:
            self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ------------------------------------------------------------------------------
    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction as the superuser (CREATE/DROP DATABASE)."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as c:
            c.execute(sql)

    def new_database(self) -> str:
        """A fresh empty database; returns its DSN."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        try:  # FILE_COPY (PostgreSQL 15+): 25 ms instead of 100 with fsync off
            self.admin(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY")
        except psycopg.errors.SyntaxError:
            self.admin(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {dsn.rsplit('/', 1)[1]} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    bindir = find_bin()
    if bindir is None:
        _unavailable("no initdb/pg_ctl (Debian package `postgresql`)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'psycopg[binary]', the dev extra)")
    server = PgServer(bindir)  # type: ignore[arg-type]
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_dsn(postgres_server: PgServer) -> Iterator[str]:
    postgres_server.ensure_running()
    dsn = postgres_server.new_database()
    yield dsn
    postgres_server.ensure_running()
    postgres_server.drop_database(dsn)
