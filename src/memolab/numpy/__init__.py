"""numpy's objects put back as a memoized body left them (``restore``).
"""
