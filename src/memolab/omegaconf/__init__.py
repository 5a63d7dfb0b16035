"""OmegaConf and Hydra configs (docs/hashing.md, "Configs: OmegaConf and Hydra").

* ``keys``: a ``DictConfig``/``ListConfig`` is keyed by what a function reading it
  sees: its resolved values, their types and its structure (a structured config's
  dataclass by code), never by OmegaConf's internals (the text of an interpolation,
  the resolver cache). Registered through ``memolab/settings/hooks.py`` the first time an
  OmegaConf type is hashed: importing ``memolab`` imports no OmegaConf.
"""
