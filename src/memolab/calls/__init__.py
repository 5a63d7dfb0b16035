"""A call: the ``@memo`` decorator, the life of one call (``lifecycle``: decisions without
I/O; ``call``: each step), what a call says (``report``), why it missed (``explain``),
accepting a code change (``acceptance``).
"""
