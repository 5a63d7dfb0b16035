"""Starting real multi-process jobs from tests: torchrun, ``accelerate launch``, a plain script
that starts ranks itself (Lightning). Each job runs in its own session, with a deadline past
which its whole process group is SIGKILLed, so a hang fails fast instead of waiting for
torch's 30 minutes; bodies run are counted through files each rank appends to."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import zygote

SRC = str(Path(__file__).resolve().parents[1] / "src")

#: a deadline for one 2-rank launch: far above its few seconds, far below torch's 30 minutes
DEADLINE = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(root: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, str(root)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e.setdefault("MEMOLAB_STORE", str(root / "store"))
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e["OMP_NUM_THREADS"] = "1"
    e.update(env or {})
    return e


def run_job(cmd: Sequence[str], root: Path, env: dict[str, str], deadline: float = DEADLINE,
            check: bool = True, preload: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``cmd`` in ``root`` in a session of its own; SIGKILL the whole session past ``deadline``.

    ``preload``: ``python script.py ...`` forks from the fork server that imported those modules
    (tests/zygote.py), in a process group of its own, killed past the deadline and after the job,
    as the session is; the processes the job starts itself (the other ranks) are real starts."""
    server = zygote.server(preload, env) if preload else None
    if server is not None and cmd[0] == sys.executable and server.can_run(tuple(cmd[1:]), env):
        try:
            cp = server.run(tuple(cmd[1:]), root, env, deadline)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{' '.join(cmd[-3:])} did not finish within {deadline} s (a hang):\n{e.stdout!r}\n"
                                 f"{(e.stderr or b'')[-4000:]!r}") from None
        try:  # what the job left behind (a rank that outlived its launcher): never past the test
            os.killpg(cp.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        except (ProcessLookupError, PermissionError):
            pass
        if check and cp.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[-3:])} failed ({cp.returncode}):\nstdout:\n{cp.stdout}\n"
                                 f"stderr:\n{cp.stderr[-6000:]}")
        return cp
    p = subprocess.Popen(list(cmd), cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{' '.join(cmd[-3:])} did not finish within {deadline} s (a hang):\n{out}\n{err[-4000:]}") from None
    finally:
        try:  # what the job left behind (a rank that outlived torchrun): never past the test
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    cp = subprocess.CompletedProcess(list(cmd), p.returncode, out, err)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[-3:])} failed ({p.returncode}):\nstdout:\n{out}\nstderr:\n{err[-6000:]}")
    return cp


def launch(root: Path, script: str, env: dict[str, str] | None = None, nproc: int = 2,
           deadline: float = DEADLINE, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``script`` under torchrun in ``root``. torchrun itself forks from a fork server that
    imported torch (tests/zygote.py): it runs no line of memolab or of the script, and the ranks
    it starts are real starts (``python -u script``, each in a session of its own)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", script]
    return run_job(cmd, root, job_env(root, env), deadline, check, preload=("torch", "numpy"))


def launch_accelerate(root: Path, script: str, env: dict[str, str] | None = None,
                      deadline: float = DEADLINE) -> subprocess.CompletedProcess:
    """``accelerate launch`` with 2 CPU processes (``--multi_gpu`` is its multi-process mode; the
    script's ``Accelerator(cpu=True)`` picks gloo on CPU)."""
    e = job_env(root, {"HF_HOME": str(root / "hf"), "HF_DATASETS_OFFLINE": "1", **(env or {})})
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes=2",
           "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={free_port()}",
           script]
    return run_job(cmd, root, e, deadline)


def run_script(root: Path, script: str, env: dict[str, str] | None = None, deadline: float = DEADLINE,
               check: bool = True, args: Sequence[str] = (), preload: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``python script [args]`` in ``root`` (a script that starts processes itself: Lightning's
    launcher, submitit's executor); ``preload``: forked from a fork server (``run_job``)."""
    return run_job([sys.executable, script, *args], root, job_env(root, env), deadline, check, preload)


def marks(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def results(root: Path, name: str, ranks: Sequence[int] = (0, 1)) -> dict[int, dict]:
    return {r: json.loads((root / f"{name}.{r}.json").read_text()) for r in ranks}
