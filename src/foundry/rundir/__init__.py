"""The run directory (issue 39): its layout, named once, and the functions that create, lock and write it.

- `layout`: every file and folder of a run (`RunDir`, and the names as constants for readers of remote runs).
- `lock`: `RunLock`, held by rank 0 while the run runs;
  a second command on the run is refused naming the holder.
- `record`: `RunRecord`, which opens the run once the command is accepted (a refused one touches nothing).
- `files`: `write_text_atomic`, how each record file is written (a reader or a crash never sees half a file).

Readers that must start fast (`python -m foundry.runs`) import `foundry.rundir.layout` alone (no torch here).
"""

from __future__ import annotations

from foundry.rundir.files import write_text_atomic
from foundry.rundir.layout import RunDir
from foundry.rundir.lock import RunLock
from foundry.rundir.record import RunRecord

__all__ = ["RunDir", "RunLock", "RunRecord", "write_text_atomic"]
