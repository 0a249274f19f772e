"""Network-latency benchmark driver for mosaicml-streaming (run with its reference venv's python)."""

from __future__ import annotations

from _peer_common import parse, timed_epoch, write_mds


def main() -> None:
    args = parse()
    from torch.utils.data import DataLoader

    from streaming import MDSWriter, StreamingDataset

    if args.cmd == "write":
        write_mds(args, MDSWriter)
        return

    def build() -> DataLoader:
        ds = StreamingDataset(remote=args.remote, local=args.cache, shuffle=True, batch_size=args.batch)
        return DataLoader(ds, batch_size=args.batch, num_workers=args.workers)

    timed_epoch(build, lambda b: len(b["id"]))


if __name__ == "__main__":
    main()
