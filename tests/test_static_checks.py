"""`make lint` (run by `make test`, the README's and CI's command) checks what pyproject.toml
configures, with tools pinned there, and the public API stays under mypy's strict flags.

Read from the files, not run: `make test` runs the checks themselves before pytest."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 has no tomllib
    tomllib = None

pytestmark = pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs tomllib (Python 3.11+)")

#: modules whose names `memolab` and the integration packages export, and the store's API:
#: no mypy override may relax them
PUBLIC = ("memolab", "memolab.calls.memo", "memolab.settings.config", "memolab.errors", "memolab.hashing.files",
          "memolab.ui.runs",
          "memolab.hashing", "memolab.hashing.registry", "memolab.hashing.encoder", "memolab.store",
          "memolab.store.protocols", "memolab.store.sqlite", "memolab.tracking.log", "memolab.tracking.writer",
          "memolab.ui", "memolab.ui.notebook", "memolab.torch", "memolab.torch.checkpoint", "memolab.torch.iteration",
          "memolab.lightning", "memolab.lightning.logger", "memolab.ray", "memolab.hf", "memolab.omegaconf",
          "memolab.pandas", "memolab.transformers", "memolab.handles")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_linters_are_pinned_in_the_dev_extra():
    dev = _pyproject()["project"]["optional-dependencies"]["dev"]
    for tool in ("ruff", "mypy"):
        pins = [r for r in dev if re.match(rf"{tool}\s*==\s*\d", r)]
        assert pins, f"{tool} is not pinned (==) in the dev extra: a new release would change what `make lint` finds"


def test_make_test_runs_lints_checks_and_fails_on_either_and_ci_runs_make_test():
    """``make test`` runs ``make lint``'s two checks: ruff before the tests, mypy beside them (its
    minute of one core fills the cores the tests leave idle); either failing fails the target."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", make, re.M)
    assert lint, "no `lint` target in the Makefile"
    assert "-m ruff check" in lint.group(1) and "-m mypy" in lint.group(1)
    for path in ("src", "tests", "benchmarks", "stress"):
        assert re.search(rf"^LINT_PATHS\s*:?=.*\b{path}\b", make, re.M), f"`make lint` does not check {path}/"
    test = re.search(r"^test:.*\n((?:\t.*\n)+)", make, re.M)
    assert test, "no `test` target in the Makefile"
    recipe = test.group(1)
    assert "$(PY) -m ruff check $(LINT_PATHS)" in recipe and "$(PY) -m mypy" in recipe and "-m pytest" in recipe
    assert recipe.index("-m ruff check") < recipe.index("-m pytest"), "ruff (half a second) runs before the tests"
    assert re.search(r"\[ \$\$tests -eq 0 \] && \[ \$\$lint -eq 0 \]\s*$", recipe), \
        "`make test` must fail when the tests or mypy fail"
    assert re.search(r"^\s*make test\s*$", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), re.M)


def test_mypy_is_strict_and_no_override_relaxes_the_public_api():
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["strict"] is True and mypy["files"] == ["src/memolab"]
    relaxing = ("disallow_any_generics", "warn_return_any", "disallow_untyped_defs", "disallow_untyped_calls",
                "ignore_errors", "implicit_reexport", "disable_error_code", "check_untyped_defs")
    for o in mypy.get("overrides", []):
        mods = [o["module"]] if isinstance(o["module"], str) else o["module"]
        if not any(k in o for k in relaxing):
            continue
        for m in mods:
            assert not m.startswith("memolab.*") and m != "memolab.*", f"an override relaxes every module: {m}"
            assert m not in PUBLIC, f"an override relaxes {m}, part of the public API"


def test_the_package_ships_its_types():
    assert (ROOT / "src" / "memolab" / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["memolab"]
