"""`python -m foundry.runs ...` (see `foundry.runs.cli`)."""

import sys

from foundry.runs.cli import main

sys.exit(main())
