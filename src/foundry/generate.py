"""Text generation from a trained model: load (trainer checkpoint, HF folder, base + adapter), render, decode.

Design note: decoding is transformers' `generate` (KV cache, greedy or temperature/top-k/top-p sampling, EOS
handling, stop strings), which our MPT supports as a `GenerationMixin` with left-padded attention masks;
this module adds what a user of the trainer needs around it: the model from wherever training left it
(`load_for_generation`), prompts or chat messages rendered with the tokenizer's chat template (ChatML when it
has none), batches padded on the left, and completions cut at the first stop string (transformers stops
*after* a stop string; the text returned never contains it). `scripts/generate.py` is the command line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "CHATML_TEMPLATE",
    "SamplingConfig",
    "cut_at_stop",
    "generate",
    "load_for_generation",
    "read_prompts",
    "render_chat",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The chat template used when the tokenizer has none (llm-foundry's ChatML fallback)."""


@dataclass(kw_only=True)
class SamplingConfig:
    """How to decode: greedy when `temperature` is 0, else sampling with top-k / top-p."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    """0: greedy (argmax); > 0: sample from softmax(logits / temperature)."""
    top_k: int = 0
    """Keep the k most likely tokens (0: all)."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability reaches top_p (1: all)."""
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation stops once every completion has one; the text is cut before it."""
    batch_size: int = 8
    """Prompts decoded together (left-padded)."""
    seed: int | None = None
    """Seed for sampling (None: torch's current generator)."""
    use_cache: bool = True
    """Decode with the KV cache (False recomputes every prefix: slow, for checking the cache; same greedy
    text)."""

    def __post_init__(self) -> None:
        checks = [
            (self.max_new_tokens >= 1, f"max_new_tokens={self.max_new_tokens} must be >= 1"),
            (self.temperature >= 0, f"temperature={self.temperature} must be >= 0 (0 is greedy)"),
            (self.top_k >= 0, f"top_k={self.top_k} must be >= 0 (0 keeps all tokens)"),
            (0 < self.top_p <= 1, f"top_p={self.top_p} must be in (0, 1]"),
            (self.batch_size >= 1, f"batch_size={self.batch_size} must be >= 1"),
            (all(self.stop), "stop strings must not be empty"),
        ]
        for ok, why in checks:
            if not ok:
                raise ValueError(why)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to (not including) the earliest occurrence of any stop string."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def render_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """A conversation as the prompt text the model continues (the assistant's turn opened)."""
    template = getattr(tokenizer, "chat_template", None) or CHATML_TEMPLATE
    for i, m in enumerate(messages):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise ValueError(f"messages[{i}]={m!r}: each message needs a string 'role' and 'content'")
    text = tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    return str(text)


def read_prompts(path: str | Path) -> list[str | list[dict[str, str]]]:
    """Prompts from a file: `.jsonl` rows with `prompt` (text) or `messages` (a chat), else one per line."""
    p = Path(path)
    lines = [line for line in p.read_text().splitlines() if line.strip()]
    if p.suffix != ".jsonl":
        return list(lines)
    out: list[str | list[dict[str, str]]] = []
    for n, line in enumerate(lines, 1):
        row = json.loads(line)
        if isinstance(row, dict) and isinstance(row.get("prompt"), str):
            out.append(row["prompt"])
        elif isinstance(row, dict) and isinstance(row.get("messages"), list):
            out.append(row["messages"])
        else:
            raise ValueError(f"{p}:{n}: expected an object with 'prompt' (a string) or 'messages' (a list)")
    return out


@torch.no_grad()
def generate(
    model: nn.Module,
    # a transformers tokenizer
    tokenizer: Any,
    prompts: Sequence[str | list[dict[str, str]]],
    cfg: SamplingConfig,
) -> list[str]:
    """The completion of every prompt (text, or a chat as a list of messages), in order, stop strings cut.

    Prompts are decoded `cfg.batch_size` at a time, left-padded, with the KV cache; greedy decoding gives the
    same completions batched as one by one (up to floating-point ties).
    """
    texts = [p if isinstance(p, str) else render_chat(tokenizer, p) for p in prompts]
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    device = next(model.parameters()).device
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed)
    # a transformers `GenerationMixin` (nn.Module.__getattr__ is typed Tensor | Module)
    runner: Any = model
    out: list[str] = []
    try:
        for i in range(0, len(texts), cfg.batch_size):
            batch = tokenizer(texts[i : i + cfg.batch_size], return_tensors="pt", padding=True).to(device)
            # a causal LM takes none; transformers 4.x's generate refuses them
            batch.pop("token_type_ids", None)
            ids = runner.generate(**batch, **_generate_kwargs(tokenizer, cfg))
            new = ids[:, batch["input_ids"].shape[1] :]
            out += [cut_at_stop(t, cfg.stop) for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = side
    return out


def _generate_kwargs(tokenizer: Any, cfg: SamplingConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "max_new_tokens": cfg.max_new_tokens,
        "use_cache": cfg.use_cache,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if cfg.temperature > 0:
        kwargs.update(do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k or None, top_p=cfg.top_p)
    else:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    if cfg.stop:
        kwargs.update(stop_strings=list(cfg.stop), tokenizer=tokenizer)
    return kwargs


def load_for_generation(
    model: str,
    *,
    adapter: str | None = None,
    base: str | None = None,
    tokenizer: str | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[nn.Module, Any]:
    """The model and tokenizer to generate with, from where training or export left them.

    Args:
        model: A trainer checkpoint (folder with `manifest.json`, or a save folder: its newest; local or URL;
            LoRA adapters included when trained with them), or a transformers folder (`save_pretrained`,
            `scripts/export_hf.py`).
        adapter: A PEFT adapter folder to put on top of `model` (base + adapter).
        base: The base model's trainer checkpoint, when `model` is an adapters-only one
            (`checkpoint.save_adapters_only`).
        tokenizer: A tokenizer.json, folder or cached hub name; default: the HF folder's own, or the training
            run's (from its `run.json`) for a trainer checkpoint.
        device: Where the model runs. dtype: its parameter dtype.

    Raises:
        ValueError: No tokenizer can be found (naming `--tokenizer`).
    """
    # local: the checkpoint and tokenizer code is only needed here, not by `generate` on a given model
    from foundry.checkpoint.convert import load_model
    from foundry.models.build import load_pretrained
    from foundry.models.export import is_trainer_checkpoint
    from foundry.tokenizers import TokenizerConfig, build_tokenizer, run_tokenizer_config

    trainer_checkpoint = is_trainer_checkpoint(model)
    if trainer_checkpoint:
        net, _ = load_model(model, device="cpu", base=base)
    else:
        net = load_pretrained(model)
    if adapter is not None:
        # local: `peft` is an optional dependency, needed only for an adapter folder
        from foundry.models.peft.folder import load_adapter

        load_adapter(net, adapter)
    tok_cfg = TokenizerConfig(name=tokenizer) if tokenizer else None
    if tok_cfg is None:
        tok_cfg = run_tokenizer_config(model) if trainer_checkpoint else TokenizerConfig(name=model)
    if tok_cfg is None:
        raise ValueError(f"no tokenizer found for {model} (no run.json beside it): pass --tokenizer")
    return net.to(device=device, dtype=dtype).eval(), build_tokenizer(tok_cfg)
