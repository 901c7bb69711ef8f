"""A real (small) training recorded with trainscope, for the dashboard's end-to-end test.

A 4-layer MLP learns a synthetic classification task on CPU with SGD. At 60 % of the
steps one batch is fed with its learning rate multiplied by 40: the loss spikes for real,
which is what the dashboard must show (marker, findings panel, jump).

    /usr/bin/python3 tests/e2e/train_fixture.py LOGDIR NAME [STEPS]
"""
import sys

import torch
import trainscope as ts


def main():
    logdir, name = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    torch.manual_seed(0)
    x = torch.randn(4096, 32)
    w_true = torch.randn(32, 4)
    y = (x @ w_true).argmax(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4))
    lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    config = {"lr": lr, "batch_size": 64, "optimizer": "sgd", "momentum": 0.9, "model": "mlp-4", "steps": steps}
    run = ts.init(logdir=logdir, name=name, config=config)
    run.watch(model, opt, every=1, histograms_every=10)
    spike = steps * 6 // 10
    batches = ((x[i:i + 64], y[i:i + 64]) for s in range(steps) for i in [(s * 64) % (4096 - 64)])
    for step, (xb, yb) in enumerate(run.data(batches), start=1):
        for group in opt.param_groups:
            group["lr"] = lr * (40 if step == spike else 1)
        out = model(xb)
        loss = torch.nn.functional.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (out.argmax(1) == yb).float().mean()
        run.log({"train/loss": loss, "train/acc": acc})
        if step % 25 == 0:
            with torch.no_grad():
                val = torch.nn.functional.cross_entropy(model(x[-512:]), y[-512:])
            run.log({"val/loss": val})
    summary = run.finish()
    print(f"fixture: {summary['steps']} steps, {len(summary['findings'])} findings")


if __name__ == "__main__":
    main()
