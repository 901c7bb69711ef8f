"""Real (small) trainings recorded with trainscope, for the dashboard's end-to-end test.

    /usr/bin/python3 tests/e2e/train_fixture.py LOGDIR NAME [STEPS] [KIND]

KIND (default spike):
  spike        a 4-layer MLP learns a synthetic classification task with SGD; at 60 % of the
               steps one batch is fed with its learning rate multiplied by 40, so the loss
               spikes for real (marker, findings panel, jump).
  healthy      the same MLP without the spike: a run with nothing wrong in it.
  nan          a sigmoid classifier with a hand-written log loss and a learning rate far too
               high (1.0 with momentum): the sigmoid saturates, log(0) gives -inf and the
               loss turns NaN (near step 70); the run stops 20 NaN steps later.
  slow-loader  the MLP fed by a loader that sleeps 15 ms per batch: the training waits for
               data most of each step (DATALOADER_BOTTLENECK).
"""
import math
import sys
import time

import torch
import trainscope as ts


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4))


def main():
    logdir, name = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    kind = sys.argv[4] if len(sys.argv) > 4 else "spike"
    if kind not in ("spike", "healthy", "nan", "slow-loader"):
        sys.exit(f"train_fixture.py: KIND must be spike, healthy, nan or slow-loader, not {kind!r}")
    torch.manual_seed(0)
    x = torch.randn(4096, 32)
    w_true = torch.randn(32, 4)
    y = (x @ w_true).argmax(1)
    lr = {"nan": 1.0}.get(kind, 0.05)
    if kind == "nan":
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1), torch.nn.Sigmoid())
        y = (y == 0).float()
    else:
        model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    config = {"lr": lr, "batch_size": 64, "optimizer": "sgd", "momentum": 0.9,
              "model": "sigmoid-2" if kind == "nan" else "mlp-4", "steps": steps, "kind": kind}
    run = ts.init(logdir=logdir, name=name, config=config)
    run.watch(model, opt, every=1, histograms_every=10)
    spike = steps * 6 // 10
    nan_steps = 0

    def batches():
        for s in range(steps):
            i = (s * 64) % (4096 - 64)
            if kind == "slow-loader":
                time.sleep(0.015)  # a loader that decodes on the training's thread
            yield x[i:i + 64], y[i:i + 64]

    for step, (xb, yb) in enumerate(run.data(batches()), start=1):
        for group in opt.param_groups:
            group["lr"] = lr * (40 if kind == "spike" and step == spike else 1)
        out = model(xb)
        if kind == "nan":
            p = out.squeeze(1)
            # log(sigmoid) written by hand: once the sigmoid saturates, log(0) = -inf.
            loss = -(yb * torch.log(p) + (1 - yb) * torch.log(1 - p)).mean()
            acc = ((p > 0.5).float() == yb).float().mean()
        else:
            loss = torch.nn.functional.cross_entropy(out, yb)
            acc = (out.argmax(1) == yb).float().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss, "train/acc": acc})
        if step % 25 == 0 and kind != "nan":
            with torch.no_grad():
                val = torch.nn.functional.cross_entropy(model(x[-512:]), y[-512:])
            run.log({"val/loss": val})
        if kind == "nan" and not math.isfinite(loss.item()):
            nan_steps += 1
            if nan_steps > 20:
                break  # a user stops a run whose loss has been NaN for a while
    if kind != "nan":
        with torch.no_grad():
            test = torch.nn.functional.cross_entropy(model(x[:512]), y[:512])
        run.log({"test/loss": test})  # one point: drawn as a point, not as empty axes
    summary = run.finish()
    print(f"fixture: {kind}: {summary['steps']} steps, {len(summary['findings'])} findings")


if __name__ == "__main__":
    main()
