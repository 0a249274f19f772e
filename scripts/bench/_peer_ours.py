"""Network-latency benchmark driver for this project's ``streaming`` (see ``_peer_common``)."""

from __future__ import annotations

from _peer_common import parse, pool, timed_epoch


def main() -> None:
    args = parse()
    from streaming import MDSWriter, StreamingDataLoader, StreamingDataset

    if args.cmd == "write":
        rows = pool()
        columns = {"tokens": "ndarray:int32:2048", "id": "int"}
        with MDSWriter(out=args.out, columns=columns, size_limit=args.shard_mib << 20) as w:
            for i in range(args.samples):
                w.write({"tokens": rows[i % 64], "id": i})
        return

    def build() -> StreamingDataLoader:
        ds = StreamingDataset(remote=args.remote, local=args.cache, shuffle=True, batch_size=args.batch)
        return StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers)

    timed_epoch(build, lambda b: len(b["id"]))


if __name__ == "__main__":
    main()
