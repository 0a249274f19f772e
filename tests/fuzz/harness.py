"""The fuzz suite's runner (issue 39): each entry point's hypothesis loop runs in a child process, under limits.

Design note: the contract checked for every generated input is the one a user sees at the command line: the
entry point returns (a correct result), or raises an exception its command reports as one `error:` line
(`foundry.cli.USER_ERRORS` for `train.py`, `ValueError`/`OSError` for the tools, `foundry.errors.run_tool`)
whose message names what is wrong. Everything else is a finding:

- a raw traceback: any other exception (`KeyError`, `TypeError`, `RecursionError`, `MemoryError`, ...), or a
  bare `UnicodeDecodeError` / `json.JSONDecodeError` (a `ValueError`, but not naming the file), or a message
  that names no file or field the module says it must;
- a traceback printed by the code itself (a thread that died), or output holding the secret;
- a write, delete or rename outside the folders the entry point may write (`sys.addaudithook`), a process
  started or a signal sent (a pickle that would call `os.system`);
- a hang: one input running past `per_example_s` (a timer signal in the child) or the child past its limit;
- memory: the loop runs under `RLIMIT_AS` = the address space after imports and setup + `memory_mb`, so an
  input that makes the reader allocate what a size field claims ends in `MemoryError`, a finding.

The child runs the loop to the end, keeping every distinct finding (by kind, exception type and the source
line that raised it) with its first input, so one run reports all of them; the test then fails listing them.
Limits hold in the child only: the pytest process is never limited. A module under `tests/fuzz` supplies
`cases()` (a strategy), `prepare(work)` (valid inputs built once), `build(case, folder, base)` (writes one
input's files, unguarded), `attempt(built, folder)` (calls the entry point, guarded), `ALLOWED` (the exception
types its command reports as one line) and optionally `NAMES` (words an error message may name instead of the
input's folder), `write_roots(folder)` (where the entry point may write), `planted(folder)` (files outside the
input's folder it must not even open), `EXAMPLES()` (inputs always run first), `KNOWN` (findings in code the
suite may not fix yet: reported, not failed), `SECRET_IN_PATH`, `MEMORY_MB`, `PER_EXAMPLE_S`.

Reproduce: the short run is derandomized (hypothesis derives its seed from the test), the long one prints its
seed; `FUZZ_SEED=<n>` reruns a long run's inputs, `FUZZ_EXAMPLES=<n>` changes the count.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
SECRET_ENV = "FUZZ_API_TOKEN"
"""A credential-like variable set in the child: its value must never appear in what an entry point prints."""
SHORT_EXAMPLES = 30
LONG_EXAMPLES = 500
SHORT_LIMIT_S = 120
"""The child's hang limit in the short run (imports take 3-10 s, every loop a few seconds)."""
LONG_LIMIT_S = 540


@dataclass
class Figures:
    """What one entry point's loop did."""

    entry: str
    examples: int
    ok: int
    refused: int
    seconds: float
    seed: int | None
    findings: list[dict[str, Any]]
    slowest: list[tuple[float, str]]

    def line(self) -> str:
        seed = "derandomized" if self.seed is None else f"seed {self.seed}"
        return (
            f"fuzz {self.entry}: {self.examples} inputs ({self.ok} accepted, {self.refused} refused with one "
            f"line), {len(self.findings)} findings, {self.seconds:.1f} s ({seed})"
        )


def _format(finding: dict[str, Any]) -> str:
    return (
        f"- {finding['kind']}: {finding['type']} at {finding['where']} ({finding['count']}x)\n"
        f"  message: {finding['message']}\n  input: {finding['input']}"
    )


