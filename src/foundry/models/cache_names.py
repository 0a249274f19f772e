"""The KV cache's name across transformers releases, in one place.

Design note: transformers 4.x and early 5.x call the KV cache `past_key_values`, both as the model's
`forward` argument and as the output field. transformers 5.24 renamed it to `cache`: `generate()` hands it to
`forward(cache=...)`, reads `outputs["cache"]` back, and every use of the old name (a keyword, a dataclass
field, an attribute read) logs "`past_key_values`/`cache_params` are deprecated". A model that only knows one
name either decodes every new token without its past (the cache passed as `cache=` vanished into `**kwargs`)
or prints the deprecation line in every run.

So `MPTForCausalLM.forward` accepts both names (`take_cache`), builds its outputs under the name the installed
release declares (`CACHE_NAME`, found by looking at the output dataclass, not at a version number, once at
import), and our own callers of any causal LM (the ICL scorer) pass a cache with `cache_field` and read one
back with `output_cache`, so neither our model nor transformers' own ones warn.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from transformers.modeling_outputs import CausalLMOutputWithPast

if TYPE_CHECKING:
    from transformers.cache_utils import Cache

__all__ = ["CACHE_NAME", "take_cache", "cache_field", "output_cache"]

CACHE_NAME: str = (
    "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"
)


def take_cache(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The cache a caller passed under either name (transformers >= 5.24 `cache`, older `past_key_values`).

    Raises:
        ValueError: both names were given (transformers raises the same for its own models).
    """
    if cache is not None and past_key_values is not None:
        raise ValueError("pass the KV cache as `cache` or as `past_key_values`, not both")
    return cache if cache is not None else past_key_values


def cache_field(cache: Cache | None) -> dict[str, Any]:
    """`{name: cache}`: a forward keyword or an output field, under the name the installed release uses."""
    return {CACHE_NAME: cache}


# `output`: any transformers ModelOutput
def output_cache(output: Any) -> Cache | None:
    """The cache a model output carries, read without the deprecation warning of newer transformers."""
    return getattr(output, CACHE_NAME, None)
