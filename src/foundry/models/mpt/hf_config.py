"""`MPTConfig`: the transformers `PretrainedConfig` of our MPT, model_type `foundry_mpt`.

Design note: named `hf_config` because it is the transformers side of the model's configuration: the object
`MPTForCausalLM` is built from, written to an exported folder's `config.json` and read back by
`AutoConfig` (the Hydra schema a yaml file is checked against is in `foundry.models.config`). Saved folders
record only `"model_type": "foundry_mpt"` and the class names, never this module's path, so the file name is
free to say what it holds. transformers already owns model_type `mpt` (its ALiBi-only `MptForCausalLM`), so
ours is `foundry_mpt` and is registered with the Auto classes by an explicit function
(`register_auto_classes`), never at import. Nested option dicts stay plain dicts in the config (JSON round
trip, llm-foundry compatible); the typed views `attn`, `ffn`, `init` re-validate them through the Hydra schema
dataclasses, so unknown keys fail with the key's name. Standard names (`hidden_size`, `num_hidden_layers`,
...) are exposed through `attribute_map` because `generate(use_cache=True)` and lm-eval read them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from transformers import PretrainedConfig

from foundry.models.config import (
    AttnConfig,
    FFNConfig,
    InitConfig,
    MPTModelConfig,
    resolve_kv_heads,
    validate_mpt_fields,
)

__all__ = ["MPTConfig", "MODEL_TYPE"]

MODEL_TYPE = "foundry_mpt"


def _to_dataclass(cls: type, value: Any, *, name: str) -> Any:
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{name} has unknown key(s) {unknown}; valid keys: {sorted(known)}")
    return cls(**value)


class MPTConfig(PretrainedConfig):
    """Configuration of `MPTForCausalLM` (llm-foundry field names; see `MPTModelConfig` for meanings).

    Args:
        d_model: hidden size. n_heads: query heads. n_layers: blocks.
        expansion_ratio: FFN width = int(d_model * expansion_ratio) unless ffn_config.ffn_hidden_size.
        max_seq_len: longest sequence (position tables are sized to it).
        vocab_size: embedding rows.
        attn_config / ffn_config / init_config: dicts (or the schema dataclasses) merged over defaults.
        loss_fn: the training loss (`torch_crossentropy`, `chunked_crossentropy`, `liger_crossentropy`).
        tie_word_embeddings: unembed with the input embedding (no separate lm_head).
        **kwargs: passed to `PretrainedConfig` (e.g. `pad_token_id`, `eos_token_id`).
    """

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
        "max_position_embeddings": "max_seq_len",
    }

    def __init__(
        self,
        d_model: int = 2048,
        n_heads: int = 16,
        n_layers: int = 24,
        expansion_ratio: float = 4,
        max_seq_len: int = 2048,
        vocab_size: int = 50368,
        resid_pdrop: float = 0.0,
        emb_pdrop: float = 0.0,
        learned_pos_emb: bool = True,
        no_bias: bool = False,
        norm_type: str = "low_precision_layernorm",
        norm_eps: float = 1e-5,
        embedding_fraction: float = 1.0,
        logit_scale: float | str | None = None,
        final_logit_softcapping: float | None = None,
        loss_fn: str = "torch_crossentropy",
        tie_word_embeddings: bool = True,
        init_device: str = "cpu",
        use_cache: bool = False,
        attn_config: dict[str, Any] | AttnConfig | None = None,
        ffn_config: dict[str, Any] | FFNConfig | None = None,
        init_config: dict[str, Any] | InitConfig | None = None,
        pad_token_id: int | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        attn = _to_dataclass(AttnConfig, attn_config, name="attn_config")
        ffn = _to_dataclass(FFNConfig, ffn_config, name="ffn_config")
        init = _to_dataclass(InitConfig, init_config, name="init_config")
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.expansion_ratio = expansion_ratio
        self.max_seq_len = max_seq_len
        self.vocab_size = vocab_size
        self.resid_pdrop = resid_pdrop
        self.emb_pdrop = emb_pdrop
        # llm-foundry forces learned positions off when ALiBi/RoPE is on.
        self.learned_pos_emb = learned_pos_emb and not (attn.alibi or attn.rope)
        self.no_bias = no_bias
        self.norm_type = norm_type
        self.norm_eps = norm_eps
        self.embedding_fraction = embedding_fraction
        self.logit_scale = logit_scale
        self.final_logit_softcapping = final_logit_softcapping
        self.loss_fn = loss_fn
        self.init_device = init_device
        self.use_cache = use_cache
        # v5: PretrainedConfig has no tie_word_embeddings default;
        # set it explicitly or weights untie on reload.
        self.tie_word_embeddings = tie_word_embeddings
        self.pad_token_id, self.bos_token_id, self.eos_token_id = pad_token_id, bos_token_id, eos_token_id
        self.attn_config = dataclasses.asdict(attn)
        self.ffn_config = dataclasses.asdict(ffn)
        self.init_config = dataclasses.asdict(init)
        # transformers v5's dataclass stub omits the extra kwargs its __init__ accepts (accept_kwargs=True).
        super().__init__(  # type: ignore[call-arg]
            tie_word_embeddings=tie_word_embeddings,
            use_cache=use_cache,
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            **kwargs,
        )
        validate_mpt_fields(_FieldView(self, ffn=ffn, attn=attn))

    @classmethod
    def from_schema(cls, cfg: MPTModelConfig, **overrides: Any) -> MPTConfig:
        """Builds the transformers config from the Hydra schema (plus keyword overrides, e.g. vocab_size)."""
        fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        fields.update(overrides)
        return cls(**fields)

    @property
    def attn(self) -> AttnConfig:
        """Typed, validated view of `attn_config`."""
        return _to_dataclass(AttnConfig, self.attn_config, name="attn_config")

    @property
    def ffn(self) -> FFNConfig:
        """Typed, validated view of `ffn_config`."""
        return _to_dataclass(FFNConfig, self.ffn_config, name="ffn_config")

    @property
    def init(self) -> InitConfig:
        """Typed, validated view of `init_config`."""
        return _to_dataclass(InitConfig, self.init_config, name="init_config")

    @property
    def head_dim(self) -> int:
        """d_model // n_heads (derived, never configured)."""
        return self.d_model // self.n_heads

    @property
    def kv_n_heads(self) -> int:
        """K/V heads implied by attn_config."""
        return resolve_kv_heads(self.attn, n_heads=self.n_heads)

    @property
    def ffn_hidden_size(self) -> int:
        """FFN width: ffn_config.ffn_hidden_size or int(d_model * expansion_ratio)."""
        hidden = self.ffn_config.get("ffn_hidden_size")
        return int(hidden) if hidden is not None else int(self.d_model * self.expansion_ratio)

    @property
    def logit_scale_value(self) -> float | None:
        """The numeric logit multiplier (resolves 'inv_sqrt_d_model')."""
        if self.logit_scale == "inv_sqrt_d_model":
            return 1.0 / math.sqrt(self.d_model)
        return None if self.logit_scale is None else float(self.logit_scale)


class _FieldView:
    """Presents an `MPTConfig` with typed nested configs to `validate_mpt_fields`."""

    def __init__(self, cfg: MPTConfig, *, ffn: FFNConfig, attn: AttnConfig) -> None:
        self._cfg = cfg
        self.ffn_config = ffn
        self.attn_config = attn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)
