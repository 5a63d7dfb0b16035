"""Settings: every ``MEMOLAB_*`` setting, the short text of values, progress bars, and
``hooks``, the table of who handles what by dotted path. The lowest layer: it imports
no other layer (docs/architecture.md).
"""
