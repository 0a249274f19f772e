"""Network-latency benchmark driver for LitData (run with its reference venv's python).

LitData fetches chunks through obstore, which refuses plain ``http://`` endpoints unless its client options
say ``allow_http``; the driver adds that option to LitData's obstore client options (a module-level dict,
set at import so spawned workers get it too) and passes the endpoint through ``storage_options``.
"""

from __future__ import annotations

import os

import numpy as np
from _peer_common import parse, pool, timed_epoch

try:
    from litdata.streaming import downloader as _downloader

    _downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"  # type: ignore[index]
except ImportError:  # not the LitData venv: the parse error below says what is wrong
    pass

_ROWS = pool()


def _sample(i: int) -> dict[str, object]:
    return {"tokens": _ROWS[i % 64], "id": i}


def main() -> None:
    args = parse()
    import litdata

    if args.cmd == "write":
        litdata.optimize(
            fn=_sample,
            inputs=list(range(args.samples)),
            output_dir=os.path.abspath(args.out),
            chunk_bytes=args.shard_mib << 20,
            num_workers=1,
            mode="overwrite",
        )
        return

    def build() -> litdata.StreamingDataLoader:
        ds = litdata.StreamingDataset(
            input_dir=args.remote,
            cache_dir=args.cache,
            shuffle=True,
            storage_options={"endpoint_url": args.endpoint},
        )
        return litdata.StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers)

    timed_epoch(build, lambda b: len(b["id"]) if not isinstance(b["id"], np.ndarray) else b["id"].shape[0])


if __name__ == "__main__":
    main()
