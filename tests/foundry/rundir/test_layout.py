"""`foundry.rundir.layout`: every file and folder of a run is named in one module (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from foundry.rundir import layout
from foundry.rundir.layout import RunDir
from stackbase.names import NameError_

SRC = Path(__file__).resolve().parents[3] / "src" / "foundry"
NAMES = [layout.CONFIG, layout.RUN, layout.METRICS, layout.FINAL_METRICS, layout.EVENTS, layout.LIVE,
         layout.TRAIN_LOG, layout.ICL_RESULTS, layout.CHECKPOINT_SCRATCH, layout.CHECKPOINT_CACHE,
         layout.HEARTBEAT]  # fmt: skip
HYDRAS_OWN = {
    ("hydra_callbacks.py", layout.CONFIG)
}  # `.hydra/rank<R>/config.yaml`: Hydra's file of that name


def test_no_module_types_a_run_file_name_by_hand() -> None:
    typed = []
    for path in sorted(SRC.rglob("*.py")):
        if path.parent.name == "rundir" and path.name == "layout.py":
            continue
        text = path.read_text()
        typed += [f"{path.relative_to(SRC)}: {n!r}" for n in NAMES
                  if re.search(rf"[\"']{re.escape(n)}[\"']", text) and (path.name, n) not in HYDRAS_OWN]  # fmt: skip
    assert typed == [], "use foundry.rundir.layout:\n" + "\n".join(typed)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "x\n"])
def test_a_run_name_that_is_not_one_folder_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(NameError_, match="run_name="):
        RunDir.named(name, outputs=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_paths(tmp_path: Path) -> None:
    run = RunDir.named("r1", outputs=tmp_path)
    assert run.root == tmp_path / "r1" and not run.root.exists()
    assert run.create() == run.root and run.root.is_dir()
    assert run.hydra(3) == run.root / ".hydra" / "rank3" and run.config == run.root / "config.yaml"
    assert run.stack_dump("L", attempt=1, rank=2) == run.root / "stacks" / "L-attempt1-rank2.txt"
    assert set(layout.MARKERS) <= {p.name for p in (run.run, run.events, run.config)}
