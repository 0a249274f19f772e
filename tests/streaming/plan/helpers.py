"""Shared helpers for plan tests: simulate a world of devices and DataLoader workers."""

from __future__ import annotations

import numpy as np

from streaming.plan import GlobalOrder, WorkerPlan


def device_batches(
    order: GlobalOrder, *, drop: int, P: int, R: int, W: int, B: int, d: int
) -> list[np.ndarray]:
    """Batches of device d in the order a DataLoader yields them (round-robin over workers)."""
    T = P * R
    per_worker = [
        list(
            WorkerPlan(
                order=order, drop_first=drop, num_devices=T, device=d, batch_size=B, num_workers=W, worker=w
            ).batches(chunk=7)
        )
        for w in range(W)
    ]
    out, k = [], 0
    while any(per_worker):
        w = k % W
        k += 1
        if per_worker[w]:
            out.append(per_worker[w].pop(0))
    return out


def global_batches(order: GlobalOrder, *, drop: int, P: int, R: int, W: int, B: int) -> list[list[int]]:
    """Sorted sample ids of each global batch (all devices' batch k)."""
    devs = [device_batches(order, drop=drop, P=P, R=R, W=W, B=B, d=d) for d in range(P * R)]
    n = max(len(x) for x in devs)
    return [sorted(np.concatenate([x[k] for x in devs if k < len(x)]).tolist()) for k in range(n)]
