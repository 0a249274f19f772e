"""`MPTModel` and `MPTForCausalLM`: MPT as a first-class transformers model (no torch.distributed).

Design note: we subclass transformers' `PreTrainedModel` + `GenerationMixin` so `save_pretrained`,
`AutoModelForCausalLM.from_pretrained`, `generate()` (with its `DynamicCache`) and lm-eval work unchanged,
while the math stays ours: one shared attention mask per forward, SDPA everywhere, position tables cached.
Parameter names follow llm-foundry / HF MPT (`transformer.blocks.N.attn.Wqkv`, ...), so export to the
HF-native `mpt` format is a rename-free copy. Tied embeddings have no `lm_head` at all (logits use
`wte.weight` directly), which sidesteps transformers' tying machinery on save/load.

Loss: like HF, labels are shifted inside the model (`labels = input_ids` is fine): position t predicts
label t+1, the last position has no target, and -100 is ignored; the mean is over counted targets.
With `loss_fn` chunked or liger, a training forward (gradients on, labels given) computes the loss from the
hidden states without the (B, S, V) logits and returns `logits=None` (`foundry.models.mpt.loss`).
`compile_loss` (called by `trainer.compile=blocks`) routes a training forward's loss math, the plain loss's
float32 cross-entropy or the chunked loss's per-chunk math, through a compiler;
eval and generation stay eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from foundry.models.cache_names import cache_field, output_cache, take_cache
from foundry.models.documents import document_positions
from foundry.models.mpt.attention import PositionTables, build_attn_mask
from foundry.models.mpt.blocks import MPTBlock
from foundry.models.mpt.hf_config import MPTConfig
from foundry.models.mpt.init import init_module_
from foundry.models.mpt.layers import build_norm
from foundry.models.mpt.loss import (
    chunk_loss_and_grad,
    chunked_linear_cross_entropy,
    liger_linear_cross_entropy,
    shifted_cross_entropy,
)

# loss re-exported
__all__ = ["MPTPreTrainedModel", "MPTModel", "MPTForCausalLM", "shifted_cross_entropy"]


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    device_type = x.device.type
    if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def _as_embedding(value: nn.Module) -> nn.Embedding:
    """`value` as the input embedding; MPT unembeds with its `weight`, so it must be an `nn.Embedding`."""
    if not isinstance(value, nn.Embedding):
        raise TypeError(f"MPT input embeddings must be an nn.Embedding, got {type(value).__name__}")
    return value


class MPTPreTrainedModel(PreTrainedModel):
    """Shared transformers plumbing: config class, per-module init (llm-foundry schemes)."""

    config: MPTConfig
    config_class = MPTConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["MPTBlock"]
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        cfg = self.config
        init_module_(module, cfg=cfg.init, d_model=cfg.d_model, n_layers=cfg.n_layers)


class MPTModel(MPTPreTrainedModel):
    """Embeddings, blocks and the final norm; returns hidden states (and the updated cache)."""

    def __init__(self, config: MPTConfig) -> None:
        super().__init__(config)
        attn = config.attn
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_seq_len, config.d_model) if config.learned_pos_emb else None
        self.emb_drop = nn.Dropout(config.emb_pdrop)
        self.blocks = nn.ModuleList(MPTBlock(config, layer_idx=i) for i in range(config.n_layers))
        self.norm_f = build_norm(
            config.norm_type, config.d_model, eps=config.norm_eps, no_bias=config.no_bias
        )
        self.pos = PositionTables(
            attn, n_heads=config.n_heads, head_dim=config.head_dim, max_seq_len=config.max_seq_len
        )
        self.sliding_window = attn.sliding_window_size
        self.uses_sequence_id = attn.attn_uses_sequence_id
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.wte = _as_embedding(value)

    def _positions(
        self, attention_mask: torch.Tensor | None, *, past: int, seq: int, device: torch.device
    ) -> torch.Tensor:
        """(B|1, S) positions; with a mask, left padding is skipped (first real token is position 0)."""
        if attention_mask is None:
            return torch.arange(past, past + seq, device=device)[None]
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return pos[:, -seq:]

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        sequence_id: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool | None = None,
        past_key_values: Cache | None = None,
        # transformers passes e.g. cache_position, return_dict
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        """Runs the stack.

        Args:
            input_ids: (B, S) token ids (or `inputs_embeds` (B, S, d_model)).
            attention_mask: (B, S_past + S) 1 = token, 0 = (left) padding; omit when there is none.
            sequence_id: (B, S) document ids of packed rows (used when attn_uses_sequence_id, ignored
                otherwise): attention stays inside each document and, unless `position_ids` are given,
                positions restart at 0 at every document (llm-foundry keeps row positions).
            cache: a transformers `Cache` (updated in place); created when `use_cache` and absent.
            position_ids: (B, S) explicit positions (learned pos emb / RoPE); derived when omitted.
            use_cache: return a cache (default `config.use_cache`).
            past_key_values: the cache under its pre-5.24 transformers name (`cache_names`).

        Returns:
            `BaseModelOutputWithPast` with `last_hidden_state` (B, S, d_model) and the cache (`output_cache`).
        """
        cache = take_cache(cache, past_key_values)
        x = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        bsz, seq = x.shape[:2]
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        past = 0 if cache is None else cache.get_seq_length()
        if past + seq > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {past + seq} exceeds max_seq_len={self.config.max_seq_len}; "
                "truncate the input or build the model with a larger max_seq_len"
            )
        if sequence_id is not None and not self.uses_sequence_id:
            sequence_id = None
        if position_ids is None and (self.wpe is not None or self.pos.attn.rope):
            # packed row: each document starts at position 0
            if sequence_id is not None:
                position_ids = document_positions(sequence_id)
            else:
                position_ids = self._positions(attention_mask, past=past, seq=seq, device=x.device)
        if self.wpe is not None:
            x = x + self.wpe(position_ids)
        frac = self.config.embedding_fraction
        if frac != 1.0:
            x = x * frac + x.detach() * (1 - frac)
        x = self.emb_drop(x)

        dtype = _compute_dtype(x)
        key_padding = None
        if attention_mask is not None and not bool(attention_mask.all()):
            key_padding = attention_mask.bool()
        attn_mask, is_causal = build_attn_mask(
            q_len=seq,
            k_len=past + seq,
            dtype=dtype,
            device=x.device,
            alibi=getattr(self.pos, "alibi", None),
            sliding_window=self.sliding_window,
            key_padding=key_padding,
            sequence_id=sequence_id,
        )
        rope = None
        if self.pos.attn.rope:
            # derived above whenever RoPE is on
            assert position_ids is not None
            rope = self.pos.rope(position_ids, dtype)
        for block in self.blocks:
            x = block(x, rope=rope, attn_mask=attn_mask, is_causal=is_causal, cache=cache)
        return BaseModelOutputWithPast(last_hidden_state=self.norm_f(x), **cache_field(cache))


class MPTForCausalLM(MPTPreTrainedModel, GenerationMixin):
    """MPT with the unembedding (tied to `wte` or a separate `lm_head`), loss,
    `num_params`, `flops_per_token`."""

    def __init__(self, config: MPTConfig) -> None:
        super().__init__(config)
        self.transformer = MPTModel(config)
        self.lm_head = (
            None if config.tie_word_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        )
        self._compiled_loss: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self.post_init()

    def compile_loss(self, compiler: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Training forwards (gradients on) compute the loss's math with `compiler(fn)` of the plain loss's
        cross-entropy and of the chunked loss's per-chunk `chunk_loss_and_grad` (`trainer.compile=blocks`
        passes `torch.compile`); the unembedding matmuls and liger's kernel are unchanged."""
        self._compiled_loss = (compiler(shifted_cross_entropy), compiler(chunk_loss_and_grad))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.transformer.wte = _as_embedding(value)

    def get_output_embeddings(self) -> nn.Linear | None:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def _unembedding(self) -> torch.Tensor:
        """The (V, d_model) output weight: `wte`'s when tied, else `lm_head`'s."""
        return self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, S, d_model) -> (B, S, V): unembed, then logit_scale and final softcapping if configured."""
        logits = F.linear(hidden, self._unembedding())
        scale = self.config.logit_scale_value
        if scale is not None:
            logits = logits * scale
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        sequence_id: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        past_key_values: Cache | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Forward (see `MPTModel.forward`); `labels` (B, S) are shifted inside (HF convention), -100 ignored.

        The KV cache comes as `cache` (transformers >= 5.24's `generate`) or `past_key_values`
        (older releases).

        Returns:
            `CausalLMOutputWithPast` with `loss` (when labels), `logits` (B, S, V) and the cache, under the
            field name of the installed transformers (read it with `cache_names.output_cache`).
        """
        if self.config.attn_config["attn_uses_sequence_id"] and self.training and sequence_id is None:
            raise ValueError("attn_config.attn_uses_sequence_id=true needs `sequence_id` in training batches")
        out = self.transformer(
            input_ids,
            attention_mask=attention_mask,
            sequence_id=sequence_id,
            cache=take_cache(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            use_cache=use_cache,
        )
        hidden = out.last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        fused = self.config.loss_fn != "torch_crossentropy"
        if labels is not None and fused and not logits_to_keep and torch.is_grad_enabled():
            fused_loss = self._fused_loss(hidden, labels)
            return CausalLMOutputWithPast(loss=fused_loss, logits=None, **cache_field(output_cache(out)))
        logits = self.logits(hidden)
        compiled = self._compiled_loss if torch.is_grad_enabled() else None
        loss_fn = shifted_cross_entropy if compiled is None else compiled[0]
        loss = None if labels is None else loss_fn(logits, labels)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **cache_field(output_cache(out)))

    def _fused_loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of `self.logits(hidden)` against `labels` without the logits (`config.loss_fn`)."""
        scale, cap = self.config.logit_scale_value, self.config.final_logit_softcapping
        if self.config.loss_fn == "liger_crossentropy":
            return liger_linear_cross_entropy(
                hidden, self._unembedding(), labels, logit_scale=scale, softcap=cap
            )
        chunk_fn = None if self._compiled_loss is None else self._compiled_loss[1]
        return chunked_linear_cross_entropy(
            hidden, self._unembedding(), labels, logit_scale=scale, softcap=cap, chunk_fn=chunk_fn
        )

    def num_params(self, *, exclude_embeddings: bool = False) -> int:
        """Parameter count (tied weights once); `exclude_embeddings` drops wte and wpe."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.transformer.wte.weight.numel()
            if self.transformer.wpe is not None:
                total -= self.transformer.wpe.weight.numel()
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward), llm-foundry's MFU convention.

        `3 * (2 * N_active + 4 * n_layers * d_model * seq_len)`: N_active is every parameter except an
        untied input embedding (a lookup, not a matmul); attention counts the full S x S (no causal halving).
        """
        n_active = self.num_params()
        if self.lm_head is not None:
            n_active -= self.transformer.wte.weight.numel()
        cfg = self.config
        return 3.0 * (2.0 * n_active + 4.0 * cfg.n_layers * cfg.d_model * seq_len)
