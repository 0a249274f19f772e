"""Runs the model, generation, export and eval-adapter tests at both ends of the allowed dependency ranges and on
the GPU image's releases.

Examples:
    python scripts/test_compat.py                 # every end (`make test-compat`)
    python scripts/test_compat.py --ends newest   # one end; --fresh rebuilds its venv first

Each end has its own venv under `/tmp/foundry-compat/<end>` (`--root`), built with the same torch as `make install`
(`constraints.txt`) and the project installed editable with the `peft` and `eval` extras plus the test tools:

- `lowest`: `requirements/lowest.txt` as constraints: the lower bounds of pyproject.toml's runtime dependencies
  (transformers 4.56, numpy 2.0, ...), so the bounds we publish are the ones tested;
- `newest`: `pip install --upgrade --upgrade-strategy eager`: the newest release every range allows (what a user
  gets from `pip install foundry-stack` today; `make install-latest` is the same for the whole dev set);
- `gpu-image`: `requirements/gpu-image.txt` as constraints: the transformers / huggingface-hub / tokenizers releases
  of the GPU machine's image, which `make gpu-check` runs under (it installs none of ours over them); this end also
  runs the compile, FP8 and GPU-matrix tests (GPU_IMAGE_TESTS), the code paths that run there.

A venv is reused while its inputs (pyproject.toml, the constraint files, this script) are unchanged, except that the
newest end is upgraded again on every run (a new release must show up). Prints one JSON line per end with the
versions tested and the counts, then one summary line; exits 1 when any end fails, naming the end and versions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
LOWEST = ROOT / "requirements" / "lowest.txt"
GPU_IMAGE = ROOT / "requirements" / "gpu-image.txt"
ENDS = ("lowest", "newest", "gpu-image")
PINNED = {"lowest": LOWEST, "gpu-image": GPU_IMAGE}
"""The ends installed once under a constraints file (the newest end is upgraded on every run instead)."""
TESTS = [
    "tests/foundry/models",
    "tests/foundry/test_generate.py",
    "tests/foundry/eval",
    "tests/foundry/checkpoint/test_lora.py",
    "tests/foundry/test_tokenizers.py",
]
"""The model (every MPT variant, KV cache, LoRA, export/import), generation, ICL scorer and lm-eval adapter tests."""
GPU_IMAGE_TESTS = [
    "tests/foundry/train/test_compile.py",
    "tests/foundry/train/test_float8.py",
    "tests/scripts/test_gpu_matrix.py",
]
"""What `make gpu-check` runs on the GPU image besides the model: compiled blocks and loss, FP8, the speed matrix."""
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100"]
SHOWN = (
    *(
        line.split("==")[0]
        for line in LOWEST.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    ),
    "huggingface-hub",
    "lm-eval",
    "accelerate",
    "torch",
)
"""Packages whose versions each end reports: the runtime dependencies (the names in lowest.txt) and the eval stack."""


def _run(cmd: list[str], *, log: Path, env: dict[str, str] | None = None) -> None:
    """Runs `cmd`, appending its output to `log`; raises SystemExit naming the log on failure."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"error: `{' '.join(cmd[:6])} ...` failed (exit {proc.returncode}); see {log}")


def _inputs_digest(end: str) -> str:
    h = hashlib.sha256(end.encode())
    for path in (ROOT / "pyproject.toml", CONSTRAINTS, *PINNED.values(), Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_venv(end: str, venv: Path, *, log: Path, fresh: bool) -> Path:
    """The venv for `end`, built (or refreshed) as the module note says; returns its python."""
    py = venv / "bin" / "python"
    stamp = venv / ".foundry-compat"
    digest = _inputs_digest(end)
    env = {**os.environ, "PIP_CONSTRAINT": str(CONSTRAINTS), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if fresh or not stamp.is_file() or stamp.read_text() != digest:
        shutil.rmtree(venv, ignore_errors=True)
        print(f"[compat] {end}: building {venv} (log: {log})", file=sys.stderr, flush=True)
        _run([sys.executable, "-m", "venv", str(venv)], log=log)
        _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], log=log, env=env)
        _run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0"], log=log, env=env)
    elif end in PINNED:
        return py
    else:
        print(f"[compat] {end}: upgrading {venv} to the newest allowed releases", file=sys.stderr, flush=True)
    pick = ["-c", str(PINNED[end])] if end in PINNED else ["--upgrade", "--upgrade-strategy", "eager"]
    _run([str(py), "-m", "pip", "install", "-q", *pick, "-e", ".[peft,eval]", *TEST_TOOLS], log=log, env=env)
    stamp.write_text(digest)
    return py


def installed_versions(py: Path) -> dict[str, str]:
    """`{name: version}` of the packages that matter here, read from the venv's own metadata."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    proc = subprocess.run([str(py), "-c", code, *SHOWN], capture_output=True, text=True, check=True)
    return dict(json.loads(proc.stdout))


def run_tests(py: Path, tests: list[str], *, log: Path, extra: list[str]) -> dict[str, int]:
    """Runs `tests` (slow ones included) in the venv; returns pytest's outcome counts."""
    cmd = [str(py), "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", "-m", "not gpu", *extra]
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        out.write(proc.stdout)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)", tail)}
    counts["exit"] = proc.returncode
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ends", nargs="+", choices=ENDS, default=list(ENDS))
    p.add_argument("--root", type=Path, default=Path("/tmp/foundry-compat"), help="where the venvs live")
    p.add_argument("--fresh", action="store_true", help="rebuild the venvs from scratch")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = p.parse_args(argv)
    failed: list[str] = []
    for end in args.ends:
        args.root.mkdir(parents=True, exist_ok=True)
        log = args.root / f"{end}.log"
        log.write_text("")
        start = time.monotonic()
        py = build_venv(end, args.root / end, log=log, fresh=args.fresh)
        versions = installed_versions(py)
        print(f"[compat] {end}: testing with {versions}", file=sys.stderr, flush=True)
        tests = TESTS + GPU_IMAGE_TESTS if end == "gpu-image" else TESTS
        counts = run_tests(py, tests, log=log, extra=args.pytest_args)
        ok = counts["exit"] == 0
        row = {
            "compat": end,
            "ok": ok,
            **counts,
            "versions": versions,
            "seconds": round(time.monotonic() - start),
        }
        print(json.dumps(row), flush=True)
        if not ok:
            failed.append(f"{end} (transformers {versions.get('transformers', '?')}; log: {log})")
    if failed:
        print("FAILED on " + ", ".join(failed), flush=True)
        return 1
    print(f"compat ok: {', '.join(args.ends)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
