"""The whole shape of a run, on training scripts written as the public ones are (issue 27):
several watched models (a GAN: two models, two optimizers), an optimizer stepped with a
closure (LBFGS), an optimizer a library makes inside its own Trainer, a whole model saved
mid-training and loaded where trainscope is not installed, and the facts recorded once
(parameter dtypes and devices, optimizer groups, parameters no optimizer holds, train/eval
mode, the functional ops of the forward)."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from torch import nn  # noqa: E402

ITERATIONS = 40


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, 24), nn.LeakyReLU(0.2), nn.Linear(24, 1))

    def forward(self, x):
        return self.main(x)


def train_gan(run, names=True, forget_d_zero_grad=False, iterations=ITERATIONS):
    """The DCGAN loop: D on real and detached fake, optD.step(); then G through D, optG.step()."""
    torch.manual_seed(0)
    G, D = Generator(), Discriminator()
    optG = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optD = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    if names:
        run.watch(G, optG, name="G")
        run.watch(D, optD, name="D")
    else:
        run.watch(G, optG)
        run.watch(D, optD)
    bce = nn.BCEWithLogitsLoss()
    g = torch.Generator().manual_seed(1)
    ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)
    losses = []
    for _ in range(iterations):
        real = torch.randn(32, 2, generator=g) * 0.5 + 2.0
        z = torch.randn(32, 4, generator=g)
        if not forget_d_zero_grad:
            D.zero_grad()
        loss_real = bce(D(real), ones)
        loss_real.backward()
        fake = G(z)
        loss_fake = bce(D(fake.detach()), zeros)
        loss_fake.backward()
        optD.step()
        G.zero_grad()
        loss_g = bce(D(fake), ones)
        loss_g.backward()
        optG.step()
        loss_d = loss_real + loss_fake
        run.log({"train/loss_d": loss_d, "train/loss_g": loss_g})
        losses.append((float(loss_d), float(loss_g)))
    run.finish()
    return losses


def steps_of(view, tag):
    return [int(s) for s in view.scalars(tag)["step"]]


def values_of(view, tag):
    return [float(v) for v in view.scalars(tag)["value"]]


@pytest.mark.parametrize("names", [True, False], ids=["named", "unnamed"])
def test_a_gan_makes_one_step_per_iteration_and_a_series_per_model(tmp_path, names):
    run = ts.init(tmp_path, "gan", doctor=False)
    losses = train_gan(run, names=names)
    view = ts.open_run(tmp_path / "gan")
    g_ns, d_ns = ("G/", "D/") if names else ("", "Discriminator/")
    every = list(range(ITERATIONS))
    # The user's losses land on the iteration's step; the step count is the iteration count.
    assert steps_of(view, "train/loss_d") == every
    assert values_of(view, "train/loss_g") == pytest.approx([g for _, g in losses], rel=1e-6)
    assert steps_of(view, "time/step") == every
    tags = {s["tag"] for s in view.series()}
    # Each model's gradients in its own series, one point per iteration, of its own shapes.
    for ns, numels in ((g_ns, {"main.0.weight": 16 * 4, "main.2.weight": 2 * 16}),
                       (d_ns, {"main.0.weight": 24 * 2, "main.2.weight": 1 * 24})):
        for param, numel in numels.items():
            stats = view.tensor_stats(f"grad/{ns}{param}")
            assert [s["step"] for s in stats] == every, (ns, param)
            assert {s["numel"] for s in stats} == {numel}, (ns, param)
        assert steps_of(view, f"grad/{ns}global_norm") == every
        assert values_of(view, f"train/{ns}grad_zeroed") == [1.0] * ITERATIONS
        assert values_of(view, f"opt/{ns}lr") == [2e-3] * ITERATIONS
        assert f"weight/{ns}main.0.weight" in tags and f"act/{ns}main.0" in tags
    # No series mixes the two: the other namespace's params are not under the bare family.
    if names:
        assert not any(t.startswith("grad/main.") for t in tags)
    # The process's series are written once per step.
    assert steps_of(view, "time/watch") == every
    assert steps_of(view, "mem/rss") == every
    models = json.loads(view.meta["extra"]["models"])
    assert [m["name"] for m in models] == (["G", "D"] if names else ["", "Discriminator"])
    assert [m["class"] for m in models] == ["Generator", "Discriminator"]
    assert [m["optimizer"] for m in models] == ["Adam", "Adam"]
    assert [m["tensors"] for m in models] == [4, 4]
    assert [m["params"] for m in models] == [4 * 16 + 16 + 16 * 2 + 2, 2 * 24 + 24 + 24 + 1]
    shapes = json.loads(view.meta["extra"]["param_shapes"])
    assert shapes[g_ns + "main.0.weight"] == [16, 4] and shapes[d_ns + "main.0.weight"] == [24, 2]
    types = json.loads(view.meta["extra"]["module_types"])
    assert types[d_ns + "main.1"] == "LeakyReLU" and types[g_ns + "main.1"] == "ReLU"


def test_a_forgotten_zero_grad_of_one_model_is_seen_on_that_model_only(tmp_path):
    run = ts.init(tmp_path, "gan", doctor=False)
    train_gan(run, forget_d_zero_grad=True)
    view = ts.open_run(tmp_path / "gan")
    # Step 0 has nothing to accumulate into; from then on D's gradients pile up.
    assert values_of(view, "train/D/grad_zeroed") == [1.0] + [0.0] * (ITERATIONS - 1)
    assert values_of(view, "train/G/grad_zeroed") == [1.0] * ITERATIONS


def test_a_model_name_is_a_path_segment_and_unique(tmp_path):
    run = ts.init(tmp_path, "names", doctor=False)
    run.watch(Generator(), name="G")
    for bad in ("G", "a/b", "", " G"):
        with pytest.raises(ValueError, match="name="):
            run.watch(Discriminator(), name=bad)
    run.finish()


def test_wgan_critic_steps_make_one_step_per_generator_step(tmp_path):
    """n_critic=3 critic steps, then one generator step: one training step per generator step
    once the generator has stepped (docs/watch.md "Several models": the first end waits for
    the generator's first step only until the critic steps again)."""
    torch.manual_seed(0)
    G, D = Generator(), Discriminator()
    optG = torch.optim.RMSprop(G.parameters(), lr=5e-4)
    optD = torch.optim.RMSprop(D.parameters(), lr=5e-4)
    run = ts.init(tmp_path, "wgan", doctor=False)
    run.watch(G, optG, name="G")
    run.watch(D, optD, name="D")
    g = torch.Generator().manual_seed(1)
    for i in range(12):
        for _ in range(3):
            optD.zero_grad()
            loss_d = D(G(torch.randn(16, 4, generator=g)).detach()).mean() - D(torch.randn(16, 2, generator=g)).mean()
            loss_d.backward()
            optD.step()
        optG.zero_grad()
        loss_g = -D(G(torch.randn(16, 4, generator=g))).mean()
        loss_g.backward()
        optG.step()
        run.log({"train/loss_g": loss_g})
    run.finish()
    view = ts.open_run(tmp_path / "wgan")
    g_steps = steps_of(view, "opt/G/lr")
    # The first iteration: each critic step is a step (0, 1, 2: the generator has not stepped
    # yet); from the generator's first step on, one step per generator step.
    assert g_steps == list(range(3, 15))
    assert steps_of(view, "train/loss_g") == g_steps
    # One lr a step, however many critic steps; step 3 is the generator's first step alone.
    assert steps_of(view, "opt/D/lr") == [0, 1, 2] + list(range(4, 15))


def test_an_optimizer_that_stops_stepping_does_not_stop_the_steps(tmp_path):
    """D frozen halfway (optD no longer steps): from the generator's second step alone on,
    each generator step ends a step again; the user's losses stay one a step."""
    torch.manual_seed(0)
    G, D = Generator(), Discriminator()
    optG = torch.optim.Adam(G.parameters(), lr=1e-3)
    optD = torch.optim.Adam(D.parameters(), lr=1e-3)
    run = ts.init(tmp_path, "frozen", doctor=False)
    run.watch(G, optG, name="G")
    run.watch(D, optD, name="D")
    g = torch.Generator().manual_seed(1)
    for i in range(ITERATIONS):
        if i < 20:
            optD.zero_grad()
            (D(torch.randn(16, 2, generator=g)).mean() - D(G(torch.randn(16, 4, generator=g)).detach()).mean()).backward()
            optD.step()
        optG.zero_grad()
        loss_g = -D(G(torch.randn(16, 4, generator=g))).mean()
        loss_g.backward()
        optG.step()
        run.log({"train/loss_g": loss_g})
    run.finish()
    view = ts.open_run(tmp_path / "frozen")
    every = list(range(ITERATIONS))
    assert steps_of(view, "train/loss_g") == every
    assert [s["step"] for s in view.tensor_stats("grad/G/main.0.weight")] == every
    assert steps_of(view, "opt/D/lr") == list(range(20))
    assert steps_of(view, "time/step") == every


def test_layers_trained_one_after_the_other_by_direct_forward_calls_make_a_step_per_update(tmp_path):
    """pytorch/examples' forward-forward shape: each layer has its own optimizer and is
    trained to the end before the next; the loop calls layer.forward() itself, so no
    forward hook begins a step. Each optimizer step is one step (was: 300 updates recorded
    as 3 steps, 151 points at step 1)."""
    torch.manual_seed(0)
    layers = [nn.Linear(8, 8), nn.Linear(8, 8)]
    run = ts.init(tmp_path, "layerwise", doctor=False)
    for i, layer in enumerate(layers):
        layer.opt = torch.optim.Adam(layer.parameters(), lr=1e-2)
        run.watch(layer, layer.opt, name=f"layer{i}")
    x = torch.randn(32, 8)
    for layer in layers:
        for _ in range(30):
            loss = layer.forward(x).pow(2).mean()
            layer.opt.zero_grad()
            loss.backward()
            layer.opt.step()
            run.log({"train/loss": loss.item()})
        x = layer.forward(x).detach()
    run.finish()
    view = ts.open_run(tmp_path / "layerwise")
    assert steps_of(view, "train/loss") == list(range(60))
    assert [s["step"] for s in view.tensor_stats("grad/layer0/weight")] == list(range(30))
    assert [s["step"] for s in view.tensor_stats("grad/layer1/weight")] == list(range(30, 60))


def test_a_layer_watched_when_its_training_starts_makes_a_step_per_update(tmp_path):
    """The forward-forward shape again, with each layer watched only when its training
    starts (after the one before has stopped stepping for good): the new optimizer's
    updates are steps of their own (was: all of them recorded at one step, and the doctor's
    DUPLICATE_STEPS blamed the script)."""
    torch.manual_seed(0)
    layers = [nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)]
    run = ts.init(tmp_path, "layerwise_late", doctor=False)
    x = torch.randn(32, 8)
    for i, layer in enumerate(layers):
        layer.opt = torch.optim.Adam(layer.parameters(), lr=1e-2)
        run.watch(layer, layer.opt, name=f"layer{i}")
        for _ in range(20):
            loss = layer.forward(x).pow(2).mean()
            layer.opt.zero_grad()
            loss.backward()
            layer.opt.step()
            run.log({"train/loss": loss.item()})
        x = layer.forward(x).detach()
    run.finish()
    view = ts.open_run(tmp_path / "layerwise_late")
    assert steps_of(view, "train/loss") == list(range(60))
    for i in range(3):
        assert [s["step"] for s in view.tensor_stats(f"grad/layer{i}/weight")] == list(range(20 * i, 20 * i + 20))
    assert steps_of(view, "time/step") == list(range(60))


