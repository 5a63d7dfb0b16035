"""A small file read whole with ``os.read`` on one descriptor.

A file object's set-up (a buffered reader, its ``fstat``, ``ioctl`` and ``lseek``) costs more
than the read for the small files a fresh process's first call reads: the workspace's
``pyproject.toml`` (``config``), the mount table (``store.mounts``), a script's source and the
code cache's entries (``codegraph.code_cache``).
"""
from __future__ import annotations

import os

__all__ = ["read_fd", "read_bytes"]


def read_fd(fd: int) -> bytes:
    """Everything left to read from ``fd``, to its end (a ``/proc`` file's size says 0)."""
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def read_bytes(path: str) -> bytes:
    """The bytes of ``path``, through one descriptor. Raises as ``open`` does."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        return read_fd(fd)
    finally:
        os.close(fd)
