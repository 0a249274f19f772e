"""The stack's neutral base layer, under both `streaming` and `foundry` (issue 39): names and paths that may
be written into (`stackbase.names`), and secrets masked by source (`stackbase.secrets`).

It imports neither `streaming` nor `foundry` (the layering test checks), so the standalone dataset library
and the trainer share one implementation of each safety rule instead of checking case by case where each
input arrives.
"""
