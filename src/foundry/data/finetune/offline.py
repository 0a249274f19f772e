"""`data=finetune/instruct-cpu`: the offline instruction set, written on first use, and its tokenizer.

Design note: the CPU finetuning recipe must run on a fresh machine with no network, like the quick start.
`OfflineInstructDataConfig` is a `FinetuneDataConfig` whose `hf_name` folder is generated when absent
(`foundry.data.finetune.instruct`, seconds; the same rows on every machine with the same Python), and which
can name the quick-start cache whose tokenizer the recipe uses: the quick-start model was trained with it, so
it is built there (`prepare_quickstart_tokenizer`, the default corpus and vocabulary) only when missing, and a
published build is never rebuilt. Writes go through a temporary folder renamed into place, so a half-written
set is never read. The schema is in `foundry.data.config` (re-exported here).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from foundry.data.config import OfflineInstructDataConfig, QuickstartDataConfig
from foundry.data.finetune.instruct import write_instruct_dataset
from foundry.data.quickstart import prepare_quickstart_tokenizer

__all__ = ["OfflineInstructDataConfig", "prepare_offline_instruct"]

log = logging.getLogger(__name__)


def prepare_offline_instruct(cfg: OfflineInstructDataConfig) -> None:
    """Writes the instruction set into `cfg.hf_name` and the quick-start tokenizer, each only when missing.

    Args:
        cfg: The data config.
    """
    out = Path(str(cfg.hf_name)).expanduser()
    if not (out / f"{cfg.train_split}.jsonl").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            counts = write_instruct_dataset(
                tmp, chat=cfg.chat, additions=cfg.additions, eval_fraction=cfg.eval_fraction
            )
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        log.info("offline instruction set: wrote %s (%s)", out, counts)
    if cfg.quickstart_local:
        prepare_quickstart_tokenizer(QuickstartDataConfig(local=cfg.quickstart_local))
