"""`scripts/generate.py`'s console output: one header line per prompt that an instruction prompt cannot run into
(issue 26 item 13: `### ### Question:` headers)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate.py"


def _module():
    spec = importlib.util.spec_from_file_location("generate_script", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_instruction_prompt_does_not_run_into_the_header():
    text = _module().format_completion(1, 2, "### Question:\nWhat is 2+2?\n### Answer:\n", " 4")
    header, completion = text.split("\n", 1)
    assert header == '[prompt 1/2] "### Question:\\nWhat is 2+2?\\n### Answer:\\n"'
    assert json.loads(header.split(" ", 2)[2]).startswith("### Question:")
    assert completion == " 4\n" and not text.startswith("###")
