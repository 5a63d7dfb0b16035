"""Hugging Face ``datasets``, first class (docs/hf.md).

Registered from the outside, by dotted path (``memolab.settings.hooks``): importing
``memolab`` imports neither ``datasets`` nor ``pyarrow``. One module per job:

* ``keys``: a dataset's key is its Arrow data by content (``memolab.arrow.keys``),
  computed once per underlying Arrow table and reused (identity cache), with
  memory-mapped files stamped so a rewritten file is rehashed;
* ``store``: a dataset returned by a memoized function is stored as its Arrow
  data (out-of-band, content-addressed buffers), never as paths into HF's cache;
* ``cache``: inside a memoized computation, HF's own cache lookups (``.map``
  and the other fingerprinted transforms) are named with memolab's code digest,
  so a recomputation runs the current code.
"""
