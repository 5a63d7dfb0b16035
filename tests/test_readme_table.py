"""The README's performance table is what benchmarks/readme_table.py makes from the committed
benchmarks/results/*.json (issue 56 §5): a figure cannot be edited by hand."""
from __future__ import annotations

import importlib.util
import json
import os
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


def test_the_store_size_table_of_the_performance_doc_is_generated_from_the_recorded_results():
    gen = _module("readme_table")
    doc = (ROOT / "docs" / "performance.md").read_text()
    assert gen.current(doc, gen.SCALING_BEGIN, gen.SCALING_END) == gen.render_scaling(), (
        "docs/performance.md's issue 52 §1 table differs from benchmarks/results/store_scaling.json: "
        "run `python benchmarks/readme_table.py --write`, never edit it by hand")


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


def test_a_slower_memolab_is_said_in_words_for_time_and_throughput_ratios():
    gen = _module("readme_table")
    assert gen.slower("3.1x (2.5–4.0)", "memolab / torch.load") == "**memolab / torch.load 3.1x (2.5–4.0): memolab slower**"
    assert gen.slower("0.93x (0.90–1.10)", "memolab / torch.save") == "memolab / torch.save 0.93x (0.90–1.10)"
    assert gen.faster_thr("0.86x (0.81–0.97)", "pull / raw GET") == "**pull / raw GET 0.86x (0.81–0.97): memolab slower**"
    assert gen.faster_thr("1.02x (0.97–1.05)", "pull / raw GET") == "pull / raw GET 1.02x (0.97–1.05)"


def test_record_keeps_what_a_script_printed_and_the_load_it_ran_under(tmp_path, monkeypatch):
    rec = _module("record")
    (tmp_path / "bench_x.py").write_text(
        "print('# x, 2 rounds')\nprint()\nprint('| case | memolab | peer | ratio |')\nprint('|---|---|---|---|')\n"
        "print('| hit | 1.0 (0.9–1.2) | 3.0 (2.9–3.3) | 3.0x (2.8–3.1) |')\nprint('| miss | 2.0 | 1.0 | 0.5x (0.4–0.6) |')\n")
    monkeypatch.setattr(rec, "HERE", tmp_path)
    monkeypatch.setattr(rec, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(sys, "argv", ["record.py", "bench_x.py", "--rounds", "2"])
    assert rec.main() == 0
    doc = json.loads((tmp_path / "results" / "bench_x.json").read_text())
    assert doc["command"] == "python benchmarks/bench_x.py --rounds 2"
    # the losing row is kept, with its range, as printed
    assert doc["tables"][0]["rows"] == [["hit", "1.0 (0.9–1.2)", "3.0 (2.9–3.3)", "3.0x (2.8–3.1)"],
                                        ["miss", "2.0", "1.0", "0.5x (0.4–0.6)"]]
    load = doc["load_average"]
    assert load["samples"] >= 2 and load["min"] <= load["median"] <= load["max"]
    assert load["min"] <= load["start"] <= load["max"] and load["min"] <= load["end"] <= load["max"]
    assert doc["cores"] == os.cpu_count()


def test_the_benchmarks_recorded_since_the_load_is_kept_say_it_and_the_table_quotes_it():
    gen = _module("readme_table")
    # recorded by record.py since it keeps the load (hit_overhead.json is re-recorded on the hit path's
    # branches; torch_first_hit.json is not quoted yet)
    for script in ("big_results", "store_scaling", "team_store", "hf_datasets", "hashing", "scalar_logging", "lineage"):
        doc = json.loads((ROOT / "benchmarks" / "results" / f"{script}.json").read_text())
        load = doc["load_average"]
        assert load["min"] <= load["max"]
        assert f"load average {load['min']}–{load['max']}" in gen.render()


def test_the_store_size_rows_compare_the_largest_store_with_the_smallest_in_the_same_rounds():
    gen = _module("readme_table")
    s = gen.Results("store_scaling")
    sizes = [h.removesuffix(" entries") for h in s.doc["tables"][0]["header"][1:]]
    rows = gen._scaling(s)
    assert rows and all(f"{sizes[-1]} stored" in r[0] and f"against {sizes[0]}" in r[0] for r in rows)
    # the ratio is the one measured within each round, with its range, never a ratio of medians
    ratios = next(t for t in s.doc["tables"] if t["title"].startswith("each size against"))
    hit = next(r for r in ratios["rows"] if r[0].startswith("hit read from the store, trivial"))
    assert hit[-1] in rows[0][3] and "(" in rows[0][3]