def test_a_loop_that_calls_forward_itself_still_counts_its_steps(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "direct", doctor=False)
    run.watch(model, opt)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(25):
        loss = (model.forward(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss.item()})
    run.finish()
    view = ts.open_run(tmp_path / "direct")
    assert steps_of(view, "train/loss") == list(range(25))
    assert steps_of(view, "grad/global_norm") == list(range(25))


# ---- optimizer.step(closure): LBFGS ----

def with_step_hooks(optimizer):
    """The optimizer with torch 2.x's step hooks, as torch calls them (the step's arguments
    with the optimizer first), on either torch: watch() then takes the hook path."""
    from collections import OrderedDict
    from torch.utils.hooks import RemovableHandle
    pre, post = OrderedDict(), OrderedDict()
    step = type(optimizer).step

    def register(hooks):
        def add(hook):
            handle = RemovableHandle(hooks)
            hooks[handle.id] = hook
            return handle
        return add

    def hooked_step(closure=None):
        args = (optimizer, closure)
        for hook in list(pre.values()):
            hook(optimizer, args, {})
        result = step(optimizer, closure)
        for hook in list(post.values()):
            hook(optimizer, args, {})
        return result

    optimizer.register_step_pre_hook = register(pre)
    optimizer.register_step_post_hook = register(post)
    optimizer.step = hooked_step
    optimizer.hooks = (pre, post)
    return optimizer


