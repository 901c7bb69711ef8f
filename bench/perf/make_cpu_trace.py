"""A large real trace for timing: a small CNN trained on CPU for `steps` profiled steps with
torch.profiler (record_shapes, with_stack), written as Kineto JSON.

  python bench/perf/make_cpu_trace.py OUT.json [STEPS]     # torch 2.x (Kineto): ~20 MB for 20 steps
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters())
    data = torch.utils.data.TensorDataset(torch.randn(64 * (steps + 2), 3, 32, 32), torch.randint(0, 10, (64 * (steps + 2),)))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                 record_shapes=True, with_stack=True, on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main()