def fuzz(test_file: str, tmp_path: Path, *, long: bool = False) -> Figures:
    """Runs the fuzz loop of the module in `test_file` in a child process; fails the calling test on any finding.

    Args:
        test_file: The test module's `__file__`.
        tmp_path: The test's folder; the child works in `tmp_path/work` and may write nowhere else.
        long: The long run (random seed, `LONG_EXAMPLES` inputs) instead of the short one.
    """
    work = tmp_path / "work"
    work.mkdir()
    module = ".".join(Path(test_file).resolve().relative_to(REPO).with_suffix("").parts)
    mod = importlib.import_module(module)
    examples = int(os.environ.get("FUZZ_EXAMPLES", 0)) or (
        getattr(mod, "LONG_EXAMPLES", LONG_EXAMPLES)
        if long
        else getattr(mod, "SHORT_EXAMPLES", SHORT_EXAMPLES)
    )
    seed = (
        (int(os.environ["FUZZ_SEED"]) if os.environ.get("FUZZ_SEED") else random.randrange(1 << 32))
        if long
        else None
    )
    secret = "fz" + os.urandom(12).hex()
    result = tmp_path / "result.json"
    config = {"module": module, "examples": examples, "seed": seed, "result": str(result), "work": str(work)}
    env = {
        **{
            k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS", "FOUNDRY_MAX_"))
        },
        "PYTHONPATH": os.pathsep.join([str(REPO), str(SRC)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(work / "home"),
        "XDG_CACHE_HOME": str(work / "home" / ".cache"),
        "TMPDIR": str(work / "tmp"),
        "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MiB of address space per thread arena otherwise
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        SECRET_ENV: secret,
    }
    for var in ("STREAMING_CACHE", "FOUNDRY_CACHE", "EVAL_DATA", "FOUNDRY_SECRET_ENV", "HYDRA_FULL_ERROR"):
        env.pop(var, None)
    limit = LONG_LIMIT_S if long else SHORT_LIMIT_S
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.fuzz.harness", json.dumps(config)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        progress = work / "progress.txt"
        last = progress.read_text(errors="replace")[:2000] if progress.exists() else "(none)"
        raise AssertionError(
            f"{module}: the fuzz loop hung (over {limit} s); the input it was on:\n{last}"
        ) from None
    if proc.returncode != 0 or not result.exists():
        start = proc.stderr.rfind("Traceback (most recent call last)")
        tail = proc.stderr[start:] if start >= 0 else proc.stderr
        raise AssertionError(
            f"{module}: the fuzz child failed (exit {proc.returncode}) after {time.monotonic() - t0:.1f} s:\n"
            f"{tail[:3000]}\n...\n{tail[-3000:]}"
        )
    figures = Figures(**json.loads(result.read_text()))
    known = getattr(mod, "KNOWN", [])
    tolerated = [f for f in figures.findings if _is_known(f, known)]
    figures.findings = [f for f in figures.findings if not _is_known(f, known)]
    print(figures.line())
    for f in tolerated:
        print(f"known (not failing, see the module's KNOWN):\n{_format(f)}")
    assert not figures.findings, f"{figures.line()}\n" + "\n".join(_format(f) for f in figures.findings)
    return figures


def _is_known(finding: dict[str, Any], known: list[tuple[str, str, str]]) -> bool:
    """Whether `finding` matches a `KNOWN` entry: (kind, exception type or "*", source file prefix or "*")."""
    return any(
        kind == finding["kind"]
        and kind_type in ("*", finding["type"])
        and (prefix == "*" or finding["where"].startswith(prefix))
        for kind, kind_type, prefix in known
    )


# ------------------------------------------------------------------------------------------------ the child


class Hang(BaseException):
    """One input ran past its time bound (raised by the timer signal; not an `Exception`, so no reader's
    `except Exception` swallows it)."""


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    # event -> (index of a path argument, index of the dir_fd it is relative to), as `sys.audit` passes them
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.link": ((1, 3),),
    "os.truncate": ((0, None),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "shutil.rmtree": ((0, 1),),
    "shutil.copyfile": ((1, None),),
    "shutil.move": ((0, None), (1, None)),
}
_PROCESS_EVENTS = {
    "os.system",
    "subprocess.Popen",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "pty.spawn",
}


class _Guard:
    """The audit hook: while `active`, records writes outside `roots` and any process or signal."""

    def __init__(self) -> None:
        self.active = False
        self.busy = False
        self.roots: list[str] = []
        self.planted: set[str] = set()
        self.events: list[str] = []

    def allowed(self, path: Any) -> bool:
        if isinstance(path, int):
            return True  # an open file descriptor
        path = os.fsdecode(os.fspath(path))
        if path in ("/dev/null", "/dev/stdout", "/dev/stderr"):
            return True
        real = os.path.realpath(os.path.abspath(path))
        return any(real == r or real.startswith(r + os.sep) for r in self.roots)

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or self.busy:
            return
        self.busy = True
        try:
            if event == "open" and len(args) >= 3:
                path, mode, flags = args[:3]
                writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and flags & _WRITE_FLAGS
                )
                if writes and path is not None and not self.allowed(path):
                    self.events.append(f"wrote {os.fsdecode(os.fspath(path))} (open {mode or flags})")
                elif self.planted and not isinstance(path, int) and path is not None:
                    real = os.path.realpath(os.path.abspath(os.fsdecode(os.fspath(path))))
                    if real in self.planted:
                        self.events.append(f"opened {real} (a file outside the input's folder)")
            elif event in _PATH_EVENTS:
                for i, fd in _PATH_EVENTS[event]:
                    if i >= len(args) or args[i] is None:
                        continue
                    path = args[i]
                    if fd is not None and fd < len(args) and isinstance(args[fd], int) and args[fd] >= 0:
                        path = os.path.join(os.readlink(f"/proc/self/fd/{args[fd]}"), os.fsdecode(path))
                    if not self.allowed(path):
                        self.events.append(f"{event} {path!r}")
            elif event in _PROCESS_EVENTS:
                self.events.append(f"{event} {args!r:.200}")
        except Exception as err:  # a path we cannot judge is recorded, not raised into the reader
            self.events.append(f"{event}: unjudged ({err!r:.100})")
        finally:
            self.busy = False


def _where(err: BaseException) -> str:
    """The innermost frame in `src/` (else the innermost) of `err`'s traceback, as `path:line`."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(SRC))]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    name = frame.filename
    with contextlib.suppress(ValueError):
        name = str(Path(name).relative_to(REPO))
    return f"{name}:{frame.lineno}"


def _short(value: Any, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class _Capture:
    """Points file descriptors 1 and 2 at a file while an input runs (prints, warnings, logging, C code)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "w+b")
        self.saved = (os.dup(1), os.dup(2))

    def __enter__(self) -> _Capture:
        sys.stdout.flush()
        sys.stderr.flush()
        self.file.seek(0)
        self.file.truncate()
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)

    def text(self) -> str:
        self.file.seek(0)
        return self.file.read(1 << 20).decode("utf-8", "replace")


