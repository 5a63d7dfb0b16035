"""The key's implicit inputs: what a memoized body reads besides its arguments (global
random generators, switches and environment variables, files, other evaluations'
results, the clock of expiry) and the arguments it changes in place.
"""
