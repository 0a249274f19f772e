"""`ConfigError`: the one exception type for mistakes a user fixes in the command line or config files.

Design note: `train.py` prints such errors as one `error: <message>` block and exits 2 (see `foundry.cli`);
the message must name the bad key, value or file and say how to fix it. It subclasses `ValueError`, so
code that catches `ValueError` (the convention of every schema's `__post_init__`) keeps working.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A bad config key or value, or a file/folder the config names that is missing."""