def _set_memory_limit(budget_mb: int) -> int:
    """`RLIMIT_AS` = the address space in use now + `budget_mb`; returns the limit in MiB."""
    with open("/proc/self/status") as f:
        size_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    limit = size_kb * 1024 + budget_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit >> 20


def _message_ok(message: str, names: tuple[str, ...], folder: Path) -> bool:
    return any(n in message for n in (*names, str(folder), folder.name))


def _child(config: dict[str, Any]) -> None:
    import warnings

    from hypothesis import HealthCheck, Phase, given, seed, settings

    from stackbase.secrets import redact_text

    mod = importlib.import_module(config["module"])
    work = Path(config["work"])
    for sub in ("home", "tmp"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    secret = os.environ[SECRET_ENV]
    # a secret in the path of every input: whatever prints a path must mask it (issue 39, item 3)
    cases_dir = work / (f"in-{secret}" if getattr(mod, "SECRET_IN_PATH", True) else "in")
    cases_dir.mkdir()
    base = mod.prepare(work / "base")
    allowed_types: tuple[type[BaseException], ...] = mod.ALLOWED
    names: tuple[str, ...] = tuple(getattr(mod, "NAMES", ()))
    per_example = float(getattr(mod, "PER_EXAMPLE_S", 20))
    memory_mb = _set_memory_limit(int(getattr(mod, "MEMORY_MB", 1024)))
    warnings.simplefilter("always")
    guard = _Guard()
    sys.addaudithook(guard)
    capture = _Capture(work / "output.txt")
    progress = work / "progress.txt"
    findings: dict[tuple[str, str, str], dict[str, Any]] = {}
    counts = {"examples": 0, "ok": 0, "refused": 0}
    slowest: list[tuple[float, str]] = []

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"one input ran past {per_example} s")

    signal.signal(signal.SIGALRM, on_alarm)

    def find(kind: str, err: BaseException | None, message: str, case: Any, where: str = "-") -> None:
        key = (kind, type(err).__name__ if err else "-", _where(err) if err else where)
        if key in findings:
            findings[key]["count"] += 1
            return
        findings[key] = {
            "kind": kind,
            "type": key[1],
            "where": key[2],
            "message": message[:600],
            "input": _short(case),
            "count": 1,
        }

    def run_one(case: Any) -> None:
        counts["examples"] += 1
        n = counts["examples"]
        folder = cases_dir / "case"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        progress.write_text(f"input {n}: {_short(case, 4000)}\n")
        t0 = time.monotonic()
        built = mod.build(case, folder, base)
        roots = getattr(mod, "write_roots", lambda f: [f])(folder)
        guard.roots = [os.path.realpath(r) for r in [*roots, work / "tmp", work / "home"]]
        guard.planted = {os.path.realpath(p) for p in getattr(mod, "planted", lambda f: [])(folder)}
        guard.events = []
        err: BaseException | None = None
        with capture:
            guard.active = True
            signal.setitimer(signal.ITIMER_REAL, per_example)
            try:
                mod.attempt(built, folder)
            except BaseException as e:  # classified below
                err = e
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                guard.active = False
        took = time.monotonic() - t0
        slowest.append((took, _short(case, 200)))
        slowest.sort(key=lambda x: -x[0])
        del slowest[3:]
        output = capture.text()
        for event in guard.events:
            find("escaped its folder or ran code", None, event, case, where=event.split()[0])
        if "Traceback (most recent call last)" in output:
            find("printed a traceback", err, output[-600:], case)
        if secret in output:
            lines = [line.replace(secret, "<SECRET>") for line in output.splitlines() if secret in line]
            find("printed the secret", err, " | ".join(lines)[:600], case)
        if err is None:
            counts["ok"] += 1
            return
        message = " ".join(str(err).split())
        if isinstance(err, Hang):
            find("hang", err, str(err), case)
            raise err  # the reader's state after an interrupted call is not worth trusting: stop here
        if isinstance(err, KeyboardInterrupt):
            raise err
        if type(err) in (UnicodeDecodeError, json.JSONDecodeError) or not isinstance(err, allowed_types):
            find("raw traceback", err, f"{type(err).__name__}: {message}", case)
        elif not message or not _message_ok(message, names, folder):
            find("error naming no file or field", err, message, case)
        elif secret in redact_text(message):
            find("error line holds the secret", err, message, case)
        else:
            counts["refused"] += 1

    examples = int(config["examples"])
    hyp = settings(
        max_examples=examples,
        derandomize=config["seed"] is None,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )

    loop = given(mod.cases())(run_one)
    loop = hyp(loop)
    if config["seed"] is not None:
        loop = seed(config["seed"])(loop)
    t0 = time.monotonic()
    try:
        for extra in getattr(mod, "EXAMPLES", lambda: [])():
            run_one(extra)
        loop()
    except Hang:
        pass
    seconds = time.monotonic() - t0
    Path(config["result"]).write_text(
        json.dumps(
            {
                "entry": getattr(mod, "ENTRY", config["module"]),
                "examples": counts["examples"],
                "ok": counts["ok"],
                "refused": counts["refused"],
                "seconds": round(seconds, 2),
                "seed": config["seed"],
                "findings": list(findings.values()),
                "slowest": [[round(t, 3), c] for t, c in slowest],
            }
        )
    )
    del memory_mb


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
