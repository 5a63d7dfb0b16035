"""An S3-protocol server for the team-store tests: moto's standalone server.

``python -m moto.server -H 127.0.0.1 -p PORT`` runs as a subprocess (not
moto's in-process mock): the code under test talks HTTP to it exactly as it
would to a real bucket, and a test can stop it (the network is gone) and start
it again.

moto keeps everything in memory: **a restart empties it** (every bucket and
object is gone). ``s3_bucket`` creates a fresh bucket for each test, after
starting the server again if an earlier test left it stopped.

Fixtures:
- ``s3_server`` (session): the running ``S3Server`` (``endpoint``, ``stop()``,
  ``start()``, ``freeze()``/``thaw()`` (a hung server), ``client()``, ``make_bucket()``).
- ``s3_env`` (function): ``AWS_ENDPOINT_URL`` and dummy credentials/region in
  ``os.environ`` for one test (restored afterwards); subprocesses inherit them.
- ``s3_bucket`` (function): ``s3://<fresh bucket>/memolab`` with ``s3_env`` set.
"""
from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

ENV = {
    "AWS_ACCESS_KEY_ID": "memolab-test",
    "AWS_SECRET_ACCESS_KEY": "memolab-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """One moto server subprocess on 127.0.0.1; ``stop()``/``start()`` keep its port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="memolab-moto-", suffix=".log", delete=False)
        self._buckets = itertools.count()
        self._client: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {**ENV, "AWS_ENDPOINT_URL": self.endpoint}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (empty: moto keeps state in memory) and wait until it answers."""
        if self.running:
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(ENV)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited ({self.proc.returncode}); log: {self.log.name}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answers: up
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not start within {timeout:.0f} s; log: {self.log.name}")

    def stop(self) -> None:
        """Stop the server: connections are refused until ``start()``; its content is lost."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.thaw()  # a frozen process cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def freeze(self) -> None:
        """SIGSTOP the server: connections are accepted but never answered (a hung host);
        requests cost their read timeout. ``thaw()`` resumes it, content intact."""
        import signal

        if self.running:
            self.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]

    def thaw(self) -> None:
        import signal

        if self.running:
            self.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    def client(self) -> Any:
        """A plain boto3 S3 client of this server (tests tamper with objects behind memolab's back).
        One per server, made at first use: making one loads botocore's service model (~0.1 CPU-s,
        and every test with a bucket asks); a client is thread-safe, and its pool reconnects to a
        server started again on the same port."""
        if self._client is None:
            import boto3

            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name=ENV["AWS_DEFAULT_REGION"],
                aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"], aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])
        return self._client

    def make_bucket(self) -> str:
        """Create a fresh bucket (starting the server if stopped); returns its name."""
        self.start()
        name = f"memolab-test-{os.getpid()}-{next(self._buckets)}"
        self.client().create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    from conftest import require

    require("moto.server")  # under CI a missing moto is a failure, never a skip
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)  # a developer's own profile/endpoint must not leak in
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    return s3_server


@pytest.fixture
def s3_bucket(s3_env: S3Server) -> str:
    """``s3://<fresh bucket>/memolab``: empty, on a running server."""
    return f"s3://{s3_env.make_bucket()}/memolab"
