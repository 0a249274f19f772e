"""`Checkpointer`: saves checkpoints during training, publishing each one only once it is complete.

Design note: a save has a short synchronous part on every rank (gather or shard the state and copy it to CPU
memory; a multi-rank sharded save writes its torch.distributed.checkpoint files here, since that is a
collective) and a background part (write to local staging, which for a local `save_folder` is the checkpoint
directory itself, then hash, upload, publish).
Ranks never talk to each other from the background thread: each rank uploads its own files and then a small
`.done-rank{r}.json` marker listing them with sizes and digests; rank 0 waits for every marker, merges them
into `manifest.json`, publishes it last, then updates `latest` and applies retention. A crash anywhere before
the manifest leaves a torn directory that discovery skips and the next retention pass removes.

Saves go through an `UploadQueue` (see its note): to an object store `save` never waits for an earlier upload
(to a local folder it does, so every checkpoint is kept: a disk has no outages), so training goes on
through a store outage; while one checkpoint is in flight only the newest later one waits, and an older
waiting one is dropped. Ranks drop independently (each has its own queue), so a rank that drops a multi-rank
sharded checkpoint uploads a `.dropped-rank{r}.json` marker instead of its files, and rank 0, waiting for
markers, abandons that checkpoint (it stays torn and is removed by retention once a newer one is published)
rather than waiting for files that will never come. Nothing published is deleted except by retention, which
keeps the newest `save_num_checkpoints_to_keep` published ones.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch import nn

from foundry.checkpoint.config import CheckpointConfig
from foundry.checkpoint.layout import (
    HASH,
    LATEST,
    MANIFEST,
    Manifest,
    checkpoint_name,
    fill_save_folder,
    find_checkpoints,
)
from foundry.checkpoint.queue import UploadQueue
from foundry.checkpoint.state import collect, save_full, save_sharded, snapshot
from foundry.checkpoint.store import CheckpointStore, transfer_policy
from foundry.parallel.dist import barrier, rank, world_size
from foundry.rng import rng_state
from foundry.rundir import layout
from streaming.format.hashing import hash_file
from streaming.storage import redact

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["Checkpointer", "SaveJob", "resolve_format"]

log = logging.getLogger(__name__)
_MARKER = ".done-rank{rank}.json"
_DROPPED = ".dropped-rank{rank}.json"


def resolve_format(fmt: str, model: nn.Module) -> str:
    """`auto` -> `sharded` when any submodule of `model` (maybe wrapped) is FSDP2-sharded, else `full`."""
    if fmt != "auto":
        return fmt
    from torch.distributed.fsdp import FSDPModule

    return "sharded" if any(isinstance(m, FSDPModule) for m in model.modules()) else "full"


@dataclass
class SaveJob:
    """One checkpoint on its way out (what the background thread needs)."""

    name: str
    staging: str
    files: list[str]
    manifest: Manifest
    started: float
    blocked: float
    write: Callable[[], list[str]] | None = None
    """Writes the files in the background (returns their names); None when they are already written."""
    clear: bool = False
    """Rank 0 removes the store's leftovers of an earlier attempt at this name first (see `_clear`)."""


