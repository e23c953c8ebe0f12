"""A DDP communication hook that records when each gradient bucket is handed to the process group and when its
all-reduce completes: the ranks' own record of the backward timeline, outside the capture.

Why: the what-if reads compute and overlap from the wire (analyze.whatif.wire_replay): the link's idle time, the
communication window, and when the backward pass ended inside it. Those readings are checked against this record
(tests/whatif/test_wire_buckets.py), which the analyzer never sees. The hook sends what DDP's default does (the
bucket divided by the world size, all-reduced in place), so the traffic is the same as without it.

Each rank writes DIR/rank<R>.json once training ends: a list of [bucket index, bytes, handed_ns, done_ns] in the
order the buckets were handed, times from the rank's wall clock (time.time_ns, the clock tcpdump stamps with on
the same machine).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["BucketLog"]


class BucketLog:
    """Registers the hook on a DDP model; `write` saves what it recorded."""

    def __init__(self, ddp: Any, world: int) -> None:
        import torch
        import torch.distributed as dist

        self.world = world
        self.rows: list[list[int]] = []
        # DDP refuses a hook annotated other than (GradBucket) -> Future[Tensor], and this module's annotations are
        # strings (postponed evaluation): the registered function carries the classes themselves
        BucketLog._hook.__annotations__.update(bucket=dist.GradBucket, **{"return": torch.futures.Future[torch.Tensor]})
        ddp.register_comm_hook(None, self._hook)

    def _hook(self, _state: Any, bucket: Any) -> Any:
        import torch.distributed as dist

        handed = time.time_ns()
        tensor = bucket.buffer()
        tensor.div_(self.world)
        size = tensor.numel() * tensor.element_size()
        index = bucket.index()
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def done(fut: Any) -> Any:
            self.rows.append([index, size, handed, time.time_ns()])
            return fut.value()[0]

        return future.then(done)

    def write(self, folder: str, rank: int) -> None:
        """DIR/rank<R>.json, in the order the buckets were handed."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        rows = sorted(self.rows, key=lambda row: row[2])
        path = os.path.join(folder, f"rank{rank}.json")
        Path(path).write_text(json.dumps(rows))
