"""The memolab demo, with PyTorch: a miss, a hit in a new process, a miss after a code edit
(and `memolab why evaluate` naming the upstream evaluation its new input came from).

It copies `examples/pipeline.py` into `build/demo/` (its own small workspace,
so its store is `build/demo/.memolab`; `$MEMOLAB_DEMO_DIR` picks another
folder) and runs it three times as separate processes, editing the model's
`forward` before the third run. Nothing in the repository is modified.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = Path(os.environ.get("MEMOLAB_DEMO_DIR") or HERE.parent / "build" / "demo")


def step(title: str, *args: str) -> None:
    print(f"\n\033[1m$ {title}\033[0m", flush=True)
    subprocess.run([sys.executable, *args], cwd=DEMO, check=True)


def main() -> None:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    (DEMO / "pyproject.toml").write_text("[project]\nname = 'memolab-demo'\n")
    shutil.copy(HERE / "pipeline.py", DEMO / "pipeline.py")
    os.environ.pop("MEMOLAB_STORE", None)  # use the embedded default store of the workspace

    print(f"demo workspace: {DEMO}  (store: {DEMO / '.memolab'})")
    step("python pipeline.py            # 1st run: load_data and train compute (a miss)", "pipeline.py")
    step("python pipeline.py --explain  # 2nd run, new process: both hit (first-hit latency below)",
         "pipeline.py", "--explain")

    src = (DEMO / "pipeline.py").read_text()
    edited = src.replace("return self.out(torch.relu(self.hidden(x)))", "return self.out(torch.tanh(self.hidden(x)))")
    assert edited != src
    (DEMO / "pipeline.py").write_text(edited)
    print("\n# edit: Net.forward now uses tanh instead of relu")
    step("python pipeline.py --explain  # 3rd run: load_data hits, train recomputes (why: the diff)",
         "pipeline.py", "--explain")
    step("memolab why train", "-m", "memolab", "why", "train")
    step("memolab why evaluate    # lineage: the model it got came from another train", "-m", "memolab", "why", "evaluate")
    step("memolab ls", "-m", "memolab", "ls")
    # the venv's own script by its full path: `memolab` alone is "command not found" in a fresh
    # shell where the venv is not activated
    cli = Path(sys.executable).parent / "memolab"
    ui = f"{cli} ui" if cli.exists() else f"{sys.executable} -m memolab ui"
    print(f"\nSee the loss curves of both trainings side by side:  cd {DEMO} && {ui}")
    print("(or from the repository: make ui)")


if __name__ == "__main__":
    main()
