"""Distributed awareness: one store per rank, under the run.

When torch.distributed is initialised, rank r of a run named N records into
<logdir>/N/rank-<r>/ (a run directory of its own, with rank and world_size in its meta),
so ranks never contend for one SQLite file and a straggler's numbers stay its own. A run
name chosen by trainscope (name=None) is made on rank 0 and sent to the others, so every
rank lands under the same run.

`trainscope runs <logdir>` lists such a run with one line per rank, and
`trainscope diagnose <logdir>/N` judges each rank and then compares them at the same steps
(src/doctor/ranks.h; docs/doctor.md "Ranks of a data-parallel run"): every finding says its
rank, and a rank whose loss or all-reduced gradient norm leaves the others' is named by
RANK_DIVERGENCE. A rank killed mid-run keeps what its recorder had committed.
"""

from __future__ import annotations

import os
import sys
import time


def rank_layout(logdir, name):
    """(logdir, name) for this process: unchanged without torch.distributed."""
    torch = sys.modules.get("torch")
    try:
        dist = torch.distributed if torch is not None else None
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return logdir, name
        rank = dist.get_rank()
        if not name:
            box = [time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() & 0xffff:04x}" if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            name = box[0]
        return os.path.join(os.fspath(logdir), name), f"rank-{rank}"
    except Exception as error:  # never stop the training for this
        print(f"trainscope: distributed layout unavailable ({error}); recording as one run", file=sys.stderr)
        return logdir, name
