"""Data mixtures: the documented command-line forms compose (and typos fail at compose time, naming the key),
per-stream counts over an epoch follow proportion/repeat/choose, the eval mixture reads every eval sample once
under its training stream index, resume with a mixture, and `on_mixture_change` (error / continue on 1 and 2
ranks)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose
from hydra.errors import ConfigCompositionException, MissingConfigException
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry.config import to_train_config
from foundry.data.mixture import StreamConfig
from foundry.data.standin import StandinLayout, read_stream_layouts, write_standin_streams
from foundry.data.text import TextDataConfig, build_text_dataloader
from foundry.errors import ConfigError
from streaming import MDSWriter
from streaming.plan.sampling import stream_choose
from streaming.reader.resume_state import mixture_changes, stream_summary
from streaming.reader.world import World

CONF = Path(__file__).resolve().parents[3] / "conf"
MIX = ["data=mpt-7b-mix"]


def _data(overrides: list[str]) -> TextDataConfig:
    return to_train_config(compose("train", overrides=overrides)).data


# ----------------------------------------------------------------------------------------- composition
def test_mpt_7b_mix_has_the_published_proportions(conf):
    data = _data(MIX)
    weights = {n: s.proportion for n, s in data.streams.items()}
    assert weights == {
        "mc4": 0.33, "c4": 0.299, "commoncrawl": 0.10, "the_stack": 0.10, "wikipedia": 0.04,
        "the_stack_markdown": 0.035, "s2orc": 0.033, "books": 0.03, "arxiv": 0.019, "stackexchange": 0.014,
    }  # fmt: skip
    assert sum(weights.values()) == pytest.approx(1.0)
    assert data.streams["arxiv"].path == "redpajama/arxiv" and data.stream_names == list(weights)
    assert [n for n, s in data.streams.items() if s.eval_split] == ["mc4", "c4"]


def test_command_line_forms_change_add_and_drop_streams(conf):
    assert _data([*MIX, "data.streams.c4.proportion=0.5"]).streams["c4"].proportion == 0.5
    added = _data([*MIX, "+data/streams@data.streams.code=the-stack", "data.streams.code.proportion=0.05"])
    assert added.streams["code"].path == "the-stack/selected" and added.streams["code"].proportion == 0.05
    assert list(added.streams)[-1] == "code"
    assert "arxiv" not in _data([*MIX, "~data.streams.arxiv"]).streams


def test_the_other_data_options_stay_single_datasets(conf):
    assert _data(["data=c4"]).streams == {} and _data(["data=c4"]).stream_names is None


@pytest.mark.parametrize(
    ("overrides", "error", "needle"),
    [
        (["data.streams.c4.proprtion=0.5"], ConfigCompositionException, "data.streams.c4.proprtion"),
        (["data.streams.c44.proportion=0.5"], ConfigCompositionException, "data.streams.c44.proportion"),
        (["+data.streams.c44.proportion=0.5"], ConfigCompositionException, "data.streams.c44.proportion"),
        (["~data.streams.arxx"], ConfigCompositionException, "data.streams.arxx"),
        (
            ["data/streams@data.streams.code=the-stack"],
            ConfigCompositionException,
            "data/streams@data.streams.code",
        ),
        (["+data/streams@data.streams.code=the-stak"], MissingConfigException, "data/streams/the-stak"),
    ],
)
def test_misspelled_stream_keys_fail_at_compose_time_naming_them(conf, overrides, error, needle):
    with pytest.raises(error, match=needle.replace(".", r"\.")):
        compose("train", overrides=[*MIX, *overrides])


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["+data.streams.c4.proprtion=0.5"], "did you mean 'data.streams.c4.proportion'"),
        (
            ["+data/streams@data.streams.c44=c4", "data.streams.c44.path=null"],
            "data.streams.c44 has no location (did you mean data.streams.c4?)",
        ),
        (["data.streams.c4.repeat=2"], "data.streams.c4 sets proportion and repeat"),
        (["data.streams.c4.proportion=null"], "give every stream a proportion"),
        (["data.streams.c4.proportion=-1"], "data.streams.c4.proportion=-1.0 must be >= 0"),
        (["data.sampling_method=balanced2"], "data.sampling_method='balanced2': use one of balanced, fixed"),
        (["data.batching_method=per-stream"], "data.batching_method='per-stream'"),
        (["data.on_mixture_change=ignore"], "data.on_mixture_change='ignore': use one of error, continue"),
        (["data.epoch_size=10q"], "data.epoch_size"),
        (["data.cache_limit=lots"], "data.cache_limit"),
        (["data.validate_hash=md6"], "data.validate_hash='md6'"),
        (["data.local=/x"], "data.local='/x' is for a single dataset"),
        (["data.eval_split=val"], "data.eval_split='val' is for a single dataset"),
        (["data.local_root=null"], "has no location"),
    ],
)
def test_bad_mixture_values_fail_before_anything_is_built(conf, overrides, needle):
    with pytest.raises(ConfigError) as info:
        _data([*MIX, *overrides])
    assert needle in str(info.value)


def test_every_streaming_knob_is_in_the_schema(conf):
    data = _data([*MIX, "data.epoch_size=100k", "data.cache_limit=10gb", "data.replication=2",
                  "data.batching_method=stratified", "data.partition_algo=orig", "data.keep_zip=true"])  # fmt: skip
    assert (data.epoch_size, data.cache_limit, data.replication) == ("100k", "10gb", 2)
    knobs = ["epoch_size", "sampling_method", "sampling_granularity", "partition_algo", "batching_method",
             "shuffle_algo", "shuffle_seed", "shuffle_block_size", "num_canonical_nodes", "predownload",
             "cache_limit", "download_retry", "download_timeout", "validate_hash", "keep_zip",
             "allow_unsafe_types", "replication"]  # fmt: skip
    assert all(hasattr(data, k) for k in knobs)


# ----------------------------------------------------------------------------------------- loaders
def _write(folder: Path, n: int, base: int) -> None:
    with MDSWriter(out=str(folder), columns={"tokens": "ndarray:int32"}) as w:
        for i in range(n):
            w.write({"tokens": np.full(4, base + i, dtype=np.int32)})


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Path:
    """Streams a (30 train), b (50 train, 6 val), c (20 train, 4 val) under one local root."""
    root = tmp_path_factory.mktemp("mix")
    for name, n, base in (("a", 30, 0), ("b", 50, 1000), ("c", 20, 2000)):
        _write(root / name / "train", n, base)
    _write(root / "b" / "val", 6, 5000)
    _write(root / "c" / "val", 4, 6000)
    return root


def _cfg(root: Path, weights: dict[str, dict], **kw) -> TextDataConfig:
    evals = {"a": None, "b": "val", "c": "val"}
    streams = {n: StreamConfig(path=n, eval_split=evals[n], **w) for n, w in weights.items()}
    return TextDataConfig(local_root=str(root), eval_split=None, streams=streams, **kw)


def _loader(cfg: TextDataConfig, *, bs: int = 4, world: World | None = None, **kw):
    return build_text_dataloader(
        cfg, tokenizer=None, device_batch_size=bs, world=world or World(), max_seq_len=4, seed=5, **kw
    )


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"a": {"repeat": 2}, "b": {"choose": 12}, "c": {}}, [60, 12, 20]),
        ({"a": {"repeat": 0.5}, "b": {"repeat": 1}, "c": {"choose": 47}}, [15, 50, 47]),
        ({"a": {"proportion": 0.5}, "b": {"proportion": 0.3}, "c": {"proportion": 0.2}}, [50, 30, 20]),
    ],
    ids=["repeat-choose-none", "fractional-repeat", "proportion"],
)
def test_per_stream_counts_over_an_epoch_follow_the_weights(three, weights, expected):
    loader = _loader(_cfg(three, weights, shuffle_seed=3))
    counts = Counter(int(s) for b in loader for s in b["stream_id"])
    assert [counts[i] for i in range(3)] == expected
    assert sum(expected) % 4 == 0  # drop_last drops nothing: every chosen sample is seen


@settings(max_examples=30, deadline=None)
@given(
    w=st.lists(st.integers(1, 1000), min_size=3, max_size=3),
    epoch=st.integers(0, 400),
    seed=st.integers(0, 2**31),
)
def test_proportions_split_an_epoch_exactly_up_to_one_sample(w, epoch, seed):
    # the counts the epoch above is checked against: floor(E p) per stream, the shortfall +1 to distinct streams
    counts = stream_choose(samples_per_stream=[30, 50, 20], proportion=[float(x) for x in w],
                           repeat=[None] * 3, choose=[None] * 3, epoch_size=epoch, seed=seed)  # fmt: skip
    exact = [epoch * x / sum(w) for x in w]
    assert int(counts.sum()) == epoch
    assert all(np.floor(e) <= c <= np.floor(e) + 1 for e, c in zip(exact, counts.tolist()))


def test_epoch_size_scales_a_proportion_mixture(three):
    weights = {"a": {"proportion": 1}, "b": {"proportion": 1}, "c": {"proportion": 2}}
    loader = _loader(_cfg(three, weights, epoch_size="200"))
    counts = Counter(int(s) for b in loader for s in b["stream_id"])
    assert [counts[i] for i in range(3)] == [50, 50, 100]


def test_eval_reads_every_eval_sample_once_under_its_training_index(three):
    cfg = _cfg(three, {"a": {}, "b": {}, "c": {}})
    loader = _loader(cfg, bs=4, evaluate=True)
    rows = [
        (int(b["input_ids"][i, 0]), int(b["stream_id"][i]))
        for b in loader
        for i in range(len(b["input_ids"]))
    ]
    assert sorted(rows) == [(5000 + i, 1) for i in range(6)] + [(6000 + i, 2) for i in range(4)]
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)  # unshuffled


def test_resume_mid_epoch_with_a_mixture_gives_the_same_batches(three):
    cfg = _cfg(three, {"a": {"proportion": 1}, "b": {"proportion": 2}, "c": {"proportion": 1}})
    full = [b["input_ids"] for b in _loader(cfg)]
    first = _loader(cfg)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    again = _loader(cfg)
    again.load_state_dict(state)
    rest = [b["input_ids"] for b in again]
    assert len(rest) == len(full) - 5 and all(torch.equal(x, y) for x, y in zip(full[5:], rest))


def _global_batches(cfg: TextDataConfig, ranks: int, state: dict | None, steps: int) -> list[list[int]]:
    """`steps` global batches (as sorted sample lists) of a world of `ranks` ranks, each resuming from `state`."""
    loaders = []
    for r in range(ranks):
        loader = _loader(cfg, bs=8 // ranks, world=World(ranks_per_node=ranks, rank=r))
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(iter(loader))
    return [sorted(int(x) for it in loaders for x in next(it)["input_ids"][:, 0]) for _ in range(steps)]


def test_changed_mixture_errors_naming_the_change_or_continues_the_same_on_1_and_2_ranks(three):
    old = _cfg(three, {"a": {"proportion": 1}, "b": {"proportion": 1}}, num_canonical_nodes=2)
    loader = _loader(old, bs=8)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    new = {"a": {"proportion": 1}, "b": {"proportion": 3}, "c": {"proportion": 1}}
    with pytest.raises(ConfigError) as info:
        _loader(_cfg(three, new, num_canonical_nodes=2)).load_state_dict(state)
    msg = str(info.value)
    assert "stream mixture changed" in msg and "data.on_mixture_change=continue" in msg
    assert "/c/train added" in msg and "/b/train: samples per epoch 40 -> 60" in msg
    cont = _cfg(three, new, num_canonical_nodes=2, on_mixture_change="continue")
    one = _global_batches(cont, 1, state, 4)
    assert one == _global_batches(cont, 2, state, 4)
    # the position is kept: the new plan's batches from sample 24 on, not the new epoch's start
    fresh = _global_batches(cont, 1, None, 7)
    assert one == fresh[3:]
    with pytest.raises(ConfigError, match="shuffle_seed"):  # other knobs must still match
        _loader(
            _cfg(three, new, num_canonical_nodes=2, on_mixture_change="continue", shuffle_seed=9)
        ).load_state_dict(state)


def test_mixture_changes_names_each_stream():
    a = [stream_summary(where=w, fingerprint=w, choose=10) for w in ("x", "y")]
    assert mixture_changes(a, a) == []
    b = [
        stream_summary(where="x", fingerprint="x2", choose=10),
        stream_summary(where="z", fingerprint="z", choose=5),
    ]
    assert mixture_changes(a, b) == [
        "stream y removed",
        "stream z added (5 samples per epoch)",
        "stream x: its index.json or weight setting changed",
    ]
    assert mixture_changes(a, a[::-1]) == ["stream order: x, y -> y, x"]


# ----------------------------------------------------------------------------------------- stand-ins
def test_standin_streams_follow_the_stream_files(tmp_path):
    layouts = read_stream_layouts(CONF / "data" / "streams")
    assert layouts["redpajama-arxiv"] == StandinLayout(path="redpajama/arxiv", splits=("train",))
    assert layouts["c4"] == StandinLayout(path="c4", splits=("train", "val"))
    written = write_standin_streams(
        tmp_path, layouts=layouts, samples=8, eval_samples=2, seq_len=16, vocab_size=64
    )
    assert len(written) == sum(len(x.splits) for x in layouts.values())
    assert all((w / "index.json").is_file() for w in written)
