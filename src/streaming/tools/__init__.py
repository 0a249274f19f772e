"""Dataset tools behind ``python -m streaming``: ``check`` (describe, validate, rebuild an index), ``cli``.

Design note: the checks are plain functions returning data (``check``), and the command line only parses
arguments, moves remote files and prints (``cli``), so the checks are usable and testable without a shell.
"""
