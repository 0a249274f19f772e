"""Packing decides which example lands in which row: invariants (hypothesis) and hand-checked cases."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from foundry.data.finetune.packing import candidate_ratios, choose_packing_ratio, pack_bins, profile_packing


def test_first_fit_decreasing_by_hand():
    # sizes 5,4,3,3,2 into 2 bins of 8, nothing open: 5 -> b0, 4 -> b1, 3 -> b0 (8), 3 -> b1 (7), 2 -> new b2
    p = pack_bins([5, 3, 4, 2, 3], open_bins=[], new=range(5), num_bins=2, max_len=8, max_leftover_bins=None)
    assert p.rows == [[0, 1], [2, 4]]
    assert p.leftovers == [[3]] and p.dropped == []


def test_leftover_bins_are_filled_first_and_limited():
    p = pack_bins([6, 1, 1, 7], open_bins=[[0]], new=[1, 2, 3], num_bins=1, max_len=8, max_leftover_bins=0)
    # 7 (item 3) cannot join the open bin (6); 1 and 1 can
    assert p.rows == [[0, 1, 2]] and p.leftovers == [] and p.dropped == [[3]]


def test_a_step_emits_every_row_when_it_has_enough_items():
    # 4 tiny items and 4 rows: each must open its own bin (llm-foundry's rule), not all share one
    p = pack_bins([1, 1, 1, 1], open_bins=[], new=range(4), num_bins=4, max_len=8, max_leftover_bins=None)
    assert sorted(map(sorted, p.rows)) == [[0], [1], [2], [3]]


@given(
    sizes=st.lists(st.integers(1, 16), min_size=1, max_size=40),
    num_bins=st.integers(1, 6),
    n_open=st.integers(0, 5),
    keep=st.one_of(st.none(), st.integers(0, 3)),
)
def test_every_item_lands_once_and_fits(sizes, num_bins, n_open, keep):
    n_open = min(n_open, len(sizes) - 1)
    open_bins = [[i] for i in range(n_open)]
    new = list(range(n_open, len(sizes)))
    p = pack_bins(sizes, open_bins=open_bins, new=new, num_bins=num_bins, max_len=16, max_leftover_bins=keep)
    placed = [i for b in p.rows + p.leftovers + p.dropped for i in b]
    assert sorted(placed) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= 16 for b in p.rows + p.leftovers + p.dropped)
    assert len(p.rows) == min(num_bins, n_open + len(new)) or len(p.rows) == num_bins
    assert keep is None or len(p.leftovers) <= keep
    fills = [sum(sizes[i] for i in b) for b in p.rows + p.leftovers + p.dropped]
    assert fills[: len(p.rows)] == sorted(fills[: len(p.rows)], reverse=True)
    assert min(fills[: len(p.rows)]) >= max(fills[len(p.rows) :], default=0)
    again = pack_bins(
        sizes, open_bins=open_bins, new=new, num_bins=num_bins, max_len=16, max_leftover_bins=keep
    )
    assert again == p


def test_candidate_ratios_follow_llmfoundry():
    r = candidate_ratios(max_len=2048, device_batch_size=8)
    assert r[0] == 1.0 and r[-1] == 20.5 and r == sorted(r) and len(r) == 20


def test_auto_ratio_short_sequences_and_uniform_data():
    assert choose_packing_ratio([10] * 1000, device_batch_size=4, max_len=100, max_leftover_bins=None) == 1.0
    # 1000 examples of 50 tokens in rows of 1000: 20 fit per row with no waste until the ratio exceeds 20;
    # candidates go up to 10, and every one of them packs exactly
    ratio = choose_packing_ratio([50] * 4000, device_batch_size=4, max_len=1000, max_leftover_bins=None)
    assert ratio == 10.0
    prof = profile_packing([50] * 4000, ratio=10.0, device_batch_size=4, max_len=1000, max_leftover_bins=None)
    assert prof is not None and prof.waste == 0.0 and abs(prof.padding - 0.5) < 1e-9


def test_auto_ratio_stops_at_first_waste():
    # examples of 600 tokens in rows of 1000: any ratio > 1 leaves leftovers (waste), so auto picks 1
    assert (
        choose_packing_ratio([600] * 4000, device_batch_size=4, max_len=1000, max_leftover_bins=None) == 1.0
    )
    # ...unless waste is tolerated
    loose = choose_packing_ratio(
        [600] * 400, device_batch_size=4, max_len=1000, max_leftover_bins=8, max_waste=0.99
    )
    assert loose > 1.0
