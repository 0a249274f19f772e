"""Package layering rules: streaming never imports foundry; the model never imports torch.distributed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_streaming_never_imports_foundry_statically():
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.joinpath("streaming").rglob("*.py")
        if any(m == "foundry" or m.startswith("foundry.") for m in _imported_modules(p))
    ]
    assert offenders == []


def test_streaming_import_does_not_load_foundry():
    code = (
        "import sys, streaming, streaming.writers.mds, streaming.local\n"
        "assert not any(m == 'foundry' or m.startswith('foundry.') for m in sys.modules), 'foundry loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_streaming_is_ours_not_mosaicml():
    import streaming

    assert Path(streaming.__file__).resolve().is_relative_to(SRC)


def test_models_never_import_torch_distributed():
    models = SRC / "foundry" / "models"
    offenders = [
        str(p.relative_to(SRC))
        for p in models.rglob("*.py")
        if any(m.startswith("torch.distributed") for m in _imported_modules(p))
    ]
    assert offenders == []
