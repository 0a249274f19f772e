"""Mixture cost: training tokens/s through `task=pretrain` with a 3-stream mixture vs one stream of the same size.

Both runs train the same model for the same steps on stand-in token rows (`foundry.data.standin`): `single` reads
one stream of N rows, `mixture` three streams of N/3 rows each with proportions 0.5/0.3/0.2 (so stream sampling,
partial repeats and the `_stream` tag with per-stream train metrics are all on the path). After a warm-up
round, runs alternate (single, mixture, ...) and the median `throughput/tokens_per_sec` of each is reported with
the ratio mixture/single (target: the mixture costs < 5%, i.e. ratio > 0.95). Prints one JSON object.
  python scripts/bench/mixture_train.py [--rounds 3] [--steps 40] [--workers 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_dir

from foundry.config import TrainConfig, register_configs, to_train_config
from foundry.data.config import StreamConfig, TextDataConfig
from foundry.data.standin import StandinLayout, write_standin_streams
from foundry.tasks.pretrain import pretrain

CONF = Path(__file__).resolve().parents[2] / "conf"
WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}


def _configs(root: Path, *, steps: int, workers: int, samples: int) -> dict[str, TrainConfig]:
    register_configs()
    overrides = [
        "data=local-mds",
        f"data.local={root / 'single'}",
        "data.eval_split=null",
        f"data.num_workers={workers}",
        "model=mpt-tiny",
        "tokenizer=none",
        "trainer=cpu",
        "trainer.global_train_batch_size=8",
        "trainer.device_train_microbatch_size=8",
        f"trainer.max_duration={steps}ba",
        "checkpoint=none",
        "run_name=bench",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        single = to_train_config(compose("train", overrides=overrides))
    streams = {n: StreamConfig(path=f"mix/{n}", proportion=w) for n, w in WEIGHTS.items()}
    assert isinstance(single.data, TextDataConfig)
    mixture = replace(single, data=replace(single.data, local=None, local_root=str(root), streams=streams))
    write_standin_streams(root, layouts={"one": StandinLayout("single", ("train",))}, samples=samples)
    layouts = {n: StandinLayout(f"mix/{n}", ("train",)) for n in WEIGHTS}
    write_standin_streams(root, layouts=layouts, samples=samples // len(WEIGHTS))
    return {"single": single, "mixture": mixture}


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, runs the alternating rounds and prints the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank")
    ap.add_argument("--samples", type=int, default=3000, help="rows in all (single) / split over 3 (mixture)")
    args = ap.parse_args(argv)
    rates: dict[str, list[float]] = {"single": [], "mixture": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfgs = _configs(root / "data", steps=args.steps, workers=args.workers, samples=args.samples)
        for r in range(-1, args.rounds):  # round -1 warms up (first-run costs) and is not counted
            for kind, cfg in cfgs.items():
                metrics = pretrain(cfg, run_dir=root / f"{kind}-{r}")
                if r >= 0:
                    rates[kind].append(float(metrics["throughput/tokens_per_sec"]))
    single, mixture = (statistics.median(rates[k]) for k in ("single", "mixture"))
    line = {
        "bench": "mixture_train",
        "model": "mpt-tiny",
        "steps": args.steps,
        "workers": args.workers,
        "rounds": args.rounds,
        "single_tokens_per_sec": round(single, 1),
        "mixture_tokens_per_sec": round(mixture, 1),
        "ratio_mixture_over_single": round(mixture / single, 4),
        "target": "> 0.95",
        "runs": rates,
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