def lbfgs_fit(run, zero_grad=True, steps=15, step_hooks=False):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 3, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2]).sin()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=5)
    if step_hooks:
        with_step_hooks(optimizer)
    run.watch(model, optimizer)
    if step_hooks:
        assert all(len(hooks) == 1 for hooks in optimizer.hooks)  # the hook path, not the wrapper
    norms = []  # the global norm of the gradients of the last closure call of each step
    calls = []

    def closure():
        if zero_grad:
            optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        calls[-1] += 1
        norms[-1] = float(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in model.parameters())))
        return loss

    for _ in range(steps):
        calls.append(0)
        norms.append(None)
        loss = optimizer.step(closure)
        run.log({"train/loss": loss})
    run.finish()
    return norms, calls


@pytest.mark.parametrize("step_hooks", [False, True], ids=["wrapper", "step_hooks"])
def test_lbfgs_records_the_gradients_its_closure_made_and_sees_zero_grad_inside_it(tmp_path, step_hooks):
    run = ts.init(tmp_path, "lbfgs", doctor=False)
    norms, calls = lbfgs_fit(run, step_hooks=step_hooks)
    assert max(calls) > 1  # the line search re-evaluated: the last evaluation is the step's
    view = ts.open_run(tmp_path / "lbfgs")
    every = list(range(15))
    assert steps_of(view, "train/grad_zeroed") == every
    assert values_of(view, "train/grad_zeroed") == [1.0] * 15
    assert steps_of(view, "grad/global_norm") == every
    assert values_of(view, "grad/global_norm") == pytest.approx(norms, rel=1e-5)
    assert steps_of(view, "train/loss") == every
    assert steps_of(view, "opt/lr") == every


