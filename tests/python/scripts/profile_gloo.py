"""A real 2-rank DDP training on gloo, profiled with torch.profiler (record_shapes=True), one
trace per rank: `python profile_gloo.py OUT_DIR [PORT]`. Each step also runs an all_reduce,
an all_gather and a broadcast of 1 MiB (262144 floats) beside DDP's gradient all-reduce."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

ELEMENTS = 1 << 18


def work(rank, world, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.json")) as prof:
        for _ in range(5):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t = torch.randn(ELEMENTS)
            dist.all_reduce(t)
            dist.all_gather([torch.empty_like(t) for _ in range(world)], t)
            dist.broadcast(t, 0)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 29561
    os.makedirs(out, exist_ok=True)
    mp.spawn(work, args=(2, out, port), nprocs=2)
