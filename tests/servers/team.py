"""The team store for a test: both set-ups a team can use, behind one interface.

- ``LocalTeam``: a SQLite team index + a ``file://`` blob folder (the one-host option).
- ``PgS3Team``: PostgreSQL (``servers.postgres``) + moto S3 (``servers.s3``): the team set-up.

Both have ``env`` (``MEMOLAB_REMOTE``, ``MEMOLAB_REMOTE_BLOBS`` and, for S3, the AWS
variables: give it to subprocesses), ``down()``/``up()`` (the team store unreachable /
back; moto forgets its objects on a restart, ``up()`` re-creates the bucket), ``hits()``
(args digest -> team hit count) and ``corrupt_blob(digest)``.

The ``team`` fixture is parametrized over both (``team.name``); where PostgreSQL or moto
are missing the PostgreSQL variant is skipped (a failure under ``CI``, as their fixtures say).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


class LocalTeam:
    """The one-host team store: SQLite index + file:// blobs. ``down()`` makes both unreachable."""

    name = "sqlite+file"

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "team").mkdir(parents=True)
        self.env = {"MEMOLAB_REMOTE": f"sqlite://{root}/team/index.sqlite",
                    "MEMOLAB_REMOTE_BLOBS": f"file://{root}/team/blobs"}
        (root / "team" / "blobs").mkdir()

    def down(self) -> None:
        os.rename(self.root / "team", self.root / "team.away")

    def up(self) -> None:
        os.rename(self.root / "team.away", self.root / "team")

    def hits(self) -> dict[str, int]:
        import sqlite3

        with sqlite3.connect(self.root / "team" / "index.sqlite") as c:
            return dict(c.execute("SELECT args, hits FROM evaluations"))

    def blob_files(self) -> list[Path]:
        return [p for p in (self.root / "team" / "blobs").rglob("*") if p.is_file()]

    def corrupt_blob(self, digest: str) -> None:
        p = [b for b in self.blob_files() if b.name.endswith(digest)][0]
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        os.chmod(p, 0o644)
        p.write_bytes(bytes(data))


class PgS3Team:
    """PostgreSQL (tests/servers/postgres.py) + moto S3 (tests/servers/s3.py): the team set-up.

    ``down()`` stops both servers; ``up()`` starts them again. moto keeps its objects
    in memory, so after ``up()`` the bucket is created again, empty: results already
    used stay local, results uploaded after it are found."""

    name = "postgresql+s3"

    def __init__(self, pg, s3, dsn: str, bucket_url: str) -> None:
        self.pg, self.s3 = pg, s3
        self.bucket = bucket_url[len("s3://"):].split("/", 1)[0]
        self.prefix = bucket_url[len("s3://"):].split("/", 1)[1]
        self.env = {"MEMOLAB_REMOTE": dsn, "MEMOLAB_REMOTE_BLOBS": bucket_url, **s3.env}

    def down(self) -> None:
        self.pg.stop()
        self.s3.stop()

    def up(self) -> None:
        self.pg.start()
        self.s3.start()
        self.s3.client().create_bucket(Bucket=self.bucket)

    def hits(self) -> dict[str, int]:
        import psycopg

        with psycopg.connect(self.env["MEMOLAB_REMOTE"]) as c:
            return dict(c.execute("SELECT args, hits FROM memolab_evaluations").fetchall())

    def corrupt_blob(self, digest: str) -> None:
        c = self.s3.client()
        key = f"{self.prefix}/blobs/{digest[:2]}/{digest}"
        data = bytearray(c.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        c.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))


@pytest.fixture(params=["postgresql+s3", "sqlite+file"])
def team(request, tmp_path):
    if request.param == "sqlite+file":
        return LocalTeam(tmp_path)
    pg = request.getfixturevalue("postgres_server")
    dsn = request.getfixturevalue("postgres_dsn")
    bucket = request.getfixturevalue("s3_bucket")
    return PgS3Team(pg, request.getfixturevalue("s3_server"), dsn, bucket)


@pytest.fixture
def pg_team(request):
    """The PostgreSQL + S3 team store only: for what a SQLite team index does not carry (logs)."""
    return PgS3Team(request.getfixturevalue("postgres_server"), request.getfixturevalue("s3_server"),
                    request.getfixturevalue("postgres_dsn"), request.getfixturevalue("s3_bucket"))
