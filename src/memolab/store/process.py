"""Process identity read from the system: host name, a process's start time, the process table.

Public and below everything else in ``store``: the index names lease owners with
them (``leasing.process_token``, ``owner_alive_here``) and the temporary-file
sweeper tags its files with them (``tmpfiles``), without either importing the other.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import Any

from ..settings import config

__all__ = ["host_name", "start_time", "process_table", "runtime_info", "script_path", "in_kernel", "notebook_path"]


_script: str | None = None


def script_path() -> str | None:
    """The absolute path of the script this process runs (``sys.argv[0]``), or None (``-c``, a REPL).
    Two scripts that each define ``train`` share the symbol ``__main__:train`` (and, with the
    same code and arguments, the same key: the same computation); their runs record which file
    ran, and a miss is explained against evaluations of its own script only. A Jupyter kernel
    runs the notebook, not ``ipykernel_launcher.py``: its path is the notebook's
    (``notebook_path``), or None when Jupyter does not say which."""
    global _script
    if _script is None:
        if in_kernel():
            _script = notebook_path() or ""
        else:
            a = sys.argv[0] if sys.argv else ""
            _script = os.path.abspath(a) if a and a not in ("-c", "-") and os.path.isfile(a) else ""
    return _script or None


def in_kernel() -> bool:
    """Does this process run a Jupyter (IPython) kernel?"""
    if "ipykernel" not in sys.modules:
        return False
    a = os.path.basename(sys.argv[0]) if sys.argv else ""
    return a.startswith("ipykernel") or "ipykernel_launcher" in a or a == "__main__.py"


def notebook_path() -> str | None:
    """The notebook a Jupyter kernel runs, as Jupyter tells its kernel: ``$JPY_SESSION_NAME``
    (set by Jupyter Server and nbclient/papermill when they know it), the ``jupyter_session``
    of the kernel's connection file (``-f FILE``), or VS Code's ``__vsc_ipynb_file__``. A path
    relative to the server's root is found from the kernel's working directory (the notebook's
    own, by default). None when nothing says."""
    found = os.environ.get("JPY_SESSION_NAME") or _from_connection_file() or _from_vscode()
    if not found:
        return None
    if os.path.isabs(found):
        return found
    for candidate in (os.path.abspath(found), os.path.abspath(os.path.basename(found))):
        if os.path.isfile(candidate):
            return candidate
    return found


def _from_connection_file() -> str | None:
    argv = sys.argv or []
    for i, a in enumerate(argv):
        path = argv[i + 1] if a == "-f" and i + 1 < len(argv) else a[3:] if a.startswith("-f=") else None
        if path:
            try:
                import json

                with open(path, encoding="utf-8") as f:
                    session = json.load(f).get("jupyter_session")
                return session if isinstance(session, str) and session else None
            except (OSError, ValueError, AttributeError):
                return None
    return None


def _from_vscode() -> str | None:
    main = sys.modules.get("__main__")
    v = getattr(main, "__vsc_ipynb_file__", None)
    return v if isinstance(v, str) and v else None


def host_name() -> str:
    import socket  # 4 ms of `import memolab` otherwise

    return socket.gethostname()


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None  # a zombie is dead, even before its parent reaps it
    return fields[19].decode()


_WHERE: list[str | None] = []


def process_table() -> str | None:
    """Which process table our pids belong to: pid namespace and boot. Two
    containers can share a host name (host networking) but not a pid namespace."""
    if not _WHERE:
        try:
            ns = "".join(ch for ch in os.readlink("/proc/self/ns/pid") if ch.isdigit())
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip().replace("-", "")[:12]
            _WHERE.append(f"{ns}.{boot}" if ns and boot else None)
        except OSError:
            _WHERE.append(None)
    return _WHERE[0]


_RUNTIME: dict[tuple[int, str], dict[str, Any]] = {}


def runtime_info() -> dict[str, Any]:
    """Host, Python, memolab and platform: made once per process (and per host name,
    which may change under a long-running process; ``gethostname`` is one syscall)."""
    host = host_name()
    info = _RUNTIME.get((config.pid(), host))
    if info is None:
        from .._version import __version__

        info = _RUNTIME[(config.pid(), host)] = {
            "host": host,
            "python": platform.python_version(),
            "memolab": __version__,
            "platform": sys.platform,
        }
    return dict(info)
