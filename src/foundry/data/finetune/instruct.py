"""A small offline instruction dataset for the CPU finetuning recipe, from text that ships with Python.

Design note: like the quick start's corpus, it needs no network and gives the same rows on every machine
with the same Python: questions about Python's built-ins (answer: the first line of the docstring) and
top-level standard-library modules (the first line of the module docstring, read with `ast`, nothing
imported), plus two-number additions. Answers are short and mostly memorisable, so a tiny model's response
loss falls within minutes and its generations can be checked by eye. Rows are prompt/response (or chat
`messages`), split deterministically by a hash of the question into `train.jsonl` and `val.jsonl`.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import hashlib
import inspect
import json
import random
import sysconfig
from pathlib import Path
from typing import Any

__all__ = ["instruction_pairs", "main", "write_instruct_dataset"]

PROMPT = "### Question:\n{question}\n### Answer:\n"


def _first_line(doc: str | None) -> str | None:
    line = (doc or "").strip().split("\n", 1)[0].strip()
    return line if 8 <= len(line) <= 160 else None


def _builtin_pairs() -> list[tuple[str, str]]:
    pairs = []
    for name in sorted(dir(builtins)):
        obj = getattr(builtins, name)
        if (
            name.startswith("_")
            or not callable(obj)
            or isinstance(obj, type)
            and issubclass(obj, BaseException)
        ):
            continue
        answer = _first_line(inspect.getdoc(obj))
        if answer and answer[0].isupper():
            pairs.append((f"What does the Python built-in `{name}` do?", answer))
    return pairs


def _module_pairs(max_modules: int) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if path.stem.startswith("_") or len(pairs) >= max_modules:
            continue
        try:
            answer = _first_line(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if answer:
            pairs.append((f"What is the Python module `{path.stem}` for?", answer))
    return pairs


def instruction_pairs(
    *, seed: int = 0, additions: int = 300, max_modules: int = 150
) -> list[tuple[str, str]]:
    """(question, answer) pairs: built-ins, stdlib modules, and `additions` sums of numbers below 50."""
    rng = random.Random(seed)
    sums = []
    for _ in range(additions):
        a, b = rng.randrange(50), rng.randrange(50)
        sums.append((f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."))
    pairs = _builtin_pairs() + _module_pairs(max_modules) + sums
    # one answer per question (later duplicates win), order kept
    return list(dict(pairs).items())


def _row(question: str, answer: str, *, chat: bool) -> dict[str, Any]:
    if chat:
        return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
    return {"prompt": PROMPT.format(question=question), "response": answer}


def write_instruct_dataset(
    out: str | Path,
    *,
    seed: int = 0,
    eval_fraction: float = 0.1,
    chat: bool = False,
    additions: int = 300,
    max_modules: int = 150,
) -> dict[str, int]:
    """Writes `<out>/train.jsonl` and `<out>/val.jsonl`; returns rows per split."""
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction={eval_fraction} must be in (0, 1)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for question, answer in instruction_pairs(seed=seed, additions=additions, max_modules=max_modules):
        h = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") / 2**32
        splits["val" if h < eval_fraction else "train"].append(_row(question, answer, chat=chat))
    for split, rows in splits.items():
        tmp = out / f".{split}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(out / f"{split}.jsonl")
    return {k: len(v) for k, v in splits.items()}


def main(argv: list[str] | None = None) -> dict[str, int]:
    """CLI: `python -m foundry.data.finetune.instruct --out DIR [--chat] [--seed N]`."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (train.jsonl, val.jsonl)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval_fraction", type=float, default=0.1)
    p.add_argument("--additions", type=int, default=300, help="number of addition questions")
    p.add_argument(
        "--chat", action="store_true", help="write chat `messages` rows instead of prompt/response"
    )
    args = p.parse_args(argv)
    counts = write_instruct_dataset(
        args.out, seed=args.seed, eval_fraction=args.eval_fraction, chat=args.chat, additions=args.additions
    )
    print(json.dumps({"out": str(args.out), **counts}))
    return counts


if __name__ == "__main__":
    main()
