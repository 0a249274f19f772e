"""`python -m foundry.runs {list,show,logs,stop,resume,report}`: look at and act on run directories.

Design note: a thin argparse layer over `store` (where runs are), `state` (what they are doing), `show`,
`control` and `report`; every subcommand takes a run by name under `--root` (default `outputs`, or an
`s3://` / `gs://` prefix), by folder path, or by URL. Errors a user can fix (no such run, nothing to stop)
print `error: ...` and exit 2, like `train.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from foundry.rundir import layout
from foundry.runs.control import format_command, resume_command, stop_run
from foundry.runs.report import write_report
from foundry.runs.show import (
    checkpoint_folder,
    checkpoints,
    config_diff,
    default_config,
    icl_results,
    render_show,
    run_overrides,
)
from foundry.runs.state import RunSummary, load_run, summarize
from foundry.runs.store import RunRoot, resolve_run
from stackbase.secrets import redact_text

__all__ = ["build_parser", "format_list", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m foundry.runs", description=__doc__.split("\n")[0])
    p.add_argument("--root", default=layout.OUTPUTS, help="where runs live: a folder or s3:// / gs:// prefix")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="one line per run under ROOT")
    ls.add_argument("root_arg", nargs="?", metavar="ROOT", help="overrides --root")
    show = sub.add_parser("show", help="config diff, derived values, checkpoints, metrics, evals, events")
    show.add_argument("run")
    show.add_argument(
        "--diff",
        action="store_true",
        help=(
            "the full config diff against the defaults (composes conf/: several seconds; default: the "
            "overrides)"
        ),
    )
    logs = sub.add_parser("logs", help="the run's train.log")
    logs.add_argument("run")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing what is appended")
    stop = sub.add_parser("stop", help="SIGTERM: checkpoint at the next step and exit 75 (preemption path)")
    stop.add_argument("run")
    res = sub.add_parser("resume", help="print the command line that continues the run")
    res.add_argument("run")
    res.add_argument("--store", help="continue from this checkpoint folder/URL (after foundry.sync)")
    res.add_argument("--nproc", type=int, help="ranks per node for the continued run")
    rep = sub.add_parser("report", help="one self-contained HTML file for a run or a sweep")
    rep.add_argument(
        "run", metavar="RUN|SWEEP", nargs="+", help="a run, a folder of runs (a sweep), or several"
    )
    rep.add_argument("-o", "--out", help="output file (default <run>/report.html, or ./report-<name>.html)")
    return p


def _ago(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    s = max(s, 0.0)
    return (
        f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m" if s >= 3600 else f"{int(s // 60)}m{int(s % 60):02d}s"
    )


def _short(name: str, limit: int = 56) -> str:
    """A long run name (a Hydra job folder named after its overrides) cut to `limit` characters; any unique
    prefix of a name is accepted where a RUN is expected."""
    return name if len(name) <= limit else name[: limit - 3] + "..."


def format_list(rows: list[RunSummary]) -> str:
    """The `runs list` table (fixed-width columns)."""
    head = ("RUN", "TASK", "STATE", "STEP", "LOSS", "TOK/S", "STARTED", "DURATION", "RESTARTS")
    table = [head] + [
        (_short(r.name), r.task, r.state, f"{r.step}/{r.max_steps or '?'}",
         "-" if r.loss is None else f"{r.loss:.4f}",
         "-" if r.tokens_per_s is None else f"{r.tokens_per_s:.0f}",
         _ago(r.started), _dur(r.duration_s), str(r.restarts))
        for r in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    )


def _logs(root: RunRoot, rel: str, *, follow: bool) -> int:
    text = root.read_text(rel, layout.TRAIN_LOG)
    if text is None:
        raise FileNotFoundError(
            f"{root.url(rel, layout.TRAIN_LOG)}: no {layout.TRAIN_LOG} (Hydra writes it in the run dir)"
        )
    print(redact_text(text), end="", flush=True)
    seen = len(text)
    while follow:
        time.sleep(1.0)
        text = root.read_text(rel, layout.TRAIN_LOG) or ""
        print(redact_text(text[seen:]), end="", flush=True)
        seen = len(text)
    return 0


def _report(args: argparse.Namespace) -> int:
    """One page for every run under the RUN|SWEEP arguments (several arguments must share one root)."""
    picked = [resolve_run(a, root=args.root) for a in args.run]
    root = picked[0][0]
    if any(r.root != root.root for r, _ in picked):
        raise ValueError("report: give runs under one root (names under --root, or folders of one parent)")
    runs: list[str] = []
    for arg, (_, rel) in zip(args.run, picked, strict=True):
        found = [r for r in root.runs() if rel == "." or r == rel or r.startswith(rel + "/")]
        if not found:
            raise FileNotFoundError(f"{arg}: no run directories there")
        runs += [r for r in found if r not in runs]
    rels = [rel for _, rel in picked]
    name = "+".join(Path(rel if rel != "." else root.root.rstrip("/")).name or "runs" for rel in rels)
    if args.out:
        out = Path(args.out)
    elif len(runs) == 1 and not root.remote:
        out = Path(root.url(runs[0], "report.html"))
    else:
        out = Path(f"report-{name}.html")
    write_report(root, runs, title=f"foundry runs report: {name}", out=out)
    print(redact_text(str(out.resolve())))
    return 0


def run(args: argparse.Namespace) -> int:
    """Runs one parsed subcommand; returns the exit code."""
    if args.command == "list":
        root = RunRoot(args.root_arg or args.root)
        if (
            (args.root_arg or args.root != layout.OUTPUTS)
            and not root.remote
            and not Path(root.root).is_dir()
        ):
            raise FileNotFoundError(
                f"{root.root}: no such folder; pass the folder the runs are in (default outputs) or a URL"
            )
        print(
            redact_text(
                format_list([summarize(load_run(root, r), local=not root.remote) for r in root.runs()])
            )
        )
        return 0
    if args.command == "report":
        return _report(args)
    root, rel = resolve_run(args.run, root=args.root)
    files = load_run(root, rel)
    if args.command == "show":
        diff = (
            config_diff(files.run["config"], default_config())
            if args.diff and "config" in files.run
            else None
        )
        ckpts = checkpoints(*checkpoint_folder(root, rel, files.run.get("config", {})))
        overrides = None if args.diff else run_overrides(root, rel)
        print(
            redact_text(
                render_show(files, diff=diff, ckpts=ckpts, icl=icl_results(root, rel), overrides=overrides)
            )
        )
    elif args.command == "logs":
        return _logs(root, rel, follow=args.follow)
    elif args.command == "stop":
        target = stop_run(root, files)
        print(
            f"sent SIGTERM to the {target.what} (pid {target.pid}): "
            "it checkpoints at the next step and exits 75"
        )
    elif args.command == "resume":
        print(redact_text(format_command(resume_command(root, files, store=args.store, nproc=args.nproc))))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (FileNotFoundError, ProcessLookupError, ValueError) as e:
        print(f"error: {redact_text(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as e:
        # a record of a shape `foundry.runs.records` lets through (a value of the wrong type inside it): the
        # run folder is untrusted input, so this is its damage, reported in one line, not a bug's traceback
        detail = " ".join(f"{type(e).__name__}: {e}"[:200].split())
        print(
            f"error: a run's records are damaged or not this version's ({redact_text(detail)})",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130
