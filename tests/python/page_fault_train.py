"""A CPU training whose activations are 33 MB each (tests/python/test_doctor.py's page-fault
test): above glibc malloc's largest mmap threshold (32 MB), so every one is mapped fresh and
unmapped again, page by page, each step, unless the thresholds are held in the environment
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)."""
import sys

import torch

import trainscope as ts

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(8, 16, 256, 256, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(2)]
run = ts.init(sys.argv[1], sys.argv[2])
run.watch(model, opt)
for x, y in run.data(batches * 16):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    run.log({"train/loss": loss})
run.finish()
