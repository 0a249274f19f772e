"""The `model` config group's schemas: the `ModelConfig` base, MPT's and any transformers causal LM's.

Design note: `TrainConfig.model` is typed with the base `ModelConfig`, so Hydra accepts any registered model
schema in its place: `MPTModelConfig` (what a `conf/model/mpt-*.yaml` file may contain, with its nested
`AttnConfig` / `FFNConfig` / `InitConfig`) and `HFCausalLMConfig` (`conf/model/hf-causal-lm.yaml`). Which
schema each `model/_<name>` node is, and their Hydra registration, is the registry (`registry.py`); LoRA's
`model.peft_config` is the `peft` group's schema (`foundry.models.peft.config`). These are plain
`@dataclass(kw_only=True)` classes, so Hydra type-checks YAML and overrides at compose time (a typo fails
naming the key) and importing them needs neither omegaconf nor torch. MPT's transformers `PretrainedConfig`
(`mpt/hf_config.py`) is a different object with a different life (saved in `config.json`, reloaded by the
Auto classes); it validates its nested `attn_config` / `ffn_config` / `init_config` dicts with the same
dataclasses and `validate_mpt_fields`, so defaults and validation live in exactly one place. OmegaConf 2.3
rejects `Literal` and `Union`, hence `str` fields checked in `__post_init__` and `Any` for `logit_scale`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from foundry.models.peft.config import PeftConfig

__all__ = [
    "DOCUMENT_MASK_IMPLS",
    "HF_DTYPES",
    "AttnConfig",
    "FFNConfig",
    "HFCausalLMConfig",
    "InitConfig",
    "MPTModelConfig",
    "ModelConfig",
    "resolve_kv_heads",
    "validate_mpt_fields",
]

LOSS_FNS = ("torch_crossentropy", "chunked_crossentropy", "liger_crossentropy")
ATTN_IMPLS = ("torch", "flash", "cudnn")
ATTN_TYPES = ("multihead_attention", "multiquery_attention", "grouped_query_attention")
ROPE_IMPLS = ("dail", "hf")
ROPE_HF_TYPES = ("no_scaling", "linear", "dynamic", "llama3")
NORM_TYPES = ("layernorm", "low_precision_layernorm", "rmsnorm", "low_precision_rmsnorm")
FFN_TYPES = ("mptmlp", "mptglu")
INIT_NAMES = (
    "default_",
    "baseline_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "small_init_",
    "neox_init_",
)
INIT_DEVICES = ("cpu", "meta", "cuda")
HF_DTYPES = ("float32", "bfloat16", "float16")
"""`HFCausalLMConfig.dtype` values (parameter dtypes)."""
DOCUMENT_MASK_IMPLS = ("eager", "sdpa")
"""transformers attention backends that accept a custom 4D mask (needed by `attn_uses_sequence_id`)."""


def _check_choice(value: str, choices: tuple[str, ...], *, name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {list(choices)}")


@dataclass(kw_only=True)
class ModelConfig:
    """Base of every `model` group schema (`TrainConfig.model` is typed with it; subclasses swap in)."""

    peft_config: PeftConfig | None = None
    """LoRA adapters (`foundry.models.peft`): null trains every weight; set to train adapters only."""

    def uses_sequence_id(self) -> bool:
        """Whether the model wants `sequence_id` (B, S) in its batches (document masking of packed rows)."""
        return False


@dataclass(kw_only=True)
class AttnConfig:
    """Attention options (llm-foundry `attn_config`)."""

    attn_type: str = "multihead_attention"
    """`multihead_attention`, `multiquery_attention` (kv_n_heads=1) or `grouped_query_attention`."""
    kv_n_heads: int | None = None
    """K/V heads for GQA; derived for MHA (= n_heads) and MQA (= 1) when left null."""
    attn_pdrop: float = 0.0
    """Dropout on attention probabilities (training only)."""
    attn_impl: str = "torch"
    """`torch` = scaled_dot_product_attention with PyTorch's own kernel order; `flash` / `cudnn` = the same
    call with SDPA's flash / cuDNN kernel first (the others as fallbacks; cuDNN is the faster one on
    Hopper)."""
    qk_ln: bool = False
    """Normalise the full Q and K vectors (norm of `norm_type`)."""
    qk_gn: bool = False
    """Normalise Q and K per head over head_dim (exclusive with qk_ln)."""
    fused_qkv: bool = True
    """Single `Wqkv` projection (the only layout implemented; kept for config compatibility)."""
    clip_qkv: float | None = None
    """Clamp the fused QKV projection to [-clip_qkv, clip_qkv]."""
    softmax_scale: float | None = None
    """Attention logit scale; default 1/sqrt(head_dim)."""
    attn_uses_sequence_id: bool = False
    """Block attention across packed documents (needs `sequence_id` in the forward)."""
    sliding_window_size: int = -1
    """Local attention: query i sees keys i-w..i; -1 disables."""
    alibi: bool = False
    alibi_bias_max: int = 8
    rope: bool = False
    rope_theta: float = 10000.0
    rope_impl: str = "dail"
    """`dail` or `hf`; both rotate non-interleaved halves, `hf` adds the scaling types below."""
    rope_dail_config: dict[str, Any] = field(
        default_factory=lambda: {"type": "original", "pos_idx_in_fp32": True, "xpos_scale_base": 512}
    )
    rope_hf_config: dict[str, Any] = field(default_factory=lambda: {"type": "no_scaling", "factor": 1.0})

    def __post_init__(self) -> None:
        _check_choice(self.attn_type, ATTN_TYPES, name="attn_config.attn_type")
        _check_choice(self.attn_impl, ATTN_IMPLS, name="attn_config.attn_impl")
        _check_choice(self.rope_impl, ROPE_IMPLS, name="attn_config.rope_impl")
        if not 0.0 <= self.attn_pdrop <= 1.0:
            raise ValueError(f"attn_config.attn_pdrop={self.attn_pdrop} must be in [0, 1]")
        if self.qk_ln and self.qk_gn:
            raise ValueError(
                "attn_config.qk_ln and attn_config.qk_gn are mutually exclusive; set one to false"
            )
        if self.alibi and self.rope:
            raise ValueError(
                "attn_config.alibi and attn_config.rope are mutually exclusive; set one to false"
            )
        if not self.fused_qkv:
            raise ValueError(
                "attn_config.fused_qkv=false is not implemented; remove it (Wqkv is always fused)"
            )
        if self.sliding_window_size == 0 or self.sliding_window_size < -1:
            raise ValueError(
                f"attn_config.sliding_window_size={self.sliding_window_size}: use -1 or a positive int"
            )
        if self.rope:
            if self.rope_impl == "hf":
                kind = self.rope_hf_config.get("type", "no_scaling")
                _check_choice(kind, ROPE_HF_TYPES, name="attn_config.rope_hf_config.type")
            else:
                kind = self.rope_dail_config.get("type", "original")
                if kind != "original":
                    raise ValueError(
                        f"attn_config.rope_dail_config.type={kind!r}: only 'original' is implemented "
                        "(xpos is not); use rope_impl=hf for scaled RoPE"
                    )


@dataclass(kw_only=True)
class FFNConfig:
    """Feed-forward options (llm-foundry `ffn_config`)."""

    ffn_type: str = "mptmlp"
    """`mptmlp`: down(act(up(x))); `mptglu`: down(act(gate(x)) * up(x)) (SwiGLU with silu)."""
    ffn_hidden_size: int | None = None
    """Overrides int(d_model * expansion_ratio)."""
    ffn_act_fn: dict[str, Any] = field(default_factory=lambda: {"name": "gelu", "approximate": "none"})
    """`{name: <torch.nn.functional fn or quick_gelu>, **kwargs}`."""

    def __post_init__(self) -> None:
        if self.ffn_type == "mptgeglu":
            raise ValueError("ffn_config.ffn_type=mptgeglu was renamed; use ffn_type=mptglu")
        _check_choice(self.ffn_type, FFN_TYPES, name="ffn_config.ffn_type")
        if "name" not in self.ffn_act_fn:
            raise ValueError("ffn_config.ffn_act_fn needs a 'name' (e.g. {name: gelu} or {name: silu})")


@dataclass(kw_only=True)
class InitConfig:
    """Parameter-initialisation options (llm-foundry `init_config`)."""

    name: str = "kaiming_normal_"
    fan_mode: str = "fan_in"
    init_nonlinearity: str = "relu"
    init_div_is_residual: Any = True
    """True -> divide residual-output weights by sqrt(2*n_layers); a number -> by that; False -> 1."""
    emb_init_std: float | None = None
    emb_init_uniform_lim: Any = None
    """A scalar l -> U(-l, l), or a pair [a, b]."""
    init_std: float | None = None
    """Required by `baseline_`."""
    init_gain: float = 0.0

    def __post_init__(self) -> None:
        _check_choice(self.name, INIT_NAMES, name="init_config.name")
        _check_choice(self.fan_mode, ("fan_in", "fan_out"), name="init_config.fan_mode")
        if self.name == "baseline_" and self.init_std is None:
            raise ValueError("init_config.name=baseline_ needs init_config.init_std (e.g. 0.02)")
        div = self.init_div_is_residual
        if not isinstance(div, bool | int | float) or (not isinstance(div, bool) and div <= 0):
            raise ValueError(
                f"init_config.init_div_is_residual={div!r}: use true, false or a positive number"
            )


@dataclass(kw_only=True)
class MPTModelConfig(ModelConfig):
    """An MPT model as in llm-foundry; `build_model_on` turns it into an `MPTForCausalLM` on a device."""

    d_model: int
    n_heads: int
    n_layers: int
    expansion_ratio: float = 4
    max_seq_len: int = 2048
    vocab_size: int = 50368
    resid_pdrop: float = 0.0
    emb_pdrop: float = 0.0
    learned_pos_emb: bool = True
    """Forced off when ALiBi or RoPE is on."""
    no_bias: bool = False
    norm_type: str = "low_precision_layernorm"
    norm_eps: float = 1e-5
    embedding_fraction: float = 1.0
    logit_scale: Any = None
    """A float, or `inv_sqrt_d_model` (-> 1/sqrt(d_model))."""
    final_logit_softcapping: float | None = None
    loss_fn: str = "torch_crossentropy"
    """The training loss: `torch_crossentropy` (full logits, then cross-entropy), `chunked_crossentropy` (the
    same loss fused with the unembedding over chunks of rows: no (tokens x vocab) logits in training; any
    device) or `liger_crossentropy` (liger-kernel's fused kernel; CUDA). Eval and generation return logits."""
    tie_word_embeddings: bool = True
    init_device: str = "cpu"
    """`cpu`, `cuda` or `meta` (`build_model_on` materialises on the run's device; FSDP after sharding)."""
    use_cache: bool = False
    attn_config: AttnConfig = field(default_factory=AttnConfig)
    ffn_config: FFNConfig = field(default_factory=FFNConfig)
    init_config: InitConfig = field(default_factory=InitConfig)

    def __post_init__(self) -> None:
        validate_mpt_fields(self)

    def uses_sequence_id(self) -> bool:
        """`attn_config.attn_uses_sequence_id`: attention stays inside each document of a packed row."""
        return self.attn_config.attn_uses_sequence_id


def validate_mpt_fields(cfg: Any) -> None:
    """Checks the top-level MPT fields shared by the Hydra schema and the transformers config.

    Args:
        cfg: an object with MPT top-level attributes (`MPTModelConfig` or `MPTConfig`).

    Raises:
        ValueError: naming the bad field and the accepted values.
    """
    for name in ("d_model", "n_heads", "n_layers", "max_seq_len", "vocab_size"):
        value = getattr(cfg, name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"model.{name}={value!r} must be a whole number > 0")
    if cfg.d_model % cfg.n_heads != 0:
        raise ValueError(f"d_model={cfg.d_model} must be divisible by n_heads={cfg.n_heads}")
    for name in ("resid_pdrop", "emb_pdrop"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ValueError(f"{name}={getattr(cfg, name)} must be in [0, 1]")
    if not 0.0 < cfg.embedding_fraction <= 1.0:
        raise ValueError(f"embedding_fraction={cfg.embedding_fraction} must be in (0, 1]")
    _check_choice(cfg.norm_type, NORM_TYPES, name="norm_type")
    _check_choice(cfg.init_device, INIT_DEVICES, name="init_device")
    _check_choice(cfg.loss_fn, LOSS_FNS, name="loss_fn")
    ls = cfg.logit_scale
    if ls is not None and ls != "inv_sqrt_d_model" and not isinstance(ls, int | float):
        raise ValueError(f"logit_scale={ls!r}: use null, a number or 'inv_sqrt_d_model'")
    ffn_hidden = cfg.ffn_config.ffn_hidden_size if isinstance(cfg.ffn_config, FFNConfig) else None
    if ffn_hidden is None and float(cfg.d_model * cfg.expansion_ratio) != int(
        cfg.d_model * cfg.expansion_ratio
    ):
        raise ValueError(
            f"d_model*expansion_ratio={cfg.d_model * cfg.expansion_ratio} is not an integer; "
            "change expansion_ratio or set ffn_config.ffn_hidden_size"
        )
    attn = cfg.attn_config
    if isinstance(attn, AttnConfig):
        kv = resolve_kv_heads(attn, n_heads=cfg.n_heads)
        if cfg.n_heads % kv != 0:
            raise ValueError(f"n_heads={cfg.n_heads} must be divisible by attn_config.kv_n_heads={kv}")


def resolve_kv_heads(attn: AttnConfig, *, n_heads: int) -> int:
    """Number of K/V heads implied by `attn_type` / `kv_n_heads`.

    Raises:
        ValueError: when grouped_query_attention has no kv_n_heads, or MHA/MQA set a contradicting one.
    """
    if attn.attn_type == "multihead_attention":
        if attn.kv_n_heads not in (None, n_heads):
            raise ValueError("attn_config.kv_n_heads must equal n_heads (or be null) for multihead_attention")
        return n_heads
    if attn.attn_type == "multiquery_attention":
        if attn.kv_n_heads not in (None, 1):
            raise ValueError("attn_config.kv_n_heads must be 1 (or null) for multiquery_attention")
        return 1
    if attn.kv_n_heads is None or attn.kv_n_heads < 1:
        raise ValueError("attn_config.attn_type=grouped_query_attention needs attn_config.kv_n_heads >= 1")
    return attn.kv_n_heads


@dataclass(kw_only=True)
class HFCausalLMConfig(ModelConfig):
    """A transformers `AutoModelForCausalLM` checkpoint or architecture."""

    pretrained_model_name_or_path: str
    """Hub name (needs a local HF cache offline) or a local folder with config.json (+ weights)."""
    pretrained: bool = True
    """Load the weights (true) or only the architecture, randomly initialised (false)."""
    trust_remote_code: bool = False
    local_files_only: bool = True
    """Never touch the network (folder or HF cache only); set false to allow hub downloads."""
    attn_implementation: str | None = "sdpa"
    """transformers attention backend (`sdpa`, `eager`, `flash_attention_2`) or null for its default."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16."""
    init_device: str = "cpu"
    """`cpu`, `cuda` or `meta`. With meta and `pretrained: true` (big-model finetuning) the weights are read
    from the folder's safetensors after FSDP sharding, each rank reading only its shards."""
    config_overrides: dict[str, Any] = field(default_factory=dict)
    """Set on the transformers config before building (e.g. {num_hidden_layers: 2})."""
    attn_uses_sequence_id: bool = False
    """Packed rows: attention stays inside each document of a row and positions restart per document
    (needs `sequence_id` in training batches and attn_implementation eager or sdpa)."""

    def __post_init__(self) -> None:
        if self.dtype not in HF_DTYPES:
            raise ValueError(f"model.dtype={self.dtype!r}: choose one of {sorted(HF_DTYPES)}")
        impl = self.attn_implementation
        if self.attn_uses_sequence_id and impl is not None and impl not in DOCUMENT_MASK_IMPLS:
            raise ValueError(
                f"model.attn_uses_sequence_id=true needs a custom 4D attention mask, which "
                f"model.attn_implementation={impl!r} does not accept: use one of {list(DOCUMENT_MASK_IMPLS)}"
            )

    def uses_sequence_id(self) -> bool:
        """`model.attn_uses_sequence_id`: attention stays inside each document of a packed row."""
        return self.attn_uses_sequence_id
