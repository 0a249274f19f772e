"""The offline quick start's data: a corpus from text that ships with Python, a BPE tokenizer, MDS splits.

Design note: `python train.py` must work on a fresh machine with no network and no shared data, so the
corpus is CPython's own English reference text (`pydoc_data.topics`) followed by the top-level standard
library sources, in sorted order (the same bytes on every machine with the same Python). A byte-level BPE
tokenizer is trained on it with `tokenizers` in seconds. The cache folder `data.local` is shared by every run
on the machine, so nothing in it is ever rebuilt in place: the tokenizer goes to `tokenizer-<key>/` (keyed by
Python and `tokenizers` versions, corpus size and vocabulary) and the MDS splits to `data-<key>/` (keyed by
the tokenizer's key, `max_seq_len`, the split names and eval fraction), each built once into a temporary
folder, published by a rename and then only read (`foundry.data.build_cache`); concurrent builders of one key
wait for a single build. Each stage logs one progress line (through `logging`, so it reaches the console and
Hydra's `train.log`).
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import sysconfig
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from foundry.data.build_cache import build_key, publish_once, rank_zero_only
from foundry.data.config import DEFAULT_CORPUS_MB, DEFAULT_VOCAB_SIZE, QuickstartDataConfig

__all__ = [
    "QuickstartDataConfig",
    "prepare_quickstart",
    "prepare_quickstart_tokenizer",
    "quickstart_corpus",
    "quickstart_tokenizer_path",
    "train_bpe_tokenizer",
]

EOS = "<|endoftext|>"
LAYOUT = 2
"""Version of the cache layout and build code; raising it gives every build a new folder."""
BUILD_FILE = "quickstart.json"
"""Each build folder's record of the parameters it was built with."""

log = logging.getLogger(__name__)
log.addFilter(rank_zero_only)


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


def _tokenizer_params(corpus_mb: float, vocab_size: int) -> dict[str, object]:
    """Everything the tokenizer (and the corpus under it) depends on: the corpus comes from this Python's
    standard library, and BPE training from the installed `tokenizers`."""
    try:
        tokenizers_version = version("tokenizers")
    except PackageNotFoundError:
        tokenizers_version = "absent"
    return {
        "layout": LAYOUT,
        "python": platform.python_version(),
        "tokenizers": tokenizers_version,
        "corpus_mb": float(corpus_mb),
        "vocab_size": int(vocab_size),
    }


def _data_params(cfg: QuickstartDataConfig, max_seq_len: int) -> dict[str, object]:
    """Everything the MDS splits depend on (the tokenizer's parameters through its key)."""
    return {
        "layout": LAYOUT,
        "tokenizer": build_key(_tokenizer_params(cfg.corpus_mb, cfg.vocab_size)),
        "max_seq_len": int(max_seq_len),
        "eval_fraction": float(cfg.eval_fraction),
        "train_split": cfg.train_split,
        "eval_split": cfg.eval_split,
        "eos": EOS,
    }


def quickstart_tokenizer_path(
    local: str | None, corpus_mb: float = DEFAULT_CORPUS_MB, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> str:
    """Where the quick-start tokenizer of these parameters is (or will be) published under the cache `local`.

    A pure function of its arguments (no I/O), so the config can name the file before it is built: it is the
    `${quickstart_tokenizer:...}` resolver of `conf/data/quickstart.yaml` (registered by `register_configs`).

    Raises:
        ValueError: `local` is None (no quick-start cache configured).
    """
    if local is None:
        raise ValueError(
            "no quick-start cache folder (data.local / data.quickstart_local is null): set tokenizer.name"
        )
    key = build_key(_tokenizer_params(corpus_mb, vocab_size))
    return str(Path(str(local)) / f"tokenizer-{key}" / "tokenizer.json")


def prepare_quickstart_tokenizer(cfg: QuickstartDataConfig) -> Path:
    """Build (or reuse) the quick-start tokenizer under `cfg.local`; returns its `tokenizer.json`.

    Its folder is keyed by `_tokenizer_params`; concurrent callers wait for one build (`publish_once`).
    """
    path = Path(quickstart_tokenizer_path(cfg.local, cfg.corpus_mb, cfg.vocab_size)).expanduser()
    params = _tokenizer_params(cfg.corpus_mb, cfg.vocab_size)

    def build(tmp: Path) -> None:
        log.info(
            "quick start: building the corpus and tokenizer in %s (once per corpus and vocabulary)",
            path.parent,
        )
        docs = _corpus(cfg)
        t0 = time.perf_counter()
        train_bpe_tokenizer(docs, vocab_size=cfg.vocab_size, path=tmp / "tokenizer.json")
        log.info(
            "quick start: trained a byte-level BPE tokenizer, %d tokens (%.1f s)",
            _vocab_size(tmp / "tokenizer.json"),
            time.perf_counter() - t0,
        )
        (tmp / BUILD_FILE).write_text(json.dumps(params, indent=2))

    publish_once(path.parent.parent, path.parent.name, build=build, what="quick start")
    return path


def prepare_quickstart(cfg: QuickstartDataConfig, *, max_seq_len: int) -> Path:
    """Build (or reuse) the quick-start tokenizer and MDS splits under the cache folder `cfg.local`.

    Each build goes to its own folder named by a hash of its parameters (`data-<key>`, `tokenizer-<key>`),
    published atomically and never modified afterwards, so a run reading one build is unaffected by runs with
    other parameters; concurrent builders of one key wait for a single build.

    Args:
        cfg: The data config.
        max_seq_len: Row length of the packed MDS rows.

    Returns:
        The data folder, holding `tokenizer.json` (a copy of the tokenizer the rows were made with),
        `quickstart.json` (the build parameters) and one sub-directory per split: read it as `data.local`.
    """
    from foundry.data.prep import convert_texts
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    root = Path(str(cfg.local)).expanduser()
    params = _data_params(cfg, max_seq_len)
    name = f"data-{build_key(params)}"
    if (root / name).is_dir():
        log.info("quick start: reusing the corpus, tokenizer and MDS splits in %s", root / name)
        return root / name
    begin = time.perf_counter()
    tokenizer_json = prepare_quickstart_tokenizer(cfg)

    def build(tmp: Path) -> None:
        log.info("quick start: building the MDS splits in %s (max_seq_len=%d)", root / name, max_seq_len)
        docs = _corpus(cfg)
        shutil.copyfile(tokenizer_json, tmp / "tokenizer.json")
        tokenizer = build_tokenizer(TokenizerConfig(name=str(tmp / "tokenizer.json")))
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
        (tmp / BUILD_FILE).write_text(json.dumps({**params, "tokenizer_path": str(tokenizer_json)}, indent=2))

    folder, built = publish_once(root, name, build=build, what="quick start")
    if built:
        log.info("quick start: data ready in %s (%.1f s)", folder, time.perf_counter() - begin)
    else:
        log.info("quick start: reusing the corpus, tokenizer and MDS splits in %s", folder)
    return folder


def _corpus(cfg: QuickstartDataConfig) -> list[str]:
    t0 = time.perf_counter()
    docs = quickstart_corpus(int(cfg.corpus_mb * 1e6))
    log.info(
        "quick start: corpus of %d documents, %.2fM characters (%.1f s)",
        len(docs),
        sum(len(d) for d in docs) / 1e6,
        time.perf_counter() - t0,
    )
    return docs


def _vocab_size(path: Path) -> int:
    from tokenizers import Tokenizer

    return int(Tokenizer.from_file(str(path)).get_vocab_size())
