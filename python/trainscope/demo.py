"""`trainscope demo`: a real small PyTorch training, recorded by trainscope.

A two-layer MLP learns to classify points of a generated spiral data set (no downloads).
"""

import argparse
import time

import trainscope as ts


def spirals(n_per_class, classes, generator):
    import torch
    points, labels = [], []
    for c in range(classes):
        radius = torch.linspace(0.05, 1.0, n_per_class)
        angle = torch.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + 0.2 * torch.randn(n_per_class, generator=generator)
        points.append(torch.stack([radius * torch.sin(angle), radius * torch.cos(angle)], dim=1))
        labels.append(torch.full((n_per_class,), c, dtype=torch.long))
    return torch.cat(points), torch.cat(labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()

    import torch
    generator = torch.Generator().manual_seed(0)
    x, y = spirals(400, 3, generator)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    config = {"model": "mlp-2-64-3", "optimizer": "adam", "lr": 1e-2, "batch_size": 64, "steps": args.steps}

    run = ts.init(logdir=args.logdir, name=args.name, config=config)
    run.watch(model, optimizer)  # per-layer gradients, weights, updates, activations
    started = time.perf_counter()
    for step in range(args.steps):
        index = torch.randint(0, len(x), (64,), generator=generator)
        logits = model(x[index])
        loss = torch.nn.functional.cross_entropy(logits, y[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # watch() records the gradient norm and the LR here
        scheduler.step()
        accuracy = (logits.argmax(dim=1) == y[index]).float().mean()
        run.log({"train/loss": loss, "train/acc": accuracy}, step=step)
        if step % 50 == 49 or step == args.steps - 1:
            with torch.no_grad():
                val_loss = torch.nn.functional.cross_entropy(model(x), y)
                val_acc = (model(x).argmax(dim=1) == y).float().mean()
            run.log({"val/loss": val_loss, "val/acc": val_acc}, step=step)
            print(f"step {step + 1:4d}  loss {loss.item():.4f}  val_loss {val_loss.item():.4f}  "
                  f"val_acc {val_acc.item():.3f}")
    run.finish()
    print(f"trained {args.steps} steps in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
