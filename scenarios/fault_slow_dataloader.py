"""Fault: a data loader whose __getitem__ does slow per-sample work (4 ms a batch) in the
main process, for a model step of about a millisecond."""
from common import *
import time

SPEC = dict(name="fault_slow_dataloader", kind="faulty", expected=["DATALOADER_BOTTLENECK"], step=0, location=None,
            cause="slow_dataloader")


class SlowDataset(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        time.sleep(0.00025)  # decoding / augmentation done per sample, in the loop
        return self.x[i], self.y[i]


def endless(loader):
    while True:
        yield from loader


def main(logdir):
    x, y = make_classification(seed=27)
    loader = torch.utils.data.DataLoader(SlowDataset(x, y), batch_size=16, shuffle=True, num_workers=0)
    return train(logdir, SPEC, mlp(), loader=endless(loader), lr=0.05, steps=120, seed=27)


if __name__ == "__main__":
    cli(main)
