"""The offline quick start's data: a corpus from text that ships with Python, a BPE tokenizer, MDS splits.

Design note: `python train.py` must work on a fresh machine with no network and no shared data, so the
corpus is CPython's own English reference text (`pydoc_data.topics`) followed by the top-level standard
library sources, in sorted order (the same bytes on every machine with the same Python). A byte-level BPE
tokenizer is trained on it with `tokenizers` in seconds. Everything is built once into `data.local` (a
temporary sibling directory renamed into place, so an interrupted build is never mistaken for a finished
one) and reused while its parameters (recorded in `quickstart.json`) match. Each stage logs one progress line
(through `logging`, so it reaches the console and Hydra's `train.log`).
"""

from __future__ import annotations

import json
import logging
import shutil
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from foundry.data.text import TextDataConfig

__all__ = ["QuickstartDataConfig", "quickstart_corpus", "train_bpe_tokenizer", "prepare_quickstart"]

EOS = "<|endoftext|>"

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class QuickstartDataConfig(TextDataConfig):
    """The `data=quickstart` option: a local corpus built (and cached) on first use."""

    corpus_mb: float = 4.0
    """Characters of corpus to take, in millions."""
    vocab_size: int = 512
    """BPE vocabulary size (the byte alphabet, the EOS token and merges)."""
    eval_fraction: float = 0.05
    """Share of documents (from the end) held out for the `val` split."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local is None:
            raise ValueError("data.local must name the quick-start cache directory")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"data.eval_fraction={self.eval_fraction} must be in (0, 1)")
        if self.vocab_size < 258:
            raise ValueError(f"data.vocab_size={self.vocab_size} must be >= 258 (bytes + EOS + one merge)")


def quickstart_corpus(max_chars: int) -> list[str]:
    """Documents of text shipped with Python: pydoc topics, then stdlib `*.py` files, up to `max_chars`."""
    import pydoc_data.topics

    docs = [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs += [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("*.py"))]
    out, total = [], 0
    for doc in docs:
        if total >= max_chars:
            break
        doc = doc[: max_chars - total]
        out.append(doc)
        total += len(doc)
    return out


def train_bpe_tokenizer(docs: list[str], *, vocab_size: int, path: Path) -> None:
    """Train a byte-level BPE tokenizer (EOS `<|endoftext|>`) on `docs` and save it as `tokenizer.json`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(str(path))


def _params(cfg: QuickstartDataConfig, max_seq_len: int) -> dict[str, object]:
    return {
        "version": 1,
        "corpus_mb": cfg.corpus_mb,
        "vocab_size": cfg.vocab_size,
        "eval_fraction": cfg.eval_fraction,
        "max_seq_len": max_seq_len,
        "train_split": cfg.train_split,
        "eval_split": cfg.eval_split,
    }


def prepare_quickstart(cfg: QuickstartDataConfig, *, max_seq_len: int) -> Path:
    """Build (or reuse) the quick-start tokenizer and MDS splits under `cfg.local`.

    Args:
        cfg: The data config.
        max_seq_len: Row length of the packed MDS rows.

    Returns:
        The directory, holding `tokenizer.json`, `quickstart.json` and one sub-directory per split.
    """
    from foundry.data.prep import convert_texts
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    root = Path(str(cfg.local)).expanduser()
    params = _params(cfg, max_seq_len)
    marker = root / "quickstart.json"
    if marker.is_file() and json.loads(marker.read_text()) == params:
        log.info("quick start: reusing the corpus, tokenizer and MDS splits in %s", root)
        return root
    log.info("quick start: building the corpus, tokenizer and MDS splits in %s (first run only)", root)
    begin = time.perf_counter()
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    tmp.chmod(0o755)
    try:
        t0 = time.perf_counter()
        docs = quickstart_corpus(int(cfg.corpus_mb * 1e6))
        chars = sum(len(d) for d in docs)
        log.info(
            "quick start: corpus of %d documents, %.2fM characters (%.1f s)",
            len(docs),
            chars / 1e6,
            time.perf_counter() - t0,
        )
        t0 = time.perf_counter()
        train_bpe_tokenizer(docs, vocab_size=cfg.vocab_size, path=tmp / "tokenizer.json")
        tokenizer = build_tokenizer(TokenizerConfig(name=str(tmp / "tokenizer.json")))
        log.info(
            "quick start: trained a byte-level BPE tokenizer, %d tokens (%.1f s)",
            len(tokenizer),
            time.perf_counter() - t0,
        )
        n_eval = max(1, int(len(docs) * cfg.eval_fraction)) if cfg.eval_split else 0
        splits = {cfg.train_split: docs[: len(docs) - n_eval]}
        if cfg.eval_split:
            splits[cfg.eval_split] = docs[len(docs) - n_eval :]
        for split, texts in splits.items():
            stats = convert_texts(
                texts, tokenizer=tokenizer, out=str(tmp / split), max_seq_len=max_seq_len, eos_text=EOS
            )
            log.info(
                "quick start: MDS split %r: %d documents -> %d rows of %d tokens (%.1f s)",
                split,
                stats.documents,
                stats.rows,
                max_seq_len,
                stats.seconds,
            )
        (tmp / "quickstart.json").write_text(json.dumps(params, indent=2))
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("quick start: data ready in %s (%.1f s)", root, time.perf_counter() - begin)
    return root
