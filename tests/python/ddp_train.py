"""A small DistributedDataParallel training on gloo, started by torchrun, for
test_distributed.py: each rank records into <logdir>/<name>/rank-<r>/ through the real client.

Every rank draws its own shard of a generated 3-class problem (the seed depends on the rank),
so healthy ranks see different batches. Options make shards differ in healthy ways (batch
size, input noise) or break one rank on purpose:

  --perturb inputs   the rank's inputs are multiplied by 50 (a shard without normalisation)
  --perturb labels   the rank's labels are shuffled (a shard whose labels do not match)
  --perturb grads    the rank's gradients are multiplied by 20 after the all-reduce (a rank
                     whose copy of the model leaves the others': its grad/global_norm differs)
  --slow-rank R      rank R's forward takes --slow-seconds longer (a straggler)
  --kill-rank R --kill-step K   rank R flushes at step K, writes its pid to <logdir>/victim.pid
                     and waits to be killed (the test sends SIGKILL)
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import trainscope as ts


class Delay(torch.nn.Module):
    """Waits in the forward on a slow rank (on the others it passes its input on)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        if self.seconds:
            time.sleep(self.seconds)
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--name", default=None)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", default="32", help="batch size, or one per rank: 16,32,64")
    parser.add_argument("--noise", default="1.5", help="input noise std, or one per rank")
    parser.add_argument("--perturb", choices=["none", "inputs", "labels", "grads"], default="none")
    parser.add_argument("--perturb-rank", type=int, default=-1)
    parser.add_argument("--perturb-from", type=int, default=0, help="first perturbed step")
    parser.add_argument("--seed", type=int, default=0, help="shifts every rank's data seed")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-seconds", type=float, default=0.01)
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-step", type=int, default=-1)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def per_rank(text, kind):
        values = [kind(v) for v in text.split(",")]
        return values[rank % len(values)]

    batch, noise = per_rank(args.batch, int), per_rank(args.noise, float)
    torch.manual_seed(0)  # same problem and same initial model on every rank
    centers = torch.randn(3, 8) * 1.5
    delay = args.slow_seconds if rank == args.slow_rank else 0
    model = torch.nn.Sequential(Delay(delay), torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    shard = torch.Generator().manual_seed(1000 * (args.seed + 1) + rank)  # this rank's own data

    run = ts.init(logdir=args.logdir, name=args.name, config={"batch_size": batch, "world_size": world,
                                                                 "optimizer": "sgd", "num_classes": 3})
    run.watch(ddp, optimizer)
    for step in range(args.steps):
        labels = torch.randint(0, 3, (batch,), generator=shard)
        inputs = centers[labels] + noise * torch.randn(batch, 8, generator=shard)
        perturbed = rank == args.perturb_rank and step >= args.perturb_from
        if perturbed and args.perturb == "inputs":
            inputs = inputs * 50
        if perturbed and args.perturb == "labels":
            labels = torch.randint(0, 3, (batch,), generator=shard)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
        loss.backward()  # DDP all-reduces the gradients here
        # Clipped, so that one rank's unnormalised inputs do not blow the shared model up: an
        # unclipped job diverged on every rank on one CPU and not on another (rounding), and
        # its ranks could no longer be told apart after the blow-up.
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        if perturbed and args.perturb == "grads":
            for p in ddp.parameters():
                p.grad.mul_(20)
        optimizer.step()
        run.log({"train/loss": loss.item()})
        if rank == args.kill_rank and step == args.kill_step:
            run.flush()
            with open(os.path.join(args.logdir, "victim.pid.tmp"), "w") as f:
                f.write(str(os.getpid()))
            os.replace(os.path.join(args.logdir, "victim.pid.tmp"), os.path.join(args.logdir, "victim.pid"))
            time.sleep(120)  # the test kills this process; the others wait in the next all-reduce
    run.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