class Checkpointer:
    """Saves a trainer's state every `every_steps` steps and at the end.

    Args:
        cfg: The checkpoint config (`save_folder` must be set).
        run_name: Expands `{run_name}` in `save_folder`.
        run_dir: Default parent of the local staging folder.
        every_steps: Save interval in optimizer steps (0: only at the end).
        model_config: Recorded in the manifest (autoresume compares it with the current config).
        extra: More facts for the manifest (e.g. the global batch size).
    """

    def __init__(
        self,
        cfg: CheckpointConfig,
        *,
        run_name: str,
        run_dir: str,
        every_steps: int,
        model_config: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> None:
        if not cfg.save_folder:
            raise ValueError("Checkpointer needs checkpoint.save_folder")
        self.cfg = cfg
        self.store = CheckpointStore(
            fill_save_folder(cfg.save_folder, run_name=run_name), policy=transfer_policy(cfg.transfer_budget)
        )
        self.run_name = run_name
        self.every_steps = every_steps
        self.model_config = model_config
        self.extra = dict(extra or {})
        self.scratch = os.path.join(run_dir, layout.CHECKPOINT_SCRATCH)
        self.staging_root = cfg.staging_folder or os.path.join(run_dir, ".checkpoint-staging")
        self.rank, self.world = rank(), world_size()
        self.last_saved_step = -1
        self.last_blocked = 0.0
        self._queue: UploadQueue[SaveJob] = UploadQueue(self._finish, self._drop)
        # top-level names in the store before the first save (rank 0)
        self._present: set[str] | None = None

    # ----------------------------------------------------------------- when
    def should_save(self, step: int, *, final: bool) -> bool:
        """True at every `every_steps` multiple and at the final step (never twice for one step)."""
        if step == self.last_saved_step or step == 0:
            return False
        return final or (self.every_steps > 0 and step % self.every_steps == 0)

    # ----------------------------------------------------------------- save
    def save(self, trainer: Trainer, *, fmt: str) -> None:
        """Saves the trainer's state now (every rank calls it); returns once training may continue.

        To an object store it does not wait for an earlier checkpoint's upload: this one queues behind it
        (replacing any older one still waiting), so a slow or unreachable store never stops training. A local
        save folder cannot have an outage, so there every checkpoint is kept: the save waits for the previous
        one's write to finish.
        """
        if self.store.remote:
            self.poll()
        else:
            self.wait()
        start = time.perf_counter()
        s = trainer.state
        name = checkpoint_name(epoch=s.epoch, step=s.step)
        staging = self.store.local_path(name) or os.path.join(self.staging_root, name)
        clear_later = self.store.remote and self.cfg.async_upload and (fmt != "sharded" or self.world == 1)
        self._clear(name, staging, later=clear_later)
        weights_only, adapters_only = self.cfg.save_weights_only, self.cfg.save_adapters_only
        # a few small tensors: one file
        fmt = "full" if adapters_only else fmt
        optimizer = None if weights_only else trainer.optimizer
        run_state = None if weights_only else trainer.run_state()
        # What may wait for the background thread: writing itself, when this rank can write alone (full format
        # on rank 0, or sharded in one process); the state is then copied first if it is the live CPU tensors.
        if fmt == "sharded":
            model_sd, optim_sd = collect(trainer.model, optimizer, full=False)
            payload: dict[str, Any] = {
                "model_sd": model_sd,
                "optim_sd": optim_sd,
                "run_state": run_state,
                "rng": rng_state(),
            }
            # under a process group dcp.save is a collective: it must run here, on every rank
            deferred = not (dist.is_available() and dist.is_initialized())
            writer: partial[list[str]] | None = partial(save_sharded, staging, rank=self.rank)
        else:
            model_sd, optim_sd = collect(trainer.model, optimizer, full=True, trainable_only=adapters_only)
            # other ranks get {} from a full gather
            if adapters_only and not model_sd and self.rank == 0:
                raise ValueError(
                    "checkpoint.save_adapters_only=true but the model has no trainable adapters: set "
                    "model.peft_config (e.g. +peft=lora)"
                )
            rngs = None if weights_only else self._gather_rngs()
            payload = {"model_sd": model_sd, "optim_sd": optim_sd, "run_state": run_state, "rngs": rngs}
            deferred = True
            writer = partial(save_full, staging) if self.rank == 0 else None
        deferred = deferred and self.cfg.async_upload
        if deferred and (fmt == "sharded" or trainer.device.type == "cpu"):
            # a full state on a GPU is already a CPU copy (`cpu_offload`)
            payload = snapshot(payload)
        write = None
        if writer is not None:
            write = partial(writer, **payload)
        files: list[str] = []
        if write is not None and not deferred:
            files, write = write(), None
        manifest = Manifest(
            step=s.step,
            epoch=s.epoch,
            format=fmt,
            world_size=self.world,
            weights_only=weights_only,
            files={},
            tokens=s.tokens,
            samples=s.samples,
            run_name=self.run_name,
            model_config=self.model_config,
            extra=self.extra,
            adapters_only=adapters_only,
        )
        job = SaveJob(name, staging, files, manifest, start, 0.0, write, clear=clear_later)
        self.last_saved_step = s.step
        if self.cfg.async_upload:
            job.blocked = time.perf_counter() - start
            replaced = self._queue.submit(job)
            if replaced is not None and self.rank == 0:
                print(
                    f"[foundry] checkpoint {replaced.name} dropped before upload: {job.name} replaces it "
                    "while an earlier upload waits on the store (training goes on)",
                    flush=True,
                )
        else:
            self._finish(job)
            job.blocked = time.perf_counter() - start
        self.last_blocked = job.blocked

    def _gather_rngs(self) -> list[Any]:
        mine = rng_state()
        if self.world == 1:
            return [mine]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, mine)
        return out

    def _clear(self, name: str, staging: str, *, later: bool) -> None:
        """Removes leftovers of an earlier attempt at the same checkpoint (before any rank writes).

        `later`: rank 0 is the only rank that uploads this checkpoint, to an object store, so it removes the
        store's leftovers on the background thread just before its upload (`_clear_store`) and a store outage
        never holds up training here.
        """
        if self.rank == 0 and not later:
            self._clear_store(name)
        if os.path.isdir(staging) and self.store.remote:
            shutil.rmtree(staging, ignore_errors=True)
        barrier()

    def _clear_store(self, name: str) -> None:
        """Deletes `name/*` from the store if it was there before this process's first save.

        Only such names can have leftovers (later ones are this process's own, and steps only grow), so the
        store is listed once, not at every save.
        """
        if self._present is None:
            self._present = {f.split("/", 1)[0] for f in self.store.list() if "/" in f}
        if name in self._present:
            leftovers = self.store.list(name)
            if leftovers:
                self.store.delete_dir(name, [f[len(name) + 1 :] for f in leftovers])

    # ----------------------------------------------------------------- background
    def _finish(self, job: SaveJob) -> None:
        if job.clear and self.rank == 0:
            self._clear_store(job.name)
        if job.write is not None:
            job.files = job.write()
        metas: dict[str, dict[str, Any]] = {}
        for f in job.files:
            path = os.path.join(job.staging, f)
            metas[f] = {"bytes": os.path.getsize(path), HASH: hash_file(HASH, path)}
            self.store.put(path, f"{job.name}/{f}")
        if self.store.remote:
            self._unstage(job)
        if job.manifest.format == "sharded" and self.world > 1:
            self.store.put_text(
                json.dumps(metas), f"{job.name}/{_MARKER.format(rank=self.rank)}", scratch=self.scratch
            )
            if self.rank != 0:
                return
            merged = self._await_markers(job.name)
            if merged is None:
                return
            metas = merged
        if self.rank != 0:
            return
        job.manifest.files = metas
        self.store.put_text(job.manifest.to_json(), f"{job.name}/{MANIFEST}", scratch=self.scratch)
        self.store.put_text(job.name + "\n", LATEST, scratch=self.scratch)
        size = sum(m["bytes"] for m in metas.values())
        how = f"training blocked {job.blocked:.2f} s, " if self.cfg.async_upload else "synchronous, "
        print(
            f"[foundry] checkpoint {redact(self.store.url(job.name))} complete: {size / 1e6:.1f} MB, "
            f"{how}done after {time.perf_counter() - job.started:.2f} s",
            flush=True,
        )
        self._retain(job.manifest.step)

    def _unstage(self, job: SaveJob) -> None:
        """Removes this rank's staged files of `job`, and the folder once empty: the ranks on one machine
        share it, and a rank with nothing to write (full format, rank > 0) must not remove what rank 0 is
        writing."""
        if not job.files:
            return
        for f in job.files:
            path = os.path.join(job.staging, f)
            if os.path.exists(path):
                os.remove(path)
        try:
            os.rmdir(job.staging)
        except OSError:
            pass

    def _drop(self, job: SaveJob) -> None:
        """A waiting job replaced by a newer one: remove what this rank staged;
        tell rank 0 (multi-rank sharded)."""
        self._unstage(job)
        if job.manifest.format == "sharded" and self.world > 1 and self.rank != 0:
            self.store.put_text("{}", f"{job.name}/{_DROPPED.format(rank=self.rank)}", scratch=self.scratch)

    def _await_markers(self, name: str, timeout: float = 3600.0) -> dict[str, Any] | None:
        """Every rank's file list, once each has uploaded its marker;
        None when a rank dropped this checkpoint."""
        want = {_MARKER.format(rank=r) for r in range(self.world)}
        dropped = {_DROPPED.format(rank=r) for r in range(self.world)}
        deadline = time.monotonic() + timeout
        while True:
            present = {f[len(name) + 1 :] for f in self.store.list(name)}
            if present & dropped:
                log.info("checkpoint %s abandoned: a rank had a newer checkpoint to upload", name)
                return None
            if want <= present:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"checkpoint {name}: ranks {sorted(want - present)} never finished uploading"
                )
            time.sleep(0.2)
        merged: dict[str, Any] = {}
        for marker in sorted(want):
            merged.update(json.loads(self.store.read_text(f"{name}/{marker}", scratch=self.scratch)))
        return merged

    def _retain(self, newest: int) -> None:
        """Keeps the newest `save_num_checkpoints_to_keep`; removes torn directories older than `newest`."""
        files = self.store.list()
        complete = find_checkpoints(self.store, scratch=self.scratch)
        keep = self.cfg.save_num_checkpoints_to_keep
        doomed = {c.name for c in complete[:-keep]} if keep > 0 else set()
        names = {c.name for c in complete}
        for rel in files:
            head = rel.split("/", 1)[0]
            step = head.rpartition("-ba")[2]
            if "/" in rel and head not in names and step.isdigit() and int(step) < newest:
                doomed.add(head)
        for name in sorted(doomed):
            self.store.delete_dir(name, [f[len(name) + 1 :] for f in files if f.startswith(name + "/")])
            log.info("checkpoint retention: removed %s", redact(self.store.url(name)))

    # ----------------------------------------------------------------- lifecycle
    def poll(self) -> None:
        """Re-raises a background failure (call once a step; cheap)."""
        self._queue.poll()

    def wait(self) -> None:
        """Blocks until every queued checkpoint is published (or dropped); re-raises a failure."""
        self._queue.wait()

    @property
    def dropped(self) -> int:
        """How many checkpoints were dropped before upload because a newer one replaced them."""
        return self._queue.dropped_count

    def close(self) -> None:
        """Waits for the last checkpoint and stops the background thread."""
        self._queue.close()
