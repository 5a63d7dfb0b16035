"""pandas, keyed by content (docs/hashing.md, "DataFrames and estimators").

* ``keys``: what pandas fills in as an object is used (its ``_cache`` of derived
  properties) is left out of keys. Registered through ``memolab/settings/hooks.py`` the first
  time a pandas type is hashed: importing ``memolab`` imports no pandas.
"""
