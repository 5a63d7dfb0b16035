"""PyTorch support, imported only once torch itself has been imported.

Nothing outside this subpackage imports torch: ``hashing`` and ``pickling``
register lazy hooks keyed on the ``torch`` top-level module name, and those
hooks import the modules of this subpackage.
"""


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    # ``memolab.torch.resumable``: imported on first use, like the rest of this package
    if name in ("resumable", "Resumable"):
        from . import iteration

        return getattr(iteration, name)
    raise AttributeError(f"module 'memolab.torch' has no attribute {name!r}")
