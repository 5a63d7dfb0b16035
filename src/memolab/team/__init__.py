"""The team store: one cache shared on PostgreSQL + object storage.

Imported only when a remote is configured (``MEMOLAB_REMOTE`` /
``MEMOLAB_REMOTE_BLOBS``, ``memolab.configure(remote=..., remote_blobs=...)`` or
``[tool.memolab]`` in ``pyproject.toml``): without one, ``import memolab`` and the
local hit path never touch this package, nor psycopg or boto3.

- ``protocol``: the index interface both the local SQLite index and the team
  PostgreSQL index satisfy (one conformance suite runs against both).
- ``pg``: the PostgreSQL index (psycopg 3), its schema and explicit upgrades.
- ``blobs``: remote content-addressed blobs (S3 protocol, ``file://``, fsspec).
- ``layered``: the local store as a read-through, write-back cache in front of them.
- ``journal``: the upload queue in the local index and its background uploader.
"""
