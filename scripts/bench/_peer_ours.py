"""Network-latency benchmark driver for this project's ``streaming`` (see ``_peer_common``)."""

from __future__ import annotations

from _peer_common import parse, timed_epoch, write_mds


def main() -> None:
    args = parse()
    from streaming import MDSWriter, StreamingDataLoader, StreamingDataset

    if args.cmd == "write":
        write_mds(args, MDSWriter)
        return

    def build() -> StreamingDataLoader:
        ds = StreamingDataset(remote=args.remote, local=args.cache, shuffle=True, batch_size=args.batch)
        return StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers)

    timed_epoch(build, lambda b: len(b["id"]))


if __name__ == "__main__":
    main()
