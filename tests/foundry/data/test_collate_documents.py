"""TextCollator's optional keys: `sequence_id` token by token (EOS rule, recorded lengths, padding), `stream_id`."""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from foundry.data.collate import TextCollator
from foundry.data.documents import DocumentRule

EOS = 0
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "data_prep" / "convert_dataset_hf.py"


def _rows(*rows: list[int]) -> list[dict]:
    return [{"tokens": np.array(r, dtype=np.uint16)} for r in rows]


def test_sequence_ids_from_eos_token_by_token():
    c = TextCollator(max_seq_len=6, pad_token_id=EOS, documents=DocumentRule(eos_id=EOS))
    out = c(_rows([5, 6, 0, 7, 0, 8, 9], [0, 3, 4, 0, 5, 6]))
    assert out["input_ids"].tolist() == [[5, 6, 0, 7, 0, 8], [0, 3, 4, 0, 5, 6]]
    assert out["sequence_id"].dtype == torch.int64
    assert out["sequence_id"].tolist() == [[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 2, 2]]
    assert set(out) == {"input_ids", "labels", "sequence_id"}


def test_padding_gets_its_own_sequence_id_even_when_pad_is_eos():
    c = TextCollator(max_seq_len=6, pad_token_id=EOS, documents=DocumentRule(eos_id=EOS))
    out = c(_rows([5, 0, 7], [1, 2, 3, 4, 0, 6]))
    assert out["input_ids"].tolist() == [[5, 0, 7, 0, 0, 0], [1, 2, 3, 4, 0, 6]]
    assert out["sequence_id"].tolist() == [[0, 0, 1, 2, 2, 2], [0, 0, 0, 0, 0, 1]]
    assert out["attention_mask"].tolist()[0] == [1, 1, 1, 0, 0, 0]


def test_recorded_lengths_win_over_eos_and_are_truncated_with_the_row():
    c = TextCollator(max_seq_len=5, pad_token_id=9, documents=DocumentRule(eos_id=EOS))
    samples = _rows([1, 0, 2, 3, 0, 4], [1, 0, 2], [1, 2])
    samples[0]["document_lengths"] = np.array([3, 3], dtype=np.uint8)  # a literal 0 inside document 0
    samples[1]["document_lengths"] = np.array([3], dtype=np.uint8)
    out = c(samples)  # the third row has no column: EOS rule
    assert out["sequence_id"].tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 1, 1], [0, 0, 1, 1, 1]]


def test_no_separator_and_no_recorded_lengths_is_a_clear_error():
    c = TextCollator(max_seq_len=4, pad_token_id=0, documents=DocumentRule())
    with pytest.raises(ValueError, match="--record_documents"):
        c(_rows([1, 2, 3, 4]))
    samples = _rows([1, 2, 3, 4])
    samples[0]["document_lengths"] = np.array([1, 3])
    assert c(samples)["sequence_id"].tolist() == [[0, 1, 1, 1]]


def test_without_documents_there_is_no_sequence_id():
    out = TextCollator(max_seq_len=4, pad_token_id=0)(_rows([1, 0, 2, 3]))
    assert "sequence_id" not in out


def test_stream_id_from_the_stream_key():
    c = TextCollator(max_seq_len=3, pad_token_id=0)
    samples = _rows([1, 2, 3], [4, 5, 6], [7, 8, 9])
    for s, k in zip(samples, [2, 0, 2], strict=True):
        s["_stream"] = k
    out = c(samples)
    assert out["stream_id"].dtype == torch.int64 and out["stream_id"].tolist() == [2, 0, 2]
    del samples[1]["_stream"]
    with pytest.raises(KeyError, match="_stream"):
        c(samples)


def test_collator_pickles_with_its_rule():
    c = TextCollator(max_seq_len=4, pad_token_id=0, documents=DocumentRule(eos_id=0, bos_id=1))
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.documents == c.documents
    samples = _rows([1, 5, 0, 1])
    assert c2(samples)["sequence_id"].tolist() == c(samples)["sequence_id"].tolist() == [[0, 0, 0, 1]]


class _CharTokenizer:
    """A tokenizer over characters: 'a' -> 1 ... ; '|' (the EOS text) -> 0."""

    eos_token_id = 0

    def __len__(self) -> int:
        return 64

    def __call__(self, texts, add_special_tokens=False, truncation=False):
        one = isinstance(texts, str)
        ids = [[0 if ch == "|" else ord(ch) - 96 for ch in t] for t in ([texts] if one else texts)]
        return {"input_ids": ids[0] if one else ids}


def test_converter_records_document_lengths_and_the_collator_reads_them(tmp_path, monkeypatch):
    from foundry.data.prep import convert_texts
    from streaming import LocalDataset

    # the second document contains the EOS text, so only the recorded lengths split it correctly
    docs = ["abc", "d|e", "fghij", "k"]
    convert_texts(docs, tokenizer=_CharTokenizer(), out=str(tmp_path / "mds"), max_seq_len=5, eos_text="|",
                  record_documents=True)  # fmt: skip
    ds = LocalDataset(str(tmp_path / "mds"))
    rows = [ds[i] for i in range(len(ds))]
    assert [r["tokens"].tolist() for r in rows] == [[1, 2, 3, 0, 4], [0, 5, 0, 6, 7], [8, 9, 10, 0, 11]]
    assert [r["document_lengths"].tolist() for r in rows] == [[4, 1], [3, 2], [4, 1]]
    c = TextCollator(max_seq_len=5, pad_token_id=0, documents=DocumentRule(eos_id=0))
    assert c(rows)["sequence_id"].tolist() == [[0, 0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 0, 0, 0, 1]]


def test_converter_script_records_documents(neox_tokenizer_path, tmp_path):
    from streaming import LocalDataset

    (tmp_path / "x.jsonl").write_text("".join(f'{{"text": "doc {i} {"word " * i}"}}\n' for i in range(30)))
    spec = importlib.util.spec_from_file_location("convert_dataset_hf", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--dataset", str(tmp_path / "x.jsonl"), "--splits", "train", "--out", str(tmp_path / "mds"),
                 "--tokenizer", str(neox_tokenizer_path), "--concat_tokens", "16", "--eos_text", "<|endoftext|>",
                 "--record_documents", "--no_progress"])  # fmt: skip
    ds = LocalDataset(str(tmp_path / "mds"), "train")
    eos = 0  # gpt-neox-20b's <|endoftext|>
    c = TextCollator(max_seq_len=16, pad_token_id=eos, documents=DocumentRule(eos_id=eos))
    rows = [ds[i] for i in range(len(ds))]
    assert all(r["document_lengths"].sum() == 16 for r in rows)
    for r in rows:  # plain text documents: the recorded boundaries are exactly the EOS rule's
        r2 = {"tokens": r["tokens"]}
        assert c([r])["sequence_id"].tolist() == c([r2])["sequence_id"].tolist()
