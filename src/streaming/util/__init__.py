"""Leaf helpers under every other part of ``streaming`` (they import nothing of it).

``sizes``: human-readable sizes and counts (``"64mb"``, ``"100k"``) and ``SizeLimitExceeded``; ``safepath``:
the one path-safety rule for file names read from files (relative, ``..``-free, joined under their root, no
link followed, private cache folders). ``streaming.safepath``, the path SECURITY.md names, re-exports
``safepath``.
"""
