"""Entry point for ``python -m streaming``."""

from streaming.cli import main

raise SystemExit(main())
