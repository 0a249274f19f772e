"""A supervised launcher on torchrun's elastic agent: restarts, health checks, hang watchdog, events.jsonl.

Design note: one concept per module: `cli` (command line, starting torchrun), `agent` (the supervising
loop), `watchdog` (the pure hang decision), `health` (checks each rank runs before each start), `worker`
(the per-rank entry torchrun restarts); the JSONL record is the leaf module `foundry.events` (loggers and
`foundry.runs` read it without importing the launcher). Nothing here is imported by training
itself except through the heartbeat callback (`foundry.callbacks.heartbeat`).
"""

from foundry.events import EVENTS_FILE, append_event, read_events
from foundry.launch.watchdog import Progress, hang_deadline

__all__ = ["EVENTS_FILE", "Progress", "append_event", "hang_deadline", "read_events"]
