"""`TextLoader`: the pretraining `StreamingDataLoader`,
resuming under the run's `data.on_mixture_change` policy.

Design note: the trainer restores its loader with a plain `loader.load_state_dict(state)` and knows nothing
about mixtures, so the policy travels with the loader: this subclass passes `on_mixture_change` on to
`StreamingDataset.load_state_dict`, and in `error` mode turns the dataset's mismatch message into one that
names the config switch (`data.on_mixture_change=continue`). It lives apart from `foundry.data.text` so that
importing the config schema does not import the streaming loader stack.

Batches: its collate function is a `TextCollator`, a `streaming.SplitCollator`, so with workers the inherited
`StreamingDataLoader` runs the collator's `pack` in them (narrow token ids through the pipe) and makes the
int64 tensors here, or in the pin thread straight into pinned memory with `pin_memory=True`.
"""

from __future__ import annotations

from typing import Any

from foundry.errors import ResumeMismatch
from streaming.loader.dataloader import StreamingDataLoader

__all__ = ["TextLoader"]


class TextLoader(StreamingDataLoader):
    """A `StreamingDataLoader` whose `load_state_dict` applies a mixture-change policy.

    Args:
        dataset: The `StreamingDataset`.
        *args: Passed to `StreamingDataLoader`.
        on_mixture_change: `error` (a changed mixture is a `ConfigError` naming what changed) or `continue`
            (keep the checkpoint's sample position, draw the rest from the new mixture).
        **kwargs: Passed to `StreamingDataLoader`.
    """

    def __init__(self, dataset: Any, *args: Any, on_mixture_change: str = "error", **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self.on_mixture_change = on_mixture_change

    def load_state_dict(self, obj: dict[str, Any], *, on_mixture_change: str | None = None) -> None:
        """Restores a saved loader state under `on_mixture_change`
        (None: the loader's `self.on_mixture_change`).

        Raises:
            ResumeMismatch: The checkpoint's data differs from this config (the message names what changed and
                the switch that accepts a changed mixture).
        """
        policy = on_mixture_change or self.on_mixture_change
        try:
            super().load_state_dict(obj, on_mixture_change=policy)
        except ValueError as err:
            if "resume state does not match" not in str(err):
                raise
            mixture = policy == "error" and (
                "stream mixture changed" in str(err) or "streams_fingerprint" in str(err)
            )
            hint = (
                "; to resume with a changed mixture from the checkpoint's sample position pass "
                "data.on_mixture_change=continue"
                if mixture
                else ""
            )
            raise ResumeMismatch(
                f"data: {err}{hint}", detail=str(err), what="data", mixture_changed=mixture
            ) from err
