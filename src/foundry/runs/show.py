"""`runs show RUN`: the overrides (or, with `--diff`, the config diff against the defaults), derived values,
checkpoints, metrics, evals, events.

`runs show` stays light (well under 2 s, no torch, no Hydra): it prints the command-line overrides the run
recorded in `.hydra/rank0/overrides.yaml`; the full diff needs a compose of `conf/`, which imports the
training stack, so it is asked for with `--diff`.

Design note: "the defaults" are what `python train.py` composes with no overrides (the repository's
`conf/`, turned into the typed `TrainConfig` exactly as a run does), flattened to dotted keys and compared
with the `config` section of the run's `run.json`; so the diff shows every value the run changed, whether
through an override, an experiment file or a sweep. Checkpoints are listed from their `manifest.json`
(step and bytes per file), which works the same on a bucket, where listings carry no sizes.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from foundry.env_refs import resolve_recorded
from foundry.rundir import layout
from foundry.runs.records import record, yaml_list
from foundry.runs.state import RunFiles
from foundry.runs.store import RunRoot

__all__ = [
    "Checkpoint",
    "checkpoints",
    "config_diff",
    "default_config",
    "flatten",
    "icl_results",
    "render_show",
    "run_overrides",
]

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
"""The repository's Hydra config folder (an editable install: src/foundry/runs -> repo/conf)."""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as `{"a.b.c": leaf}` (lists and scalars are leaves)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    if not tree and prefix:
        out[prefix] = {}
    return out


def default_config(conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The config `python train.py` runs with no overrides, as plain JSON-like data (like run.json's)."""
    # only `runs show` needs Hydra: keep `runs list` light
    from hydra import compose, initialize_config_dir

    from foundry.config import register_configs, to_train_config

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir)):
        cfg = compose(config_name="train")
    return json.loads(json.dumps(asdict(to_train_config(cfg)), default=str))


def run_overrides(root: RunRoot, rel: str) -> list[str] | None:
    """The overrides the run was started with (`.hydra/rank0/overrides.yaml`),
    or None when it has none recorded."""
    rel_file = f"{layout.HYDRA}/rank0/overrides.yaml"
    return yaml_list(root.read_text(rel, rel_file), source=f"{rel}/{rel_file}")


