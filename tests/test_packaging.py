"""memolab installed as users install it: the wheel and sdist a release is built from (issue 38).

The project's files are copied to a temporary tree and built there with ``python -m build``
(``--no-isolation``: the build backend is the pinned one of the dev extra, nothing is
downloaded); the wheel is installed, not editable, into a fresh venv that cannot see the
checkout, and used there in fresh processes: import, a memoized call that hits in a second
process, the console script, the dashboard's files. Its dependencies are given to the venv as
installed distributions (their files and metadata, as a wheelhouse would give them), so pip
resolves them offline and `pip check` reads their metadata like any other.
"""
from __future__ import annotations

import email
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import memolab
from conftest import require

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "memolab"
SHIPPED = ["pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in"]

pytestmark = pytest.mark.slow


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MEMOLAB_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def source_files() -> list:
    """The package's files a wheel must carry: every module and every dashboard file."""
    out = []
    for p in PACKAGE.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith((".pyc", ".pyo")):
            out.append(p.relative_to(PACKAGE.parent).as_posix())
    return sorted(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    require("build", reason="the dev extra pins build (make test installs it)")
    root = tmp_path_factory.mktemp("pkg")
    tree = root / "tree"
    tree.mkdir()
    for name in SHIPPED:
        shutil.copy2(REPO / name, tree / name)
    shutil.copytree(PACKAGE, tree / "src" / "memolab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cp = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(tree)],
                        capture_output=True, text=True, timeout=300, env=clean_env())
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    wheels, sdists = list((root / "dist").glob("*.whl")), list((root / "dist").glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(root / "dist")
    return root, wheels[0], sdists[0]


def test_the_wheel_carries_every_module_the_dashboard_and_the_metadata(built):
    _, wheel, _ = built
    assert wheel.name == f"memolab-{memolab.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(f"memolab-{memolab.__version__}.dist-info/METADATA"))
        scripts = z.read(f"memolab-{memolab.__version__}.dist-info/entry_points.txt").decode()
    missing = [f for f in source_files() if f not in names]
    assert missing == [], missing
    assert "memolab/py.typed" in names and "memolab/ui/static/index.html" in names
    assert meta["Version"] == memolab.__version__ and meta["Requires-Python"] == ">=3.10"
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    declared = sorted(c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert declared[0] == "3.10" and f"{sys.version_info[0]}.{sys.version_info[1]}" in declared, declared
    requires = meta.get_all("Requires-Dist")
    assert {r.split(">")[0].split("=")[0] for r in requires if "extra ==" not in r} == {"xxhash", "blake3"}, requires
    assert any("torch>=2.3" in r and 'extra == "torch"' in r for r in requires), requires
    assert "memolab = memolab.cli:main" in scripts


def test_the_sdist_builds_what_the_wheel_has_and_says_what_changed(built):
    _, _, sdist = built
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        changelog = t.extractfile(f"memolab-{memolab.__version__}/CHANGELOG.md").read().decode()
    for name in SHIPPED:
        assert name in names, name
    missing = [f for f in source_files() if f"src/{f}" not in names]
    assert missing == [], missing
    # the CHANGELOG's newest entry is the version being built
    newest = re.search(r"^## \[?(\d+\.\d+\.\d+)", changelog, re.M)
    assert newest and newest.group(1) == memolab.__version__, changelog[:400]


def give(venv_site: Path, dist: str, given: set) -> None:
    """An installed distribution and what it requires here, files and metadata, copied into
    another environment (as pip would install them from a wheelhouse)."""
    from packaging.requirements import Requirement

    d = md.distribution(dist)
    name = d.metadata["Name"].lower().replace("_", "-")
    if name in given:
        return
    given.add(name)
    for f in d.files or []:
        src = Path(d.locate_file(f))
        if src.is_file() and "__pycache__" not in src.parts and not str(f).startswith(".."):
            dst = venv_site / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    for r in map(Requirement, d.requires or []):
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            give(venv_site, r.name, given)


def test_the_wheel_installed_in_a_fresh_venv_memoizes_across_processes(built):
    root, wheel, _ = built
    venv = root / "venv"
    cp = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300,
                        env=clean_env())
    assert cp.returncode == 0, cp.stderr
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, env=clean_env()).stdout.strip())
    given: set = set()
    for dist in ("xxhash", "blake3"):
        give(site, dist, given)
    work = root / "work"
    work.mkdir()
    env = clean_env(MEMOLAB_STORE=str(work / "store"), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    cp = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheel)], cwd=work,
                        capture_output=True, text=True, timeout=300, env=env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    cp = subprocess.run([str(py), "-m", "pip", "check"], cwd=work, capture_output=True, text=True, env=env)
    assert cp.returncode == 0, cp.stdout + cp.stderr

    probe = textwrap.dedent("""
        import importlib.resources as r, json, memolab
        static = r.files("memolab.ui") / "static"
        print(json.dumps({"file": memolab.__file__, "version": memolab.__version__,
                          "static": sorted(p.name for p in static.iterdir() if p.is_file()),
                          "vendor": sorted(p.name for p in (static / "vendor").iterdir())}))
    """)
    out = json.loads(subprocess.run([str(py), "-c", probe], cwd=work, capture_output=True, text=True,
                                    check=True, env=env).stdout)
    assert Path(out["file"]).is_relative_to(site), out["file"]  # the installed copy, not the checkout
    assert out["version"] == memolab.__version__
    assert out["static"] == sorted(p.name for p in (PACKAGE / "ui" / "static").iterdir() if p.is_file())
    assert out["vendor"] == sorted(p.name for p in (PACKAGE / "ui" / "static" / "vendor").iterdir())

    (work / "job.py").write_text(textwrap.dedent("""
        import json, sys
        import memolab

        class Runs(list):
            pass

        memolab.register_opaque(Runs)
        runs = Runs()

        @memolab.memo
        def square(x):
            runs.append(x)
            return {"x": x, "sq": x * x}

        print(json.dumps({"value": square(int(sys.argv[1])), "computed": runs}))
    """))
    first, second = (json.loads(subprocess.run([str(py), "job.py", "12"], cwd=work, capture_output=True, text=True,
                                               check=True, env=env).stdout.strip().splitlines()[-1])
                     for _ in range(2))
    assert first == {"value": {"x": 12, "sq": 144}, "computed": [12]}
    assert second == {"value": {"x": 12, "sq": 144}, "computed": []}  # a hit in a new process

    cli = subprocess.run([str(venv / "bin" / "memolab"), "ls"], cwd=work, capture_output=True, text=True, env=env,
                         timeout=120)
    assert cli.returncode == 0 and "square" in cli.stdout and "Traceback" not in cli.stderr, cli.stdout + cli.stderr
    ver = subprocess.run([str(venv / "bin" / "memolab"), "--version"], cwd=work, capture_output=True, text=True,
                         env=env, timeout=120)
    assert ver.returncode == 0 and memolab.__version__ in ver.stdout + ver.stderr, ver.stdout + ver.stderr
