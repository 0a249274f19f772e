"""On-disk formats: MDS, JSONL, CSV/TSV/XSV shards, index.json, compression and hashing."""
