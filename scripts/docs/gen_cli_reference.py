"""Writes docs/reference/cli.md, the command-line reference, from the tools' own argparse parsers.

Design note: each tool builds its parser its own way (a `build_parser()`, or inside `main()`), so this script
runs every tool's entry point exactly as its command line would (`runpy`, `__main__`), with argparse's
`parse_known_args` replaced by one that hands the parser back instead of parsing: nothing is run, and the page
shows the parser the user gets (usage, description, every argument with its default and help, every
subcommand). `train.py` is a Hydra application, not argparse: its section is written here and lists the
config groups and options of `conf/`. Help text is wrapped at a fixed width and the checkout's path is
written as `<repo>`, so the page is the same on every machine. `make docs` runs it;
tests/docs/test_generated_pages.py checks that the committed page is what this script writes.

    python scripts/docs/gen_cli_reference.py [--out docs/reference/cli.md]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import runpy
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "reference" / "cli.md"
WIDTH = "100"


@dataclass(frozen=True)
class Tool:
    """A command and how to start it: a module (`python -m`) or a script path relative to the repository."""

    command: str
    module: str = ""
    script: str = ""
    summary: str = ""


TOOLS = {
    "Training and runs": [
        Tool("python -m foundry.launch", module="foundry.launch", summary="supervised runs under torchrun"),
        Tool("python -m foundry.launch.k8s", module="foundry.launch.k8s", summary="Kubernetes PyTorchJob"),
        Tool(
            "python -m foundry.runs",
            module="foundry.runs",
            summary="list, inspect, stop, resume, report runs",
        ),
        Tool(
            "python -m foundry.sync",
            module="foundry.sync",
            summary="copy checkpoints and datasets between stores",
        ),
        Tool(
            "python -m foundry.compat.llmfoundry",
            module="foundry.compat.llmfoundry",
            summary="run llm-foundry YAMLs",
        ),
    ],
    "Datasets": [
        Tool("python -m streaming", module="streaming", summary="inspect, validate, list MDS datasets"),
        Tool(
            "python scripts/data_prep/convert_dataset_hf.py",
            script="scripts/data_prep/convert_dataset_hf.py",
            summary="text to tokenized MDS",
        ),
        Tool(
            "python scripts/data_prep/convert_finetuning_dataset.py",
            script="scripts/data_prep/convert_finetuning_dataset.py",
            summary="finetuning rows to MDS",
        ),
        Tool(
            "python scripts/data_prep/make_standin_mix.py",
            script="scripts/data_prep/make_standin_mix.py",
            summary="offline stand-ins for the MPT-7B mix",
        ),
        Tool(
            "python -m foundry.data.finetune.instruct",
            module="foundry.data.finetune.instruct",
            summary="the offline instruction set",
        ),
    ],
    "Models and checkpoints": [
        Tool("python scripts/export_hf.py", script="scripts/export_hf.py", summary="export to Hugging Face"),
        Tool(
            "python scripts/convert_checkpoint.py",
            script="scripts/convert_checkpoint.py",
            summary="full, sharded, HF and Composer checkpoints",
        ),
        Tool("python scripts/generate.py", script="scripts/generate.py", summary="completions from a model"),
    ],
    "Development": [
        Tool(
            "python scripts/test_compat.py", script="scripts/test_compat.py", summary="dependency-range tests"
        ),
        Tool(
            "python scripts/k8s_schema_subset.py",
            script="scripts/k8s_schema_subset.py",
            summary="the PyTorchJob schema subset",
        ),
    ],
}
BENCH = REPO / "scripts" / "bench"


def bench_tools() -> list[Tool]:
    """Every committed benchmark script with a parser (`make bench` runs them; `_`-prefixed files are helpers).

    Only files git tracks, so a script still being written in the working tree does not change the page."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "scripts/bench/*.py"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
        paths = [REPO / name for name in listed if (REPO / name).parent == BENCH]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        paths = list(BENCH.glob("*.py"))
    return [
        Tool(f"python scripts/bench/{p.name}", script=f"scripts/bench/{p.name}")
        for p in sorted(paths)
        if p.exists() and not p.name.startswith("_") and "argparse" in p.read_text()
    ]


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def _capturing() -> Iterator[None]:
    """argparse hands its parser back (as `_Captured`) at the first parse, instead of parsing."""

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    names = ("parse_known_args", "parse_known_intermixed_args", "print_help")  # a tool may print its own help
    saved = {name: getattr(argparse.ArgumentParser, name) for name in names}
    for name in saved:
        setattr(argparse.ArgumentParser, name, capture)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(argparse.ArgumentParser, name, method)


def parser_of(tool: Tool) -> argparse.ArgumentParser:
    """The parser `tool`'s command line builds (nothing else of the tool runs)."""
    argv0 = tool.command.split()[-1]
    saved_argv, sys.argv = sys.argv, [argv0, "--help"]
    saved_path = list(sys.path)
    if tool.script:
        sys.path.insert(0, str((REPO / tool.script).parent))  # as `python <script>` does (`_common` helpers)
    try:
        with _capturing(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if tool.module:
                runpy.run_module(tool.module, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(str(REPO / tool.script), run_name="__main__")
    except _Captured as got:
        return got.parser
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    raise RuntimeError(f"{tool.command} ran without parsing its arguments")


def _clean(text: str) -> str:
    """`text` without what differs between machines: the interpreter, the checkout's and the home folder."""
    return text.replace(sys.executable, "python").replace(str(REPO), "<repo>").replace(str(Path.home()), "~")


def _cell(text: str) -> str:
    out, in_code = [], False
    for part in " ".join(_clean(text).split()).split("`"):
        out.append(part if in_code else part.replace("|", "\\|").replace("<", "&lt;"))
        in_code = not in_code
    return "`".join(out)


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        metavar = ""
        if action.nargs != 0:
            fmt = argparse.HelpFormatter("x")
            metavar = " " + fmt._format_args(action, action.dest.upper())
        return ", ".join(f"`{o}{metavar}`" for o in action.option_strings)
    fmt = argparse.HelpFormatter("x")
    return f"`{fmt._format_args(action, action.metavar or action.dest)}`"


def _default(action: argparse.Action) -> str:
    if action.option_strings and action.nargs == 0:
        return ""
    if action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    if action.default == [] or action.default == "":
        return ""
    return f"`{_clean(str(action.default))}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    fmt = parser._get_formatter()
    try:
        text = fmt._expand_help(action)
    except (KeyError, TypeError, ValueError):
        text = action.help
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        listed = ", ".join(str(c) for c in action.choices)
        if listed not in text:
            text += f" (one of: {listed})"
    return text


def _prose(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """A description or epilog: preformatted (a raw formatter's) as a text block, else one paragraph."""
    if issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter):
        return ["```text", _clean(text).strip("\n").rstrip(), "```", ""]
    return [_cell(text), ""]


def render_parser(parser: argparse.ArgumentParser, command: str, level: int) -> list[str]:
    parser.prog = command
    lines = ["```text", _clean(parser.format_usage()).strip(), "```", ""]
    if parser.description:
        lines += _prose(parser, parser.description)
    rows, subcommands = [], None
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            subcommands = action
            continue
        if action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| {_argument(action)} | {_default(action)} | {_cell(_help(parser, action))} |")
    if rows:
        lines += ["| argument | default | description |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += _prose(parser, parser.epilog)
    if subcommands is not None:
        helps = {a.dest: a.help or "" for a in subcommands._choices_actions}
        seen: set[int] = set()
        for name, sub in subcommands.choices.items():
            if id(sub) in seen:
                continue  # an alias
            seen.add(id(sub))
            lines += [f"{'#' * (level + 1)} {command} {name}", ""]
            if helps.get(name):
                lines += [_clean(helps[name]).strip(), ""]
            lines += render_parser(sub, f"{command} {name}", level + 1)
    return lines


def _options(group: Path) -> str:
    names = sorted(p.relative_to(group).with_suffix("").as_posix() for p in group.rglob("*.yaml"))
    return ", ".join(f"`{n}`" for n in names if not n.rpartition("/")[2].startswith("_"))


def train_py_section() -> list[str]:
    conf = REPO / "conf"
    groups = sorted(p for p in conf.iterdir() if p.is_dir() and p.name not in ("hydra", "local"))
    lines = [
        "## python train.py",
        "",
        "```text",
        "python train.py [group=option ...] [key=value ...] [+group=option] [~key] [-m] [--cfg job] [--help]",
        "torchrun [torchrun options] train.py [overrides ...]",
        "```",
        "",
        "The one entry point (Hydra): pretraining, finetuning (`task=finetune`), ICL evaluation (`task=eval`) and",
        "sweeps (`-m`, or `sweep=<name>`). Arguments are Hydra overrides, not flags: `group=option` picks a file of",
        "`conf/<group>/`, `key=value` sets a key of the typed config (every key is listed in the",
        "[configuration reference](config.md)), `+group=option` adds an optional group (`+peft=lora`), `~key` removes",
        "one. A mistake is one `error:` line naming the closest key or option, exit 2. Hydra's own flags:",
        "",
        "| flag | what it does |",
        "|---|---|",
        "| `--help` | Hydra's help: the config groups and the composed config |",
        "| `--cfg job` | print the composed config and exit (`--resolve` to resolve interpolations) |",
        "| `-m`, `--multirun` | one job per combination of comma-separated values (`optimizer.lr=1e-3,3e-4`) |",
        "| `--config-dir DIR` | add a folder of config groups (a user's own `experiment/`) |",
        "| `--info` | Hydra's information about the config search path and defaults |",
        "",
        "Config groups and their options (`conf/`):",
        "",
        "| group | options |",
        "|---|---|",
    ]
    for group in groups:
        lines.append(f"| `{group.name}` | {_options(group)} |")
    return lines + [""]


def render() -> str:
    os.environ["COLUMNS"] = WIDTH
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated by scripts/docs/gen_cli_reference.py from the tools' argparse parsers: do not edit by"
        " hand; run `make docs`. -->",
        "",
        "Every command the project ships. `python train.py` and `python scripts/...` find the checkout's `.venv`",
        "from any shell; for `python -m ...` activate it first (`source .venv/bin/activate`) or write",
        "`.venv/bin/python -m ...`. A mistake in the arguments is one `error:` line naming the argument and the",
        "fix, exit 2.",
        "",
        *train_py_section(),
    ]
    sections = {**TOOLS, "Benchmarks": bench_tools()}
    for title, tools in sections.items():
        lines += [f"## {title}", ""]
        if title == "Benchmarks":
            lines += [
                '`make bench` runs them all (`BENCHES="..."` to pick); each prints JSON lines with its figures',
                "and the machine. Results and how to read them: [Benchmarks](../benchmarks.md).",
                "",
            ]
        for tool in tools:
            parser = parser_of(tool)
            lines += [f"### {tool.command}", ""]
            if tool.summary:
                lines += [f"*{tool.summary[0].upper()}{tool.summary[1:]}.*", ""]
            lines += render_parser(parser, tool.command, 3)
    lines += [
        "## python -m foundry.eval.harness",
        "",
        "```text",
        "python -m foundry.eval.harness run --model foundry --model_args checkpoint=... --tasks ... [lm-eval options]",
        "```",
        "",
        "lm-evaluation-harness's own command line (lm-eval 0.4.13) with this project's model type `foundry`",
        "registered; every argument is lm-eval's (`python -m foundry.eval.harness --help`). The `--model_args` it",
        "takes: [Evaluation](../guides/evaluation.md#lm-evaluation-harness).",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the page to write (default: %(default)s)")
    args = parser.parse_args(argv)
    text = render()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
