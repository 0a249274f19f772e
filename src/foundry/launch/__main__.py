"""`python -m foundry.launch [options] [torchrun options] -- train.py <overrides>` (see `foundry.launch.cli`)."""

import sys

from foundry.launch.cli import main

sys.exit(main())
