"""Entry point for ``python -m streaming``."""

from streaming.tools.cli import main

raise SystemExit(main())