def config_diff(config: dict[str, Any], defaults: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """`(key, default, run value)` for every dotted key whose value differs (missing on one side: `None`)."""
    run, base = flatten(config), flatten(defaults)
    keys = sorted(set(run) | set(base))
    return [(k, base.get(k), run.get(k)) for k in keys if run.get(k) != base.get(k)]


@dataclass(kw_only=True)
class Checkpoint:
    """One checkpoint folder of a run."""

    name: str
    step: int | None
    bytes: int | None
    complete: bool
    """Its manifest exists (written last, so a folder without one is a save cut short)."""


def checkpoint_folder(root: RunRoot, rel: str, config: dict[str, Any]) -> tuple[RunRoot, str]:
    """(store, folder) holding the run's checkpoints: `<run>/checkpoints`, else `checkpoint.save_folder`.

    A relative save_folder is taken from the current directory (where `train.py` ran: the repository root).
    """
    folder = (config.get("checkpoint") or {}).get("save_folder")
    # run.json keeps `${oc.env:...}` as written (`s3://${oc.env:CHECKPOINT_BUCKET}/...`): resolve it here
    try:
        folder = resolve_recorded(folder)
    except ValueError:
        pass
    if root.files(rel, layout.CHECKPOINTS) or not folder or "{run_dir}" in str(folder):
        return root, f"{rel}/{layout.CHECKPOINTS}" if rel != "." else layout.CHECKPOINTS
    return RunRoot(str(folder).rstrip("/")), "."


def checkpoints(store: RunRoot, folder: str) -> list[Checkpoint]:
    """The checkpoints in `folder` of `store` (see `checkpoint_folder`), by step
    (from each `manifest.json`)."""
    folders: dict[str, list[str]] = {}
    for name in store.files(folder):
        if "/" in name:
            sub, _, base = name.partition("/")
            folders.setdefault(sub, []).append(base)
    out = []
    for sub, names in folders.items():
        text = store.read_text(folder, f"{sub}/manifest.json") if "manifest.json" in names else None
        manifest = record(text, source=f"{folder}/{sub}/manifest.json", mappings=("files",))
        sizes = [
            v["bytes"]
            for v in manifest.get("files", {}).values()
            if isinstance(v, dict) and _count(v.get("bytes"))
        ]
        if not sizes:
            local = [store.size(folder, f"{sub}/{n}") for n in names]
            sizes = [s for s in local if s is not None]
        step = manifest.get("step") if _count(manifest.get("step")) else None
        if step is None and "-ba" in sub:
            tail = sub.rsplit("-ba", 1)[1]
            step = int(tail) if tail.isdigit() else None
        out.append(
            Checkpoint(name=sub, step=step, bytes=sum(sizes) if sizes else None, complete=bool(manifest))
        )
    return sorted(out, key=lambda c: (c.step is None, c.step or 0, c.name))


def icl_results(root: RunRoot, rel: str) -> dict[str, Any] | None:
    """The newest ICL results of a run: `icl_results.json` (task=eval) or `icl/step_<N>/`
    (during training)."""
    text = root.read_text(rel, "icl_results.json")
    if text:
        return record(text, source=f"{rel}/icl_results.json", mappings=("metrics",))
    steps = []
    for name in root.files(rel, "icl"):
        head, _, base = name.partition("/")
        if base == "icl_results.json" and head.startswith("step_") and head[5:].isdigit():
            steps.append(int(head[5:]))
    if not steps:
        return None
    text = root.read_text(rel, f"icl/step_{max(steps)}/icl_results.json")
    found = record(text, source=f"{rel}/icl/step_{max(steps)}/icl_results.json", mappings=("metrics",))
    return {**found, "step": max(steps)} if found else None


def _count(value: object) -> bool:
    """A whole number >= 0 (not a bool), as a step or a byte count in a manifest must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# `v`: any JSON value
def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def render_show(
    files: RunFiles,
    *,
    diff: list[tuple[str, Any, Any]] | None,
    ckpts: list[Checkpoint],
    icl: dict[str, Any] | None,
    overrides: list[str] | None = None,
) -> str:
    """The text `runs show` prints (`overrides`: printed instead of the diff when there is no diff)."""
    lines = [f"run {files.name}"]
    if diff is None and overrides is not None:
        lines.append(f"\noverrides ({len(overrides)}; the full config diff: runs show --diff):")
        lines += [f"  {o}" for o in overrides]
    elif diff is None and "config" in files.run:
        lines.append("\nconfig: in run.json (what differs from the defaults: runs show --diff)")
    elif diff is None:
        lines.append("\nconfig: (no run.json)")
    else:
        lines.append(f"\nconfig vs defaults ({len(diff)} differences):")
        lines += [f"  {k}: {_fmt(a)} -> {_fmt(b)}" for k, a, b in diff]
    derived = files.run.get("derived", {})
    if derived:
        lines.append("\nderived:")
        lines += [f"  {k}: {_fmt(v)}" for k, v in derived.items()]
    lines.append(f"\ncheckpoints ({len(ckpts)}):")
    for c in ckpts:
        lines.append(
            f"  {c.name}  step {c.step}  {_size(c.bytes)}" + ("" if c.complete else "  (no manifest)")
        )
    last = files.final or (files.metrics[-1] if files.metrics else {})
    lines.append("\nlast metrics:" if last else "\nlast metrics: none")
    lines += [f"  {k}: {_fmt(v)}" for k, v in sorted(last.items())]
    if icl:
        lines.append(f"\neval results{' at step ' + str(icl['step']) if 'step' in icl else ''}:")
        lines += [f"  {k}: {_fmt(v)}" for k, v in sorted(icl.get("metrics", {}).items())]
    lines.append(f"\nevents ({len(files.events)}):")
    for e in files.events:
        rest = {k: v for k, v in e.items() if k not in ("event", "time")}
        lines.append(f"  {_when(e.get('time'))} {e.get('event')} {json.dumps(rest, sort_keys=True)}")
    return "\n".join(lines)


def _when(t: Any) -> str:
    """Unix seconds as UTC `YYYY-mm-dd HH:MM:SS` (`-` when absent)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(t))) if isinstance(t, int | float) else "-"
