"""Run directories: list, show, logs, stop, resume and an offline HTML report (`python -m foundry.runs`).

Design note: one concept per module: `store` (a local folder or bucket prefix holding runs), `state` (a
run's state from run.json, events.jsonl and live.json), `show` (config diff, checkpoints, evals), `control`
(stop through the preemption path, the resume command), `plots` and `report` (the self-contained HTML
file), `cli`. Nothing here runs during training; the trainer's part is `foundry.callbacks.liveness`.
"""

from foundry.runs.state import STATES, RunSummary, decide_state, load_run, summarize
from foundry.runs.store import RunRoot, resolve_run

__all__ = ["STATES", "RunRoot", "RunSummary", "decide_state", "load_run", "resolve_run", "summarize"]
