"""Arrow data hashed by content (``keys``) and the files Arrow's readers open (``reads``).
"""
