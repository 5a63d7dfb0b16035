"""Rules of the suite itself: a missing tool or dependency fails under CI instead of skipping
(conftest.skip_or_fail / require / require_tool), and what the tests import is pinned."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import conftest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: the skips that are not a missing tool: the platform's, and the one skip CI allows (no GPU there)
ALLOWED_SKIPIF = ("no CUDA device", "POSIX signals", "needs fork", "not Linux", "tomllib (Python 3.11+)",
                  "dict version tags")


def _test_sources():
    for p in sorted([*TESTS.glob("*.py"), *TESTS.glob("servers/*.py")]):
        if p.name not in ("conftest.py", "test_suite_rules.py"):
            yield p, p.read_text(encoding="utf-8")


def test_no_test_skips_but_through_the_ci_helper():
    bad = []
    for p, src in _test_sources():
        for n, line in enumerate(src.splitlines(), 1):
            if re.search(r"pytest\.(importorskip|skip)\(", line):
                bad.append(f"{p.name}:{n}: {line.strip()}")
            if "skipif(" in line:
                window = " ".join(src.splitlines()[n - 1:n + 2])
                if not any(a in window for a in ALLOWED_SKIPIF):
                    bad.append(f"{p.name}:{n}: {line.strip()}")
    assert not bad, ("skip only through conftest.skip_or_fail / require / require_tool (a failure under CI):\n  "
                     + "\n  ".join(bad))


def test_under_ci_a_missing_module_or_tool_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required under CI"):
        conftest.require("memolab_no_such_module")
    with pytest.raises(pytest.fail.Exception, match="required under CI"):
        conftest.require_tool("memolab-no-such-tool")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        conftest.require("memolab_no_such_module")


def _required_modules() -> set[str]:
    found = set()
    for _, src in _test_sources():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value.split(".")[0])
    return found


def test_every_module_the_tests_require_is_pinned_in_the_dev_extra():
    import importlib.metadata as md

    tomllib = conftest.require("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]

    def name(req: str) -> str:
        return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")

    declared = {name(r) for r in extras["dev"] + extras["torch"] + project["dependencies"]}
    dists = md.packages_distributions()
    missing = []
    for module in sorted(_required_modules()):
        if module in ("tomllib",):
            continue  # the standard library's
        owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        if not owners & declared:
            missing.append(f"{module} (from {sorted(owners) or 'nothing installed'})")
    assert not missing, f"modules the tests require but the dev extra does not pin: {missing}"


def test_no_assertion_message_waits_for_a_running_process():
    """``assert p.poll() is None and time.monotonic() < deadline, p.communicate()``: when the deadline
    is what failed, the message waits for a process still running (one waiting on the test's go, in
    the census: over an hour). Such a message uses ``conftest.output_of``, which kills it first."""
    pattern = re.compile(r"assert .*\bdeadline\b.*,.*\.communicate\(")
    bad = [f"{p.name}:{n}" for p, src in _test_sources() for n, line in enumerate(src.splitlines(), 1)
           if pattern.search(line)]
    assert bad == [], bad
