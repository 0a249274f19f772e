"""`python -m foundry.compat.llmfoundry YAML [key=value ...] [--experiment OUT.yaml | --run] | --table`.

Prints the `train.py` command equal to an llm-foundry training YAML (stdout) and one line per key that is
ignored or refused, with the reason (stderr). `key=value` overrides apply to the YAML as in
`composer train.py YAML key=value` (`variables.data_local=/data/c4`, `max_duration=10ba`); ones that start
with a key only `train.py` has (`trainer.device=cpu`, `parallelism=none`) are passed on to it. A mistake
prints one `error:` line naming the file, the key and the fix, and exits 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from foundry.compat.llmfoundry import translate_file
from foundry.compat.llmfoundry.keys import markdown_table
from foundry.compat.llmfoundry.render import experiment_yaml, overrides, shell_command
from foundry.errors import ConfigError, run_tool
from stackbase.secrets import redact_text

TRAIN_PY = Path(__file__).resolve().parents[4] / "train.py"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m foundry.compat.llmfoundry", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("yaml", nargs="?", type=Path, help="an llm-foundry training YAML")
    p.add_argument(
        "overrides", nargs="*", help="key=value: llm-foundry keys edit the YAML; train.py's pass on"
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--experiment",
        type=Path,
        metavar="OUT.yaml",
        help="write an experiment file (in a folder named experiment, e.g. conf/experiment/x.yaml)",
    )
    how.add_argument("--run", action="store_true", help="run train.py with the translated overrides")
    how.add_argument("--table", action="store_true", help="print the key mapping table (markdown) and exit")
    return p


def _experiment_hint(out: Path) -> str:
    if out.parent.name != "experiment":
        raise ConfigError(
            f"--experiment {out}: put it in a folder named experiment (e.g. conf/experiment/"
            f"{out.stem}.yaml) so train.py can pick it with experiment={out.stem}"
        )
    conf = out.resolve().parent.parent
    if conf == TRAIN_PY.parent / "conf":
        return f"python train.py experiment={out.stem}"
    return f"python train.py --config-dir {conf} experiment={out.stem}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options and the YAML and `key=value` overrides in any order (issue 40: `YAML --run key=value` was
    refused as `unrecognized arguments`, though `--run` last worked)."""
    return _parser().parse_intermixed_args(argv)


def _printable(text: str) -> str:
    """`text` with a credential's value masked (a path or value holding one) and a lone surrogate (a YAML
    `"\\ud800"` escape) written as its escape, so printing cannot fail."""
    return redact_text(text).encode("utf-8", "backslashreplace").decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table:
        print(markdown_table())
        return 0
    if args.yaml is None:
        raise ConfigError(
            "give an llm-foundry training YAML: python -m foundry.compat.llmfoundry YAML [key=value ...]"
        )
    hint = _experiment_hint(args.experiment) if args.experiment else ""
    tr = translate_file(args.yaml, args.overrides)
    for note in tr.notes:
        print(_printable(note.line()), file=sys.stderr)
    if args.experiment:
        args.experiment.parent.mkdir(parents=True, exist_ok=True)
        args.experiment.write_text(experiment_yaml(tr, source=str(args.yaml)), errors="backslashreplace")
        print(_printable(f"wrote {args.experiment}; run it: {hint} {' '.join(tr.passthrough)}".rstrip()))
        return 0
    if args.run:
        if not TRAIN_PY.is_file():
            raise ConfigError(
                f"--run: {TRAIN_PY} not found (run from a checkout); paste the printed command instead"
            )
        return subprocess.call([sys.executable, str(TRAIN_PY), *overrides(tr)])
    print(_printable(shell_command(tr)))
    return 0


if __name__ == "__main__":
    sys.exit(run_tool(main))
