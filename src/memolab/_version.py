"""memolab's version, in a module of its own: anything may read it without importing the package's API."""
__version__ = "0.4.4"
