"""What the scripts run in llm-foundry's venv share (`composer_reference.py`, `composer_resume.py`,
`llmfoundry_fixture_run.py`, which import it as a sibling: a script's folder is first on `sys.path`): an
offline Hugging Face environment in a scratch folder, and the tiny MPT run's tokenizer, model and loader.

`offline` must run before torch, transformers or llm-foundry are imported (they read the environment then);
the other helpers import them when called, so importing this module loads nothing heavy.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[4] / "shared"
NEOX_TOKENIZER = SHARED / "data/tokenizers/gpt-neox-20b/tokenizer.json"


def offline(prefix: str, *, parent: Path | None = None) -> Path:
    """A new scratch folder (under `parent` if given) for the Hugging Face caches; the hub is never asked."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.environ.update(
        {
            "HF_HOME": str(tmp / "hf"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return tmp


def neox_tokenizer(path: Path = NEOX_TOKENIZER) -> Any:
    """The gpt-neox-20b tokenizer (`<|endoftext|>` as bos, eos and unk) from its tokenizer.json."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def tiny_mpt(tok: Any, *, seed: int, **dims: Any) -> Any:
    """llm-foundry's `ComposerMPTCausalLM` of `dims` on the CPU with torch attention, after `torch.manual_seed`."""
    import torch
    from llmfoundry.models.mpt import ComposerMPTCausalLM

    torch.manual_seed(seed)
    return ComposerMPTCausalLM(
        tokenizer=tok,
        loss_fn="torch_crossentropy",
        attn_config={"attn_impl": "torch"},
        init_device="cpu",
        **dims,
    )


def mds_loader(tok: Any, data: Path, *, batch: int, seq: int, seed: int, shuffle: bool) -> Any:
    """llm-foundry's text loader over the MDS set `data/train` (one canonical node, no workers, last batch
    dropped)."""
    from llmfoundry.data.text_data import build_text_dataloader

    return build_text_dataloader(
        tokenizer=tok,
        device_batch_size=batch,
        dataset={
            "local": str(data),
            "split": "train",
            "shuffle": shuffle,
            "shuffle_seed": seed,
            "max_seq_len": seq,
            "num_canonical_nodes": 1,
        },
        drop_last=True,
        num_workers=0,
        persistent_workers=False,
        prefetch_factor=None,
    )
