"""Golden vectors: keys and the store format may not drift between releases (docs/hashing.md,
"Golden vectors").

Every digest is computed by ``tests/golden.py`` in ONE fresh process with a fixed environment, then
compared here with ``tests/data/golden/vectors.json``; the store fixtures under
``tests/data/golden/stores/`` are checked on copies in that same process.

After a deliberate change of the key format (a bumped ``KEY_SCHEMA``/``CODE_SCHEMA`` and a CHANGELOG
"Recomputed once" entry), regenerate with::

    python tests/golden.py --write
"""
from __future__ import annotations

import json

import golden
from conftest import require

BUMP = ("\nAn encoding changed: every user's stored result would silently miss (or, worse, an old row "
        "match a new value). If the change is deliberate, bump SCHEMA in src/memolab/hashing/primitives.py "
        "(h3 -> h4) for argument keys, or CODE_SCHEMA in src/memolab/codegraph/where.py (c3 -> c4) for code "
        "digests, write the CHANGELOG's \"Recomputed once after the upgrade\" entry saying why, then run "
        "`python tests/golden.py --write`. If it is not deliberate, it is a bug: fix the encoder.")


def test_digests_keys_and_stores_of_earlier_releases_do_not_drift():
    for module in ("numpy", "torch", "pandas", "omegaconf"):
        require(module)
    got = golden.run_in_subprocess()
    now, pinned = got["now"], json.loads(golden.VECTORS.read_text())
    schemas = (now["KEY_SCHEMA"], now["CODE_SCHEMA"])
    pinned_schemas = (pinned["KEY_SCHEMA"], pinned["CODE_SCHEMA"])

    moved = golden.differences(pinned, now)
    if schemas == pinned_schemas:
        assert not moved, "digests moved under the same schemas " + str(schemas) + ":\n  " + \
            "\n  ".join(moved) + BUMP
    else:
        # a bumped schema: the vectors are regenerated with it (the bump was the point)
        raise AssertionError(f"the schemas are {schemas}, the golden vectors were written under {pinned_schemas}: "
                             "after the bump and its CHANGELOG entry, run `python tests/golden.py --write` "
                             f"(it adds a store fixture for {schemas} and keeps the old one)")
    unpinned = [f"{part}[{name!r}]" for part in ("values", "code", "keys") for name in now[part]
                if name not in pinned[part]]
    # the vectors that hold Python's version (golden.PYTHON_DEPENDENT) are checked where pinned
    versioned = pinned.get("by_python", {}).get(now["python"])
    if versioned is not None:
        unpinned += [f"{part}[{name!r}] (Python {now['python']})" for part in ("values", "code")
                     for name in now["by_python"][now["python"]][part] if name not in versioned[part]]
    assert not unpinned, f"not pinned yet: {unpinned}; run `python tests/golden.py --write`"
    assert len(now["values"]) >= 50 and len(now["code"]) >= 3 and len(now["keys"]) >= 3
    assert pinned["by_python"], "no Python version's entry is pinned"

    # the store fixtures: each read without loss; the current schemas' one hit, older ones miss by design
    fixtures = {s["fixture"]: s for s in got["stores"]}
    assert f"{schemas[0]}+{schemas[1]}" in fixtures, \
        f"no store fixture written by this schema pair {schemas}: run `python tests/golden.py --write`"
    for name, s in fixtures.items():
        assert not s["problems"], f"store fixture {name} ({'current' if s['current'] else 'older'} schemas):\n  " + \
            "\n  ".join(s["problems"]) + ("" if not s["current"] else BUMP)
        assert s["store_schema_after"] >= s["store_schema_before"]


def test_the_vectors_name_what_moved():
    """The failure message names each moved vector and, for code, the dependencies that moved."""
    pinned = {"values": {"int 0": "a"}, "code": {"f": "x"}, "code_deps": {"f": {"m:f": "1", "m:g": "2"}},
              "keys": {}}
    now = {"values": {"int 0": "b", "new": "c"}, "code": {"f": "y"}, "code_deps": {"f": {"m:f": "1", "m:g": "3"}},
           "keys": {}, "python": "3.11", "by_python": {"3.11": {"values": {}, "code": {}}}}
    assert golden.differences(pinned, now) == [
        "values['int 0']: pinned a, now b", "code['f']: pinned x, now y (dependencies that moved: ['m:g'])"]
