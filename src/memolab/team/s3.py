"""Moved to ``memolab.team.blobs.s3`` (one module per backend); this name keeps working."""
from .blobs.s3 import S3Blobs  # noqa: F401
