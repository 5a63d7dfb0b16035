"""memolab: persistent, code-aware memoization for machine-learning work.

``import memolab`` stays cheap: numpy and torch support is registered lazily,
the first time a value from those libraries is hashed or stored.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .settings import hooks as _hooks

# which of random, numpy and torch were imported before memolab (read only: `import memolab`
# patches nothing; memolab.inputs.globalrng: whether a generator may count as unseeded)
_hooks.note_present()

from .calls.memo import MemoFunction, memo  # noqa: E402 (after note_present)
from .errors import CodeChanged, CorruptBlob, HashError, MemolabError, MemolabWarning, StoreMiss  # noqa: E402 (after note_present)
from .hashing import register_hasher, register_opaque, register_policy  # noqa: E402 (after note_present)
from .hashing.files import Dir, File  # noqa: E402 (after note_present)
from .settings.config import configure  # noqa: E402 (after note_present)

__all__ = [
    "memo", "MemoFunction", "configure",
    "register_hasher", "register_opaque", "register_policy", "File", "Dir",
    "HashError", "StoreMiss", "CodeChanged", "CorruptBlob", "MemolabError", "MemolabWarning",
    "log", "SummaryWriter", "checkpoint", "runs", "ui", "snapshot", "restore",
    "__version__",
]


if TYPE_CHECKING:  # what __getattr__ loads on first use, as type checkers should see it
    from . import ui as ui
    from .team.snapshots import restore as restore, snapshot as snapshot
    from .torch.checkpoint import checkpoint as checkpoint
    from .tracking import log as log
    from .tracking.writer import SummaryWriter as SummaryWriter
    from .ui.runs import runs as runs


def __getattr__(name: str) -> Any:
    # Logging is loaded on first use: `import memolab` must stay fast.
    if name == "log":
        import importlib

        return importlib.import_module(".tracking.log", __name__)
    if name == "checkpoint":
        from .torch.checkpoint import checkpoint  # torch itself is imported only if the caller uses it

        return checkpoint
    if name == "runs":  # memolab.runs(): read runs back (memolab/ui/runs.py)
        from .ui.runs import runs

        globals()["runs"] = runs  # importing the submodule set this attribute to the module
        return runs
    if name == "ui":  # memolab.ui(): the dashboard served by this process (memolab/ui/notebook.py)
        import importlib

        return importlib.import_module(".ui", __name__)  # the package is callable
    if name in ("snapshot", "restore"):  # files and folders by digest (memolab/team/snapshots.py)
        from .team import snapshots

        return getattr(snapshots, name)
    if name == "SummaryWriter":
        from .tracking.writer import SummaryWriter
        return SummaryWriter
    raise AttributeError(f"module 'memolab' has no attribute {name!r}")