def test_lbfgs_whose_closure_forgets_zero_grad_is_seen(tmp_path):
    run = ts.init(tmp_path, "lbfgs", doctor=False)
    lbfgs_fit(run, zero_grad=False, steps=6)
    values = values_of(ts.open_run(tmp_path / "lbfgs"), "train/grad_zeroed")
    assert values == [1.0] + [0.0] * 5


@pytest.mark.parametrize("where", ["before_forward", "after_step", "set_to_none", "accumulation"])
def test_grad_zeroed_is_one_wherever_a_healthy_loop_zeroes(tmp_path, where):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    run = ts.init(tmp_path, "z", doctor=False)
    run.watch(model, optimizer)
    g = torch.Generator().manual_seed(3)
    for _ in range(6):
        if where in ("before_forward", "accumulation"):
            optimizer.zero_grad()
        elif where == "set_to_none":
            optimizer.zero_grad(set_to_none=True)
        for _ in range(2 if where == "accumulation" else 1):
            model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
        if where == "after_step":
            optimizer.zero_grad()
    run.finish()
    assert values_of(ts.open_run(tmp_path / "z"), "train/grad_zeroed") == [1.0] * 6


# ---- an optimizer made inside a library's trainer ----

class LibraryTrainer:
    """As minGPT's Trainer: the optimizer is made inside run(), out of the script's reach."""

    def __init__(self, model, iterations):
        self.model, self.iterations = model, iterations

    def run(self):
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1)
        g = torch.Generator().manual_seed(4)
        for _ in range(self.iterations):
            x = torch.randn(16, 6, generator=g)
            loss = self.model(x).pow(2).mean()
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return optimizer


