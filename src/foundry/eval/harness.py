"""lm-evaluation-harness adapter: our models as the lm-eval model type `foundry`.

Usage (offline, local task yamls):

    python -m foundry.eval.harness run --model foundry --model_args pretrained=exported/ \\
        --tasks lambada_local --include_path evals/harness_tasks --device cpu --batch_size 16

`python -m foundry.eval.harness ...` registers `foundry` and then runs lm-eval's own CLI with the same
arguments (lm-eval's `lm_eval` executable only knows models registered in its process). In Python,
`register()` then `lm_eval.simple_evaluate(model="foundry", ...)`, or pass a `FoundryLM` instance.

Design note: `FoundryLM` subclasses lm-eval's `TemplateLM`, so (context, continuation) strings are split
into tokens by lm-eval's own rule (trailing context spaces move to the continuation; the pair is encoded
whole and split at the context's length); the log-likelihoods are then the same numbers lm-eval's `hf`
backend computes for the same weights (tests/foundry/eval/test_parity.py). Requests are sorted by length
(longest first) and right-padded per batch, never padded to max_seq_len. Registration is explicit (no
import-time side effects). Model arguments: see `foundry.eval.harness_load`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from tqdm import tqdm

from foundry.eval.harness_load import load_model_and_tokenizer

__all__ = ["MODEL_NAME", "FoundryLM", "register", "main"]

MODEL_NAME = "foundry"


def _batches(order: Sequence[int], size: int) -> Iterable[list[int]]:
    for i in range(0, len(order), size):
        yield list(order[i : i + size])


class _StopOnStrings:
    """A transformers stopping criterion: every row's new text contains one of `stops`."""

    def __init__(self, tokenizer: Any, stops: list[str], prompt_len: int) -> None:
        self.tokenizer, self.stops, self.prompt_len = tokenizer, stops, prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_len :], skip_special_tokens=False)
        done = [any(s in t for s in self.stops) for t in texts]
        return torch.tensor(done, device=input_ids.device)


