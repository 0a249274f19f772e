"""Every import path the documentation gives users still resolves, so moving a module cannot break one silently.

The paths come from README.md, SECURITY.md and docs/**/*.md (the generated reference pages included): the
`from X import A, B` and `import X` lines of their Python code blocks, the `python -m X` commands, and every
dotted `streaming.` / `foundry.` / `stackbase.` name in the text (`streaming.base.{dataset,stream}` expands
to both; a call's arguments are dropped; file names such as `foundry.md` and OmegaConf's `${foundry.run_dir:}`
resolver are not paths). On top of those, the mosaicml-streaming paths `docs/guides/from-mosaicml-streaming.md`
promises (`UPSTREAM`: the `streaming.base` aliases and the names each one offers) and every module under
`streaming.base`. A path resolves when its longest importable prefix imports and the rest are attributes of
it; a `python -m` module must be findable (a package: its `__main__`), and is not run.

Only this repository's packages are checked; a path whose module needs an optional package that is not
installed here (an extra) is skipped, naming it. Import only: nothing is downloaded or run.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").rglob("*.md"))]
OURS = ("streaming", "foundry", "stackbase")
FILE_SUFFIXES = {"md", "py", "yaml", "yml", "json", "jsonl", "txt", "html", "toml", "cfg", "sh"}

UPSTREAM: dict[str, list[str]] = {
    "streaming": [
        "CSVWriter", "JSONWriter", "LocalDataset", "MDSWriter", "Stream", "StreamingDataLoader",
        "StreamingDataset", "TSVWriter", "XSVWriter",
    ],
    "streaming.base": [
        "CSVWriter", "JSONWriter", "LocalDataset", "MDSWriter", "Stream", "StreamingDataLoader",
        "StreamingDataset", "TSVWriter", "XSVWriter",
    ],
    "streaming.base.dataset": ["StreamingDataset"],
    "streaming.base.dataloader": ["StreamingDataLoader"],
    "streaming.base.stream": ["Stream"],
    "streaming.base.local": ["LocalDataset"],
    "streaming.base.format": [
        "CSVWriter", "JSONWriter", "MDSWriter", "TSVWriter", "XSVWriter", "get_index_basename",
    ],
    "streaming.base.format.mds": ["MDSWriter"],
    "streaming.base.format.mds.writer": ["MDSWriter"],
    "streaming.base.format.mds.encodings": [
        "Encoding", "_encodings", "get_mds_encoded_size", "get_mds_encodings", "is_mds_encoding",
        "is_mds_encoding_safe", "mds_decode", "mds_encode",
    ],
    "streaming.base.format.json": ["JSONWriter"],
    "streaming.base.format.xsv": ["CSVWriter", "TSVWriter", "XSVWriter"],
    "streaming.base.util": [
        "bytes_to_int", "clean_stale_shared_memory", "get_list_arg", "merge_index", "number_abbrev_to_int",
    ],
}  # fmt: skip
"""mosaicml-streaming 0.13.0's public paths that code written for it imports here unchanged."""

_NAME = r"[A-Za-z_]\w*"
_DOTTED = re.compile(
    rf"(?<![\w./${{-])((?:{'|'.join(OURS)})(?:\.(?:{_NAME}|\{{{_NAME}(?:,\s*{_NAME})*\}}))+)(?![\w{{])"
)
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_FROM = re.compile(rf"^\s*from\s+({_NAME}(?:\.{_NAME})*)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)
_IMPORT = re.compile(rf"^\s*import\s+({_NAME}(?:\.{_NAME})*)", re.M)
_RUN_MODULE = re.compile(rf"python3?\s+-m\s+({_NAME}(?:\.{_NAME})*)(?![.\w])")  # not `python -m foundry...`


def _expand(dotted: str) -> list[str]:
    """`a.{b,c}.d` -> [`a.b.d`, `a.c.d`]."""
    match = re.search(r"\{([^}]*)\}", dotted)
    if match is None:
        return [dotted]
    head, tail = dotted[: match.start()], dotted[match.end() :]
    return [p for part in match.group(1).split(",") for p in _expand(head + part.strip() + tail)]


def _file_name(path: str) -> bool:
    """`foundry.md`, `streaming.py`: a file named in the text, not a path (`streaming.base.format.json` is)."""
    parts = path.split(".")
    return len(parts) == 2 and parts[1] in FILE_SUFFIXES


def _ours(path: str) -> bool:
    return path.split(".")[0] in OURS


def documented_paths() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({dotted path: pages naming it}, {`python -m` module: pages}) from the documentation pages."""
    paths: dict[str, set[str]] = {}
    modules: dict[str, set[str]] = {}
    for page in PAGES:
        text = page.read_text()
        where = str(page.relative_to(REPO))
        found: set[str] = set()
        for lang, body in _FENCE.findall(text):
            if lang in ("python", "py", "pycon"):
                for module, names in _FROM.findall(body):
                    found |= {f"{module}.{n.split(' as ')[0].strip()}" for n in names.split(",") if n.strip()}
                found |= set(_IMPORT.findall(body))
        for raw in _DOTTED.findall(text):
            found |= {p for p in _expand(raw) if not _file_name(p)}
        for path in filter(_ours, found):
            paths.setdefault(path, set()).add(where)
        for module in filter(_ours, _RUN_MODULE.findall(text)):
            modules.setdefault(module, set()).add(where)
    return paths, modules


PATHS, MODULES = documented_paths()


def _import(module: str):
    """The module, or a skip when it needs a package outside this repository that is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top and top not in OURS:
            pytest.skip(f"{module} needs {err.name}, which is not installed here (an optional extra)")
        raise


def resolve(path: str) -> object:
    """The object at `path`: its longest importable prefix, then attributes. Raises when it does not resolve."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = _import(module)
        for i, attr in enumerate(parts[cut:], start=cut):
            assert hasattr(obj, attr), f"{'.'.join(parts[:i])} has no attribute {attr!r}"
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"no module of {path} can be imported")


def test_the_pages_document_paths():
    """The collection finds what the pages give (a guard against a regex that silently finds nothing)."""
    assert {
        "streaming.MDSWriter",
        "streaming.base.format.mds.encodings",
        "foundry.config.register_configs",
    } <= set(PATHS)
    assert {"streaming", "foundry.launch", "foundry.runs", "foundry.sync"} <= set(MODULES)
    assert not {p for p in PATHS if p.startswith("foundry.command_utils")}  # `llmfoundry.command_utils...`


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_documented_path_resolves(path):
    resolve(path)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_documented_python_m_module_is_runnable(module):
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"`python -m {module}` (in {sorted(MODULES[module])}): no such module"
    if spec.submodule_search_locations is not None:  # a package runs its __main__
        assert importlib.util.find_spec(f"{module}.__main__") is not None, f"{module} has no __main__"


@pytest.mark.parametrize("module", sorted(UPSTREAM))
def test_mosaicml_streaming_paths_import_with_their_names(module):
    obj = _import(module)
    missing = [name for name in UPSTREAM[module] if not hasattr(obj, name)]
    assert not missing, f"{module} lacks {missing}"


def test_every_streaming_base_module_imports_and_offers_its_all():
    import streaming.base

    names = ["streaming.base"] + [
        m.name for m in pkgutil.walk_packages(streaming.base.__path__, "streaming.base.")
    ]
    assert set(UPSTREAM) - {"streaming"} <= set(names), "a promised streaming.base module is gone"
    for name in names:
        module = importlib.import_module(name)
        missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names {missing}, which it lacks"
