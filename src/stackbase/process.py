"""Process identity that a run folder cannot forge (issue 39): which pid `runs stop` may signal.

A run folder is not trusted: `outputs/` may be shared, a folder may come from a synced bucket, and the pid,
host, boot id and start time it records are all world-readable in /proc, so a forged `live.json` could name
any process its reader may signal. Proof therefore lives where only the run's owner can write:

- `claim(run_dir, role)`, called by the launcher and by rank 0, draws a random nonce and writes
  `<registry>/<pid>.json` (mode 0600, in a 0700 folder owned by the user; `FOUNDRY_PROC_DIR`, else
  `$XDG_RUNTIME_DIR/foundry-procs`, else `~/.cache/foundry/procs`) holding the nonce, the resolved run folder,
  the process's start token (boot id + start time: a reused pid does not share it) and its command line. The
  run folder records only `proof`, the nonce's SHA-256; the file is removed when the process exits.
- `verify(pid, run_dir, proof)` says why `pid` is NOT the run's process, or None when it is: the registry
  entry exists, is a plain file owned by this user and readable by no one else, in a folder likewise; its
  nonce hashes to `proof`; its run folder is this one; the pid's start token and command line are still the
  ones recorded (a pid reused, or a process that exec'd, fails). A record without proof is never trusted.

Another user's run, or a folder naming a process that never claimed it, reads as "not running here". No
locks: each process writes only its own entry (atomic replace), readers tolerate a missing or half-gone one.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Claim", "claim", "pid_alive", "registry_dir", "start_token", "verify"]

PROC_DIR_ENV = "FOUNDRY_PROC_DIR"


def pid_alive(pid: object) -> bool:
    """True while process `pid` runs on this machine (signal 0 probe; a foreign user's process counts).

    A zombie (exited, not yet reaped by its parent) counts as dead: it holds no files and will never run
    again. The one liveness probe of the project (cache reservations, worker batch arenas, the launcher,
    `foundry.runs`).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        # not one process (a forged record's "x", True, 0 or -1: kill(-1) means every process)
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        # not a pid at all (a forged record's -1 or 2**70)
        return False
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        # no procfs (or it just exited): trust the probe
        return True
    return text.rsplit(")", 1)[1].split()[0] != "Z"


def start_token(pid: int) -> str | None:
    """The boot's id and process `pid`'s start time in clock ticks since boot (Linux procfs): a later process
    reusing the pid does not share it. None where procfs is missing or the process is gone. Not a secret."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # field 22 of stat: starttime (fields[0] is field 3, the state)
        return f"{boot}:{fields[19]}"
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def registry_dir() -> Path:
    """Where this user's processes record their claims (see the module note)."""
    if os.environ.get(PROC_DIR_ENV):
        return Path(os.environ[PROC_DIR_ENV])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "foundry-procs"
    return Path.home() / ".cache" / "foundry" / "procs"


def _private(path: Path, *, folder: bool) -> bool:
    """`path` is a plain file / real folder (not a link) owned by this user, with no group or other access."""
    try:
        st = path.lstat()
    except OSError:
        return False
    kind = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What a claiming process writes into its run folder's records (`proof`, never the nonce)."""

    pid: int
    token: str | None
    proof: str


def _digest(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def claim(run_dir: str | Path, role: str) -> Claim:
    """Registers this process as `role` (launcher | rank0) of `run_dir`; the entry goes at exit.

    Returns the `Claim` to record in the run folder. Never raises: where the registry cannot be written (a
    read-only home), the claim has a proof no entry backs, so `runs stop` refuses to signal (the safe side).
    """
    pid, nonce = os.getpid(), secrets.token_hex(16)
    entry = {
        "pid": pid, "role": role, "nonce": nonce, "run_dir": str(Path(run_dir).resolve()),
        "token": start_token(pid), "cmdline": _cmdline(pid),
    }  # fmt: skip
    folder = registry_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _private(folder, folder=True):
            _prune(folder)
            path = folder / f"{pid}.json"
            tmp = folder / f".{pid}.{nonce[:8]}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
            atexit.register(_release, path, nonce)
    except OSError:
        pass
    return Claim(pid=pid, token=entry["token"], proof=_digest(nonce))  # type: ignore[arg-type]


def _release(path: Path, nonce: str) -> None:
    """Removes this process's entry (not a later one's that reused the pid)."""
    entry = _read(path)
    if entry is not None and entry.get("nonce") == nonce:
        path.unlink(missing_ok=True)


def _read(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text()[:65536])
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _prune(folder: Path) -> None:
    """Drops entries of processes that are gone (a SIGKILL skips atexit)."""
    for path in folder.glob("*.json"):
        entry = _read(path)
        pid = entry.get("pid") if entry else None
        if not isinstance(pid, int) or start_token(pid) != entry.get("token"):  # type: ignore[union-attr]
            path.unlink(missing_ok=True)


def verify(pid: object, run_dir: str | Path, proof: object) -> str | None:
    """Why `pid` is not a process that claimed `run_dir` with `proof` (see the module note), or None."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return f"the record's pid {pid!r} is not a process id"
    if not isinstance(proof, str) or not proof:
        return "the record carries no proof of identity (written by another version, or forged)"
    if not pid_alive(pid):
        return f"pid {pid} is gone"
    folder = registry_dir()
    path = folder / f"{pid}.json"
    if not _private(folder, folder=True) or not _private(path, folder=False):
        return f"pid {pid} never claimed a run of this user's here"
    entry = _read(path) or {}
    nonce = entry.get("nonce")
    if not isinstance(nonce, str) or not secrets.compare_digest(_digest(nonce), proof):
        return f"pid {pid} belongs to another run (its proof differs)"
    if entry.get("run_dir") != str(Path(run_dir).resolve()):
        return f"pid {pid} belongs to another run, in {entry.get('run_dir')}"
    if entry.get("token") != start_token(pid) or entry.get("cmdline") != _cmdline(pid):
        return f"pid {pid} is now another process"
    return None
