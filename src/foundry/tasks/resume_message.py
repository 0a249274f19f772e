"""What a run says when the checkpoint it would resume was trained on another model or data.

Design note: the checks themselves live where the state is loaded (`foundry.checkpoint.resume` compares the
model config, `foundry.data.loader.TextLoader` the data) and raise `ResumeMismatch` with what differs; only
the task knows which run tried to resume and whether the user named it. The usual cause is a command meant as
a new run that reused a name, so the message names the run and the checkpoint and offers a new `run_name=`
first. Continuing the run on a changed mixture (`data.on_mixture_change=continue`) is offered only when the
user named the run: a generated name was never meant to continue anything.
"""

from __future__ import annotations

from foundry.errors import ConfigError, ResumeMismatch
from streaming.storage import redact

__all__ = ["resume_refusal"]


def resume_refusal(err: ResumeMismatch, *, run_name: str, checkpoint: str, named: bool) -> ConfigError:
    """The user error for `err`, raised by run `run_name` resuming `checkpoint` (a URL or folder).

    Args:
        named: The user gave the run name (`run_name=` or `$RUN_NAME`).
    """
    new_run = (
        "to start a new run instead, leave out run_name= (each command then gets a new name) or pass another "
        "run_name=<new name>"
        if named
        else "to start a new run instead, pass run_name=<new name>"
    )
    if err.what == "model":
        keep = "to continue this run, restore those values"
    elif err.mixture_changed and named:
        keep = (
            "to continue this run on the changed mixture from the checkpoint's sample position, pass "
            "data.on_mixture_change=continue"
        )
    else:
        keep = "to continue this run, restore its data settings"
    return ConfigError(
        f"run {run_name!r} cannot resume from its checkpoint {redact(checkpoint)}: it was trained with "
        f"{_what(err)}\n{new_run}; {keep} (checkpoint.load_path=<checkpoint> "
        "checkpoint.load_weights_only=true starts a new run from its weights)"
    )


def _what(err: ResumeMismatch) -> str:
    if err.what == "model":
        return err.detail
    return f"other data: {err.detail.removeprefix('the resume state does not match this dataset: ')}"
