"""Hugging Face ``transformers`` objects keyed by their content (docs/hashing.md, "transformers").

* ``keys``: models, generation configs, fast tokenizers and ``TrainingArguments`` keyed
  by what the library declares to be their content, never by values salted per
  process or filled in as they are used. Registered through ``memolab/settings/hooks.py`` the
  first time a ``transformers`` type is hashed: importing ``memolab`` imports no
  transformers.
"""
