"""The machine's samples (sys/cpu, sys/memory: never asked for) come after what the runs found, in
`memolab show` and notebooks' tables, as in the dashboard (issue 54)."""
from __future__ import annotations

from types import SimpleNamespace

from memolab.cli.run_commands import print_tags
from memolab.ui import display


def test_show_lists_the_runs_own_scalars_first_and_sys_on_a_line_of_its_own(capsys):
    print_tags({"scalar": ["sys/cpu", "sys/memory", "train/loss", "val/acc"], "text": []},
               {"sys/cpu": 50.0, "sys/memory": 1e9, "train/loss": 0.25, "val/acc": 0.9})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "  logs:"
    assert lines[1].startswith("    scalars: train/loss = 0.25, val/acc = 0.9") and "sys/" not in lines[1]
    assert lines[2].startswith("    system (sys/): sys/cpu = 50")


def test_a_notebooks_runs_table_leaves_sys_out_unless_nothing_else_was_logged():
    run = lambda **m: SimpleNamespace(metrics=m)  # noqa: E731
    every = [run(**{"sys/cpu": 1.0, "sys/memory": 2.0, "val/loss": 0.1}), run(**{"sys/cpu": 1.0, "sys/memory": 2.0})]
    assert display.metric_columns(every) == ["val/loss"]
    assert display.metric_columns([run(**{"sys/cpu": 1.0})]) == ["sys/cpu"]
