"""The README's performance table is what benchmarks/readme_table.py makes from the committed
benchmarks/results/*.json (issue 56 §5): a figure cannot be edited by hand."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_table_is_generated_from_the_recorded_results():
    gen = _module("readme_table")
    readme = (ROOT / "README.md").read_text()
    assert gen.current(readme) == gen.render(), (
        "README.md's performance table differs from benchmarks/results/*.json: "
        "run `python benchmarks/readme_table.py --write` (after benchmarks/record.py), never edit it by hand")


def test_every_quoted_script_has_its_recorded_results_and_says_where_they_come_from():
    gen = _module("readme_table")
    for script, _ in gen.SECTIONS:
        doc = json.loads((ROOT / "benchmarks" / "results" / f"{script}.json").read_text())
        assert (ROOT / doc["script"]).is_file() and doc["command"].startswith(f"python benchmarks/{script}.py")
        assert "shared 2-core" in doc["machine"] and "ratios" in doc["machine"]
        assert doc["tables"] and all(t["rows"] for t in doc["tables"])


def test_record_reads_a_scripts_tables_and_notes():
    rec = _module("record")
    text = "# run\n\n### Speed\n\n| a | b |\n|---|---:|\n| x | 1.0 (0.9–1.1) |\n\nchose 2 threads\n"
    assert rec.tables(text) == [{"title": "### Speed", "header": ["a", "b"], "rows": [["x", "1.0 (0.9–1.1)"]]}]
    assert rec.notes(text) == ["# run", "### Speed", "chose 2 threads"]


def test_a_loss_is_said_in_words():
    gen = _module("readme_table")
    assert gen.faster("0.2x (0.0–1.3)", "joblib") == "**joblib / memolab 0.2x (0.0–1.3): memolab slower**"
    assert gen.faster("3.2x (3.2–3.6)", "joblib") == "joblib / memolab 3.2x (3.2–3.6)"