class FoundryLM(TemplateLM):
    """An lm-eval `LM` over a foundry/transformers causal LM (MPT, HF exports, `hf-causal-lm`).

    Args:
        model / tokenizer: a loaded causal LM and its transformers tokenizer; or, instead, the model
            arguments of `load_model_and_tokenizer` (`pretrained`, `config`, `checkpoint`, `tokenizer`,
            `dtype`).
        batch_size: sequences per forward (lm-eval passes the CLI's `--batch_size`; `auto` means 16).
        device: `cpu`, `cuda`, `cuda:1`, ...
        max_length: context limit (default: the model's `max_seq_len` / `max_position_embeddings`, else 2048).
        max_gen_toks: default generation length when a task does not set one.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        # a transformers tokenizer, or its path with model args
        tokenizer: Any = None,
        *,
        pretrained: str | None = None,
        config: str | None = None,
        checkpoint: str | None = None,
        dtype: str = "float32",
        batch_size: int | str = 16,
        max_batch_size: int | None = None,
        device: str | None = None,
        max_length: int | None = None,
        max_gen_toks: int = 256,
        # lm-eval passes extra generic keys
        **unused: Any,
    ) -> None:
        super().__init__()
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if model is None:
            model, tokenizer = load_model_and_tokenizer(
                pretrained=pretrained,
                config=config,
                checkpoint=checkpoint,
                tokenizer=tokenizer,
                dtype=dtype,
                device=dev,
            )
        elif tokenizer is None or isinstance(tokenizer, str):
            raise ValueError("FoundryLM(model=...) needs the loaded tokenizer too")
        self.model = model.to(dev).eval()
        self.tokenizer = tokenizer
        self.backend = "causal"
        self._device = dev
        bs = str(batch_size)
        self.batch_size = 16 if bs.startswith("auto") else int(bs)
        self.max_gen_toks = int(max_gen_toks)
        cfg = getattr(model, "config", None)
        self._max_length = int(
            max_length
            or getattr(cfg, "max_seq_len", None)
            or getattr(cfg, "max_position_embeddings", None)
            or 2048
        )

    # ---- lm-eval's TemplateLM hooks

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "foundry").replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        # like lm-eval's hf backend: tokenizer default, no BOS twice
        if add_special_tokens is None:
            bos = self.tokenizer.bos_token
            add_special_tokens = not (bos and string.startswith(bos))
        return self.tokenizer.encode(string, add_special_tokens=add_special_tokens)

    def tok_decode(self, tokens: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    @torch.no_grad()
    def _forward_logprobs(self, rows: list[list[int]]) -> torch.Tensor:
        """(B, S, V) float32 log-softmax of right-padded `rows` (padding never precedes a real token)."""
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        logits = self.model(input_ids=ids.to(self.device)).logits
        return F.log_softmax(logits.float(), dim=-1)

    def _loglikelihood_tokens(
        self,
        requests: list[tuple[Any, list[int], list[int]]],
        disable_tqdm: bool = False,
        **kwargs: Any,
    ) -> list[tuple[float, bool]]:
        """(sum of continuation log-probs, continuation is the greedy choice) per (key, ctx, cont) request."""
        inputs = []
        for _, ctx, cont in requests:
            if not cont:
                raise ValueError("an lm-eval request has an empty continuation")
            inputs.append((ctx + cont)[-(self.max_length + 1) :][:-1])
        order = sorted(range(len(requests)), key=lambda i: -len(inputs[i]))
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="foundry loglikelihood")
        for idx in _batches(order, self.batch_size):
            logprobs = self._forward_logprobs([inputs[i] for i in idx])
            for row, i in enumerate(idx):
                end = len(inputs[i])
                # a continuation longer than max_length: its last tokens
                cont = requests[i][2][-end:]
                lp = logprobs[row, end - len(cont) : end]
                target = torch.tensor(cont, device=lp.device)
                greedy = bool((lp.argmax(-1) == target).all())
                total = float(lp.gather(-1, target[:, None]).sum())
                out[i] = (total, greedy)
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], out[i])
            pbar.update(len(idx))
        pbar.close()
        return out  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Whole-text log-likelihood over disjoint max_length windows (lm-eval's rolling scheme)."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        windows, owner = [], []
        for n, (text,) in enumerate(req.args for req in requests):
            for ctx, cont in map(
                make_disjoint_window,
                get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, ctx, cont))
                owner.append(n)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for n, (lp, _) in zip(owner, scores):
            totals[n] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    @torch.no_grad()
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the first `until` string; batched by identical gen_kwargs."""
        from transformers import StoppingCriteriaList

        args = [req.args for req in requests]
        out: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, (_, kw) in enumerate(args):
            groups.setdefault(repr(sorted(kw.items())), []).append(i)
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="foundry generate_until")
        for members in groups.values():
            kw = dict(args[members[0]][1])
            until = kw.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            eos = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
            if eos and eos not in until:
                until.append(eos)
            max_new = int(kw.pop("max_gen_toks", self.max_gen_toks))
            if kw.get("do_sample") or kw.get("temperature", 0.0) not in (0, 0.0, None):
                raise ValueError("the foundry adapter decodes greedily; use do_sample=false / temperature=0")
            budget = self.max_length - max_new
            encoded = {i: self.tok_encode(args[i][0])[-budget:] for i in members}
            order = sorted(members, key=lambda i: -len(encoded[i]))
            for idx in _batches(order, self.batch_size):
                width = max(len(encoded[i]) for i in idx)
                ids = torch.full((len(idx), width), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                # left padding
                for row, i in enumerate(idx):
                    ids[row, width - len(encoded[i]) :] = torch.tensor(encoded[i])
                    mask[row, width - len(encoded[i]) :] = 1
                stop = StoppingCriteriaList([_StopOnStrings(self.tokenizer, until, width)])
                # a transformers model's method (torch's `Module.__getattr__` stub types it Tensor | Module)
                generate = cast("Callable[..., torch.Tensor]", self.model.generate)
                gen = generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    max_new_tokens=max_new,
                    do_sample=False,
                    pad_token_id=pad,
                    stopping_criteria=stop,
                )
                for row, i in enumerate(idx):
                    text = self.tok_decode(gen[row, width:].tolist(), skip_special_tokens=False)
                    for s in until:
                        text = text.split(s)[0]
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", args[i], text)
                pbar.update(len(idx))
        pbar.close()
        return out  # type: ignore[return-value]


def register() -> None:
    """Registers `FoundryLM` as lm-eval model type `foundry` (idempotent)."""
    import lm_eval.models  # noqa: F401 - lm-eval fills its built-in names only into an empty registry
    from lm_eval.api import registry

    if registry.model_registry.get(MODEL_NAME, None) is FoundryLM:
        return
    registry.register_model(MODEL_NAME)(FoundryLM)


def main(argv: list[str] | None = None) -> None:
    """`python -m foundry.eval.harness <lm-eval CLI arguments>`: lm-eval's CLI with `foundry` registered."""
    from lm_eval.__main__ import cli_evaluate

    register()
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
