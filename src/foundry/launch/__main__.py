"""`python -m foundry.launch [options] [torchrun options] -- train.py <overrides>`
(see `foundry.launch.cli`)."""

import sys

from foundry.errors import run_tool
from foundry.launch.cli import main

sys.exit(run_tool(main))
