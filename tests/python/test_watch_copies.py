"""A watched model behaves like an unwatched one when it is saved, copied, moved or wrapped
(issue 15: torch.save(model) after an epoch raised "Can't pickle local object" and the run
was stored as crashed; a deep copy's zero_grad() zeroed the original's gradients)."""

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    optimizer.zero_grad()
    loss = model(torch.randn(5, 4, generator=g)).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss


def load(buffer):
    buffer.seek(0)
    try:
        return torch.load(buffer, weights_only=False)  # torch >= 2.6 loads weights only by default
    except TypeError:  # torch 1.13: no weights_only
        return torch.load(buffer)


def points(run_dir):
    view = ts.open_run(run_dir)
    return {s["tag"]: s["points"] for s in view.series()}


@pytest.fixture
def watched(tmp_path):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "w")
    run.watch(model, optimizer, activations_every=1, weights_every=1)  # every hook attached
    for i in range(3):
        step(model, optimizer, i)
    yield run, model, optimizer
    if not run._finished:
        run.finish()


COPIES = {
    "torch.save": lambda m: (lambda b: (torch.save(m, b), load(b))[1])(io.BytesIO()),
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_copy_of_a_watched_model_trains_unwatched_and_leaves_the_original_alone(watched, tmp_path, how):
    run, model, optimizer = watched
    twin = COPIES[how](model)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
    run.flush()
    before = points(tmp_path / "w")
    # The copy trains with an optimizer of its own: nothing of it reaches the run, and the
    # original's gradients and weights stay as they were.
    model[0].weight.grad = torch.full_like(model[0].weight, 3.0)
    weights = model[0].weight.detach().clone()
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    for i in range(3):
        step(twin, twin_optimizer, 10 + i)
    twin.zero_grad()
    assert torch.equal(model[0].weight.grad, torch.full_like(model[0].weight, 3.0))
    assert torch.equal(model[0].weight, weights)
    run.flush()
    assert points(tmp_path / "w") == before
    # The original is still watched: its next step is recorded.
    step(model, optimizer, 20)
    run.finish()
    after = points(tmp_path / "w")
    assert after["grad/0.weight"] == before["grad/0.weight"] + 1
    assert after["act/0"] == before["act/0"] + 1


def test_saving_the_model_every_epoch_completes_and_the_run_finishes(tmp_path):
    # The word language model's pattern: torch.save(model, path) after each epoch.
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "epochs")
    run.watch(model, optimizer)
    for epoch in range(3):
        for i in range(4):
            step(model, optimizer, 4 * epoch + i)
        torch.save(model, tmp_path / f"model-{epoch}.pt")
        torch.save(model.state_dict(), tmp_path / f"state-{epoch}.pt")
    run.finish()
    assert ts.open_run(tmp_path / "epochs").meta["status"] == "finished"
    restored = mlp()
    restored.load_state_dict(torch.load(tmp_path / "state-2.pt"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))


def test_state_dict_round_trip_eval_and_to_keep_the_model_watched(watched, tmp_path):
    run, model, optimizer = watched
    state = copy.deepcopy(model.state_dict())
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        model(torch.randn(2, 4))  # an evaluation forward: not a training step
    model.train()
    model.to(torch.float64).to(torch.float32)  # parameters stay the same objects
    step(model, optimizer, 30)
    run.finish()
    stats = ts.open_run(tmp_path / "w").tensor_stats("grad/0.weight")
    assert [s["step"] for s in stats] == [0, 1, 2, 3]
    assert stats[-1]["l2_norm"] > 0


def test_a_model_wrapped_in_ddp_after_watch_is_still_recorded(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        run = ts.init(tmp_path, "ddp")
        run.watch(model, optimizer)
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        grads = []
        for i in range(3):
            g = torch.Generator().manual_seed(i)
            optimizer.zero_grad()
            wrapped(torch.randn(5, 4, generator=g)).pow(2).mean().backward()
            grads.append(float(model[0].weight.grad.double().norm()))
            optimizer.step()
        run.finish()
    finally:
        dist.destroy_process_group()
    stats = ts.open_run(run.dir).tensor_stats("grad/0.weight")  # <logdir>/ddp/rank-0 under torch.distributed
    assert [s["l2_norm"] for s in stats] == pytest.approx(grads, rel=1e-6)
