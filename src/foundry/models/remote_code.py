"""The MPT modelling code written beside exported weights, so plain transformers loads them with
`trust_remote_code=True` (as llm-foundry's exports do).

Design note: the exported code is this package's own source, copied, not a second hand-written model: every
module the model needs (`MODULES`, the closure of `foundry.models.mpt.model` and `.hf_config` inside
`foundry`) becomes one flat file of the export folder, and each `from foundry.<module> import ...` becomes
`from .<file> import ...`, which transformers' dynamic-module loader resolves inside the folder. So the
export runs exactly the code that trained the model and needs only torch and transformers. The price: a new
`foundry` import in the model's modules must be added to `MODULES` (an import left unmapped fails the export
with a message saying so, and a test loads an export in a Python that cannot import `foundry`).
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

__all__ = ["AUTO_MAP", "MODULES", "write_remote_code"]

MODULES = {
    "foundry.models.mpt.hf_config": "configuration_foundry_mpt",
    "foundry.models.mpt.model": "modeling_foundry_mpt",
    "foundry.models.mpt.attention": "foundry_mpt_attention",
    "foundry.models.mpt.blocks": "foundry_mpt_blocks",
    "foundry.models.mpt.init": "foundry_mpt_init",
    "foundry.models.mpt.layers": "foundry_mpt_layers",
    "foundry.models.mpt.loss": "foundry_mpt_loss",
    "foundry.models.config": "foundry_model_config",
    "foundry.models.peft.config": "foundry_peft_config",
    "foundry.models.cache_names": "foundry_cache_names",
    "foundry.models.documents": "foundry_documents",
}
"""Each module the exported model imports -> its file name (without `.py`) in the export folder."""
AUTO_MAP = {
    "AutoConfig": "configuration_foundry_mpt.MPTConfig",
    "AutoModel": "modeling_foundry_mpt.MPTModel",
    "AutoModelForCausalLM": "modeling_foundry_mpt.MPTForCausalLM",
}
"""config.json's `auto_map`: which class of which file each Auto class loads."""
_RELATIVE = re.compile(r"^\s*from\s+\.(\w+)\s+import", re.M)

_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)(?:from[ \t]+(?P<from>[\w.]+)[ \t]+import\b|import[ \t]+(?P<import>[\w.]+))", re.M
)


def _flatten(source: str, *, module: str) -> str:
    """`source` with every `from foundry.X import` made relative to the export folder.

    Raises:
        RuntimeError: `module` imports a `foundry` module that is not in `MODULES`
            (the export would not load).
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group("from") or match.group("import")
        if name != "foundry" and not name.startswith("foundry."):
            return match.group(0)
        if match.group("from") is None or name not in MODULES:
            raise RuntimeError(
                f"{module} imports {name}, which the exported modelling code does not include: add it to "
                "foundry.models.remote_code.MODULES (as `from <module> import ...`)"
            )
        return f"{match.group('indent')}from .{MODULES[name]} import"

    return _IMPORT.sub(replace, source)


def write_remote_code(out_dir: str | Path) -> list[str]:
    """Writes the model's source files into `out_dir` and adds `auto_map` to its `config.json`.

    Args:
        out_dir: A folder the MPT model was saved to (`save_pretrained`: `config.json` and weights).

    Returns:
        The file names written.
    """
    out = Path(out_dir)
    sources, exported = {}, {}
    for module, name in MODULES.items():
        loaded = importlib.import_module(module)
        header = f"# Exported from {module} (foundry-stack); only torch and transformers are imported.\n"
        text = Path(str(loaded.__file__)).read_text(encoding="utf-8")
        sources[name] = header + _flatten(text, module=module)
        exported[name] = list(loaded.__all__)[0]
    for entry in sorted({ref.split(".")[0] for ref in AUTO_MAP.values()}):
        sources[entry] += _closure_imports(entry, sources, exported)
    for name, text in sources.items():
        (out / f"{name}.py").write_text(text)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config["auto_map"] = dict(AUTO_MAP)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return [f"{name}.py" for name in sources]


def _relative_imports(source: str) -> set[str]:
    return set(_RELATIVE.findall(source))


def _closure_imports(entry: str, sources: dict[str, str], exported: dict[str, str]) -> str:
    """Import lines for the files `entry` needs only indirectly.

    transformers 4.x (4.56 checked; 5.x does not) copies, for a local folder, only the files an `auto_map`
    file imports itself into its module cache, then fails on the files those import in turn; importing every
    file of the closure from the entry file gets them all copied (a no-op at run time: each is already
    imported through the chain).
    """
    seen: set[str] = set()
    todo = [entry]
    while todo:
        for name in _relative_imports(sources[todo.pop()]) - seen:
            seen.add(name)
            todo.append(name)
    missing = sorted(seen - _relative_imports(sources[entry]) - {entry})
    if not missing:
        return ""
    lines = [f"from .{name} import {exported[name]} as _{name}  # noqa: F401\n" for name in missing]
    return (
        "\n\n# every file of the model, so that transformers 4.x copies them all into its module cache\n"
        + "".join(lines)
    )
