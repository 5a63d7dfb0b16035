"""PyTorch support, imported only once torch itself has been imported.

Nothing outside this subpackage imports torch: ``hashing`` and ``pickling``
register lazy hooks keyed on the ``torch`` top-level module name, and those
hooks import the modules of this subpackage.
"""