def test_an_optimizer_made_inside_a_library_is_adopted(tmp_path):
    torch.manual_seed(0)
    torch_init = vars(torch.optim.Optimizer)["__init__"]
    model = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 3))
    unrelated = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)  # noqa: F841  (made before: not ours)
    run = ts.init(tmp_path, "lib", doctor=False)
    run.watch(model)
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)  # another model's: not adopted
    optimizer = LibraryTrainer(model, 12).run()
    run.finish()
    assert optimizer.step is not None and other is not None
    view = ts.open_run(tmp_path / "lib")
    every = list(range(12))
    assert steps_of(view, "opt/lr") == every
    assert values_of(view, "opt/lr") == [3e-4] * 12
    assert steps_of(view, "grad/global_norm") == every
    assert values_of(view, "train/grad_zeroed") == [1.0] * 12
    assert steps_of(view, "time/optimizer") == every
    models = json.loads(view.meta["extra"]["models"])
    assert models[0]["optimizer"] == "AdamW"
    assert json.loads(view.meta["extra"]["unoptimized_params"]) == []
    # Nothing waits any more: torch.optim.Optimizer.__init__ is torch's own again.
    assert vars(torch.optim.Optimizer)["__init__"] is torch_init


# ---- a whole model saved while watched, loaded without trainscope ----

def test_a_model_saved_while_watched_loads_where_trainscope_cannot_be_imported(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "save", doctor=False)
    run.watch(model, optimizer, activations_every=1)  # every module hook attached, all the time
    g = torch.Generator().manual_seed(5)
    for i in range(6):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
        if i == 2:
            torch.save(model, tmp_path / "model.pt")
    run.finish()
    script = ("import sys\n"
              "sys.modules['trainscope'] = None\n"
              "import torch\n"
              "try:\n"
              "    model = torch.load(sys.argv[1], weights_only=False)\n"
              "except TypeError:\n"
              "    model = torch.load(sys.argv[1])\n"
              "out = model(torch.ones(3, 4))\n"
              "out.sum().backward()\n"
              "model.zero_grad()\n"
              "print(tuple(out.shape))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model.pt")],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(3, 2)"


# ---- the facts recorded once ----

def test_param_facts_groups_and_unoptimized_params_are_in_the_meta(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)  # the head is left out
    run = ts.init(tmp_path, "facts", doctor=False)
    run.watch(model, optimizer)
    g = torch.Generator().manual_seed(6)
    unoptimized_after = []
    for i in range(60):
        if i == 5:
            optimizer.add_param_group({"params": model[2].parameters(), "lr": 0.01})
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
        if i == 2:
            run.flush()
            unoptimized_after.append(json.loads(ts.open_run(tmp_path / "facts").meta["extra"]["unoptimized_params"]))
    run.finish()
    meta = ts.open_run(tmp_path / "facts").meta["extra"]
    assert unoptimized_after == [["2.weight", "2.bias"]]
    assert json.loads(meta["unoptimized_params"]) == []  # the group added at step 5 holds them
    assert json.loads(meta["param_dtypes"]) == {n: "float32" for n in ("0.weight", "0.bias", "2.weight", "2.bias")}
    assert json.loads(meta["param_devices"]) == {n: "cpu" for n in ("0.weight", "0.bias", "2.weight", "2.bias")}
    groups = json.loads(meta["param_groups"])
    assert [(g["group"], g["params"], g["lr"]) for g in groups] == [(0, ["0.weight", "0.bias"], 0.1),
                                                                   (1, ["2.weight", "2.bias"], 0.01)]
    assert values_of(ts.open_run(tmp_path / "facts"), "opt/lr/1")[-1] == 0.01


