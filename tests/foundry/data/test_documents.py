"""Sequence ids of packed rows: from EOS/BOS tokens, from recorded lengths, and the converter that records them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry.data.documents import DocumentRule, sequence_ids_from_lengths, sequence_ids_from_tokens
from foundry.data.prep import concat_documents

EOS, BOS = 1000, 1001
docs_st = st.lists(st.lists(st.integers(0, 999), max_size=12), min_size=1, max_size=12)


def _ids(row: list[int], **rule: int) -> list[int]:
    return sequence_ids_from_tokens(np.array([row]), rule=DocumentRule(**rule))[0].tolist()


def _from_lengths(doc_lengths: np.ndarray, length: int) -> list[int]:
    return sequence_ids_from_lengths([doc_lengths], seq=length)[0].tolist()


def test_eos_ends_its_document_bos_starts_one():
    assert _ids([5, 6, EOS, 7, EOS, 8], eos_id=EOS) == [0, 0, 0, 1, 1, 2]
    assert _ids([EOS, EOS, 3], eos_id=EOS) == [0, 1, 2]  # an empty document is just its EOS
    assert _ids([BOS, 5, BOS, 6, 7], bos_id=BOS) == [0, 0, 1, 1, 1]
    # bos A eos bos B eos: the BOS right after an EOS does not open a second (empty) document
    assert _ids([BOS, 5, EOS, BOS, 6, EOS], eos_id=EOS, bos_id=BOS) == [0, 0, 0, 1, 1, 1]
    # one token that is both (GPT-2's <|endoftext|>) acts as EOS only
    assert _ids([5, EOS, 6, EOS, 7], eos_id=EOS, bos_id=EOS) == [0, 0, 1, 1, 2]


def test_padding_gets_its_own_id():
    tokens = np.array([[5, EOS, 6, 0, 0], [EOS, 7, 8, 9, EOS], [0, 0, 0, 0, 0]])
    got = sequence_ids_from_tokens(tokens, rule=DocumentRule(eos_id=EOS), lengths=np.array([3, 5, 0]))
    assert got.tolist() == [[0, 0, 1, 2, 2], [0, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    # pad == eos (a tokenizer without a pad token): padding still counts as one document
    tokens[0, 3:] = EOS
    got = sequence_ids_from_tokens(tokens[:1], rule=DocumentRule(eos_id=EOS), lengths=np.array([3]))
    assert got.tolist() == [[0, 0, 1, 2, 2]]


def test_recorded_lengths_are_exact_and_checked():
    assert _from_lengths(np.array([2, 1, 3]), 6) == [0, 0, 1, 2, 2, 2]
    assert _from_lengths(np.array([2, 1, 3]), 4) == [0, 0, 1, 2]  # truncated
    padded = sequence_ids_from_lengths(
        [np.array([2, 4]), np.array([1, 1]), np.array([3])], lengths=np.array([3, 2, 0]), seq=4
    )
    assert padded.tolist() == [[0, 0, 1, 2], [0, 1, 2, 2], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="document_lengths.*--record_documents"):
        _from_lengths(np.array([2, 1]), 6)
    with pytest.raises(ValueError, match="positive"):
        _from_lengths(np.array([0, 6]), 6)


@settings(deadline=None, max_examples=80)
@given(docs=docs_st, bos=st.booleans(), cut=st.integers(0, 200))
def test_token_ids_match_document_structure_and_truncate_consistently(docs, bos, cut):
    pieces = [([BOS] if bos else []) + d + [EOS] for d in docs]
    row = np.array([t for p in pieces for t in p])
    rule = DocumentRule(eos_id=EOS, bos_id=BOS if bos else None)
    ids = sequence_ids_from_tokens(row[None], rule=rule)[0]
    expected = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
    assert ids.tolist() == expected.tolist()
    assert ids.tolist() == _from_lengths(np.array([len(p) for p in pieces]), len(row))
    # a truncated row has a prefix of the ids
    cut = min(cut, len(row))
    assert sequence_ids_from_tokens(row[None, :cut], rule=rule)[0].tolist() == ids[:cut].tolist()
    # ids start at 0 and step by 0 or 1
    assert ids[0] == 0 and set(np.diff(ids).tolist()) <= {0, 1}


@settings(deadline=None, max_examples=80)
@given(docs=docs_st, seq=st.integers(1, 17), wrap=st.booleans(), bos=st.booleans())
def test_converter_lengths_agree_with_rows_and_eos_ids(docs, seq, wrap, bos):
    pre = [BOS] if bos else None
    out = list(concat_documents(docs, max_seq_len=seq, bos=pre, eos=[EOS], wrap=wrap))
    rule = DocumentRule(eos_id=EOS, bos_id=BOS if bos else None)
    for row, lengths in out:
        assert lengths.sum() == seq and (lengths > 0).all()
        # documents hold no separators here, so both sources agree exactly
        assert _from_lengths(lengths, seq) == sequence_ids_from_tokens(row[None], rule=rule)[0].tolist()


def test_recorded_lengths_survive_separators_inside_documents():
    docs = [[1, EOS, 2], [3]]  # a literal EOS inside the first document
    [(row, lengths)] = list(concat_documents(docs, max_seq_len=6, eos=[EOS]))
    assert row.tolist() == [1, EOS, 2, EOS, 3, EOS] and lengths.tolist() == [4, 2]


def test_rule_from_a_tokenizer():
    class Tok:
        eos_token_id, bos_token_id = 2, 1

    assert DocumentRule.from_tokenizer(Tok()) == DocumentRule(eos_id=2, bos_id=1)
    assert not DocumentRule.from_tokenizer(None).has_separator  # token-id data: rows need document_lengths


@settings(deadline=None, max_examples=80)
@given(
    rows=st.lists(
        st.tuples(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(0, 40)),
        min_size=1,
        max_size=5,
    ),
    seq=st.integers(1, 30),
)
def test_batched_lengths_match_a_per_row_reference(rows, seq):
    docs = [np.array(d) for d, _ in rows]
    real = np.array([min(n, seq, int(d.sum())) for d, n in zip(docs, (n for _, n in rows), strict=True)])
    got = sequence_ids_from_lengths(docs, lengths=real, seq=seq)
    for d, n, ids in zip(docs, real, got, strict=True):
        ref = np.repeat(np.arange(len(d)), d)[:n]
        pad = ref[-1] + 1 if n else 0
        assert ids.tolist() == ref.tolist() + [pad] * (seq - n)
