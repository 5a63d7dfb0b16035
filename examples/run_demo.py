"""The memolab demo: a miss, a hit in a new process, a miss after a code edit.

It copies `examples/pipeline.py` into `build/demo/` (its own small workspace,
so its store is `build/demo/.memolab`) and runs it three times as separate
processes, editing the code before the third run. Nothing in the repository
is modified.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent / "build" / "demo"


def step(title: str, *args: str) -> None:
    print(f"\n\033[1m$ {title}\033[0m")
    subprocess.run([sys.executable, *args], cwd=DEMO, check=True)


def main() -> None:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    (DEMO / "pyproject.toml").write_text("[project]\nname = 'memolab-demo'\n")
    shutil.copy(HERE / "pipeline.py", DEMO / "pipeline.py")
    os.environ.pop("MEMOLAB_STORE", None)  # use the embedded default store of the workspace

    print(f"demo workspace: {DEMO}  (store: {DEMO / '.memolab'})")
    step("python pipeline.py            # 1st run: both steps compute (a miss)", "pipeline.py")
    step("python pipeline.py --explain  # 2nd run, new process: both steps hit", "pipeline.py", "--explain")

    src = (DEMO / "pipeline.py").read_text()
    edited = src.replace("return np.tanh(x * 2.0)", "return np.tanh(x * 3.0)")
    assert edited != src
    (DEMO / "pipeline.py").write_text(edited)
    print("\n# edit: featurize() now uses x * 3.0 instead of x * 2.0")
    step("python pipeline.py --explain  # 3rd run: load_data hits, train recomputes", "pipeline.py", "--explain")
    step("memolab why train", "-m", "memolab", "why", "train")
    step("memolab ls", "-m", "memolab", "ls")


if __name__ == "__main__":
    main()