def test_train_eval_mode_is_recorded_when_the_training_forwards_mode_changes(tmp_path):
    """The mode of each step's first forward with gradients, logged when it changes: an
    evaluation inside the iteration (under no_grad, or a second forward of the step, as
    gcn's example evaluates every epoch) is not the training's mode; a model left in eval
    mode from step 5 on is."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "mode", doctor=False)
    run.watch(model, optimizer)
    g = torch.Generator().manual_seed(7)
    for i in range(8):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(8, 4, generator=g))
        model(torch.randn(8, 4, generator=g))  # an evaluation that forgot no_grad
        if i < 4:
            model.train()
    run.finish()
    view = ts.open_run(tmp_path / "mode")
    assert list(zip(steps_of(view, "train/mode_training"), values_of(view, "train/mode_training"))) == \
        [(0, 1.0), (5, 0.0)]


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = torch.sigmoid(self.fc(x))
        p = nn.functional.softmax(h, dim=-1)
        out = p.log() + torch.exp(-h).sqrt()
        if self.late:
            out = torch.tanh(out)  # from step 1 on: the ops are not looked at any more
        return out


def test_functional_ops_of_the_first_forward_are_recorded_and_then_not_looked_at(tmp_path):
    torch.manual_seed(0)
    model = Functional()
    model.late = False
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "ops", doctor=False)
    watcher = run.watch(model, optimizer)
    g = torch.Generator().manual_seed(8)
    for i in range(4):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
        model.late = True
        assert watcher._ops is None  # the function mode is left once the first forward is over
    run.finish()
    ops = json.loads(ts.open_run(tmp_path / "ops").meta["extra"]["functional_ops"])
    assert {"sigmoid", "softmax", "log", "exp", "sqrt", "linear"} <= set(ops)
    assert "tanh" not in ops and "pow" not in ops  # pow: the loss, outside the model's forward
    assert not any(name.startswith("_") for name in ops)


def test_a_second_watch_does_not_overwrite_the_first_models_meta(tmp_path):
    run = ts.init(tmp_path, "two", doctor=False)
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    teacher = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    ema = torch.optim.swa_utils.AveragedModel(student)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    run.watch(student, optimizer)
    run.watch(teacher, name="teacher")
    run.watch(ema.module, name="ema")
    g = torch.Generator().manual_seed(9)
    for _ in range(5):
        x = torch.randn(8, 4, generator=g)
        with torch.no_grad():
            target = teacher(x)
        optimizer.zero_grad()
        nn.functional.mse_loss(student(x), target).backward()
        optimizer.step()
        ema.update_parameters(student)
    run.finish()
    view = ts.open_run(tmp_path / "two")
    meta = view.meta["extra"]
    shapes = json.loads(meta["param_shapes"])
    assert shapes["0.weight"] == [8, 4] and shapes["teacher/0.weight"] == [32, 4] and shapes["ema/0.weight"] == [8, 4]
    assert json.loads(meta["watch"])["optimizer"] == "SGD"
    assert [m["name"] for m in json.loads(meta["models"])] == ["", "teacher", "ema"]
    assert sorted(json.loads(meta["unoptimized_params"])) == sorted(
        [f"{m}/{p}" for m in ("teacher", "ema") for p in ("0.weight", "0.bias", "2.weight", "2.bias")])
    assert steps_of(view, "train/grad_zeroed") == list(range(5))
    # The EMA copy is updated by hand after each step: its weights and updates are read at
    # the step's end, from the second step on (an update needs the weights of the step before).
    assert [s["step"] for s in view.tensor_stats("update/ema/0.weight")] == [1, 2, 3, 4]
