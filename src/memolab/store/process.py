"""Process identity read from the system: host name, a process's start time, the process table.

Public and below everything else in ``store``: the index names lease owners with
them (``sqlite.process_token``, ``owner_alive_here``) and the temporary-file
sweeper tags its files with them (``tmpfiles``), without either importing the other.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import Any, Dict, List, Optional, Tuple

from .. import config

__all__ = ["host_name", "start_time", "process_table", "runtime_info", "script_path"]


_script: Optional[str] = None


def script_path() -> Optional[str]:
    """The absolute path of the script this process runs (``sys.argv[0]``), or None (``-c``, a REPL).
    Two scripts that each define ``train`` share the symbol ``__main__:train`` (and, with the
    same code and arguments, the same key: the same computation); their runs record which file
    ran, and a miss is explained against evaluations of its own script only."""
    global _script
    if _script is None:
        a = sys.argv[0] if sys.argv else ""
        _script = os.path.abspath(a) if a and a not in ("-c", "-") and os.path.isfile(a) else ""
    return _script or None


def host_name() -> str:
    import socket  # 4 ms of `import memolab` otherwise

    return socket.gethostname()


def start_time(pid: int) -> Optional[str]:
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


_WHERE: List[Optional[str]] = []


def process_table() -> Optional[str]:
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


_RUNTIME: Dict[Tuple[int, str], Dict[str, Any]] = {}


def runtime_info() -> Dict[str, Any]:
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
