"""Writing datasets: shard writers, where their files go, and joining indexes written in parallel.

- ``base``: ``Writer``, the machinery every format shares (buffering, shard cutting, compression, hashes,
  atomic files, ``index.json`` published last, append).
- ``mds``: ``MDSWriter``; ``text``: ``JSONWriter``, ``XSVWriter``, ``CSVWriter``, ``TSVWriter``.
- ``output``: the ``out`` argument resolved to a local folder, optionally mirrored to a remote URL.
- ``merge``: ``merge_index``, one ``index.json`` over sub-folder datasets.

Design note: the public names are re-exported (lazily) by ``streaming`` itself, which is where users import
them from; this package only groups the modules, so importing one writer never loads the others.
"""
