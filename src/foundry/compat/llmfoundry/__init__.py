"""llm-foundry training YAMLs run here: `python -m foundry.compat.llmfoundry YAML [key=value ...]`.

Design note: three steps, each a module: `render.load_yaml` reads the YAML as llm-foundry does (variables,
overrides), `translate.translate` (with `sections`) turns it into `train.py` group choices and values under
the tables of `keys` (every key translated, ignored or refused by name), and `render` writes the result as
one pasteable command or an experiment file. `expand_train_args` is the same translation for
`python train.py llmfoundry=PATH [overrides]`, which replaces that argument before Hydra reads the command
(and turns `eval.icl_tasks=PATH` into `eval.icl_tasks_file=PATH`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from foundry.compat.llmfoundry.render import load_yaml, overrides
from foundry.compat.llmfoundry.translate import Note, Translation, translate
from stackbase.secrets import redact_text

__all__ = ["Note", "Translation", "expand_train_args", "translate", "translate_file"]

ARG = "llmfoundry="


def translate_file(path: Path, extra: Sequence[str] = ()) -> Translation:
    """Reads, resolves and translates the YAML at `path`; `extra` are `key=value` overrides (see `render`).

    Raises:
        ConfigError: Naming the file and the key that cannot be translated, and the fix.
    """
    cfg, ours, from_env = load_yaml(path, extra)
    tr = translate(cfg, source=str(path))
    tr.passthrough, tr.from_env = ours, from_env
    return tr


def _task_file_arg(arg: str) -> str:
    """`eval.icl_tasks=PATH` (llm-foundry's `icl_tasks: PATH` form) -> `eval.icl_tasks_file=PATH`; a list
    (`eval.icl_tasks=[...]`) or null stays as it is."""
    key, sep, value = arg.partition("=")
    if sep and key.lstrip("+") == "eval.icl_tasks" and value.strip() and value.strip()[0] not in "[{":
        if value.strip() not in ("null", "~"):
            return f"eval.icl_tasks_file={value}"
    return arg


def expand_train_args(args: Sequence[str]) -> list[str]:
    """`train.py`'s arguments with `llmfoundry=PATH` replaced by that YAML's translated overrides.

    The other arguments stay as given, after the translation, so they win; `eval.icl_tasks=PATH` (a task
    yaml, as llm-foundry's `icl_tasks:` takes) becomes `eval.icl_tasks_file=PATH`. Notes (ignored and refused
    keys) go to stderr. Without `llmfoundry=` the other arguments are returned unchanged.
    """
    args = [_task_file_arg(a) for a in args]
    given = [a for a in args if a.startswith(ARG)]
    if not given:
        return list(args)
    if len(given) > 1:
        raise ValueError(f"{ARG}PATH was given {len(given)} times; pass one llm-foundry YAML")
    rest = [a for a in args if not a.startswith(ARG)]
    tr = translate_file(Path(given[0][len(ARG) :]))
    for note in tr.notes:
        print(redact_text(note.line()), file=sys.stderr)
    return overrides(tr) + rest
