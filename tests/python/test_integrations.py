"""The transformers and Lightning integrations, on real (tiny) trainings.

Each test trains a model built from a config (no downloaded weights, no network): a 2-layer
GPT-2 on integer sequences with a learnable pattern under transformers' Trainer, and an MLP
under Lightning. The recorded series must be what the framework logged, at its steps; a
healthy run must get no warning; a learning rate 1000x too high must get the findings a
hand-written loop with the same model, data, optimizer and fault gets. Skipped where
transformers (with accelerate) or Lightning is not installed.
"""

import json
import os

import pytest

from conftest import run_cli

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub

HEALTHY_LR = 0.5      # SGD: both models learn at this rate (checked by the healthy tests)
FAULTY_LR = HEALTHY_LR * 1000


@pytest.fixture
def torch_one_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the 2-core VM runs other tests beside these
    yield torch
    torch.set_num_threads(before)


def diagnosis(run_dir):
    return json.loads(run_cli("diagnose", run_dir, "--json", check=True).stdout)


def lr_findings(report):
    """Codes of the warnings and criticals that name a too-high learning rate as a cause."""
    return {f["code"] for f in report["findings"]
            if f["severity"] in ("warning", "critical") and any(c["id"] == "lr_too_high" for c in f["causes"])}


def alarms(report):
    return [(f["code"], f["severity"], f["step"], f["location"]) for f in report["findings"]
            if f["severity"] in ("warning", "critical")]


def series(run_dir, tag):
    import trainscope as ts
    points = ts.open_run(run_dir).scalars(tag)
    return points["step"].tolist(), points["value"].tolist()


def lr_tag(run_dir):
    """opt/lr, or opt/lr/0 when the optimizer has several parameter groups (the Trainer's has two)."""
    import trainscope as ts
    tags = {s["tag"] for s in ts.open_run(run_dir).series()}
    return "opt/lr" if "opt/lr" in tags else "opt/lr/0"


# ---- transformers ----

VOCAB, LENGTH = 64, 32


def sequences(torch, count, seed):
    """Arithmetic progressions mod VOCAB: the next token follows from the last two."""
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (count, 1), generator=generator)
    stride = torch.randint(1, 4, (count, 1), generator=generator)
    return (start + stride * torch.arange(LENGTH)) % VOCAB


def tiny_gpt2(torch):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64))


def token_dataset(torch, count, seed):
    rows = sequences(torch, count, seed)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            return {"input_ids": rows[i], "labels": rows[i]}
    return Tokens()


def train_with_trainer(torch, tmp_path, lr, steps, logging_steps, eval_steps=None, **callback_options):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it
    from trainscope.integrations.huggingface import TrainscopeCallback
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=steps, per_device_train_batch_size=16, learning_rate=lr,
        optim="sgd", lr_scheduler_type="constant", max_grad_norm=1.0, logging_steps=logging_steps,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps, per_device_eval_batch_size=64,
        report_to="none", use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True)
    callback = TrainscopeCallback(**callback_options)
    trainer = transformers.Trainer(model=tiny_gpt2(torch), args=args, train_dataset=token_dataset(torch, 2000, 1),
                                   eval_dataset=token_dataset(torch, 128, 2) if eval_steps else None,
                                   callbacks=[callback])
    trainer.train()
    return trainer, callback


def train_gpt2_by_hand(torch, logdir, lr, steps):
    """The Trainer's recipe written out: SGD, constant lr, gradients clipped at 1, batch 16."""
    import trainscope as ts
    model = tiny_gpt2(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(token_dataset(torch, 2000, 1), batch_size=16, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    run = ts.init(logdir, "hand")
    run.watch(model, optimizer)
    batches = iter(loader)
    for _ in range(steps):
        batch = next(batches)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        run.log({"train/loss": loss})
    run.finish()
    return run.dir


def test_trainer_run_is_recorded_at_the_trainers_steps(torch_one_thread, tmp_path):
    torch = torch_one_thread
    trainer, callback = train_with_trainer(torch, tmp_path, HEALTHY_LR, steps=60, logging_steps=4, eval_steps=20)
    run_dir = callback.run.dir
    assert run_dir == str(tmp_path / "trainer" / "trainscope" / callback.run.name)  # default: <output_dir>/trainscope

    history = trainer.state.log_history
    train_logs = [h for h in history if "loss" in h]
    eval_logs = [h for h in history if "eval_loss" in h]
    assert [h["step"] for h in train_logs] == list(range(4, 61, 4)) and [h["step"] for h in eval_logs] == [20, 40, 60]

    steps, losses = series(run_dir, "train/loss")
    assert steps == [h["step"] for h in train_logs]
    assert losses == pytest.approx([h["loss"] for h in train_logs], rel=1e-12)
    assert losses[-1] < 0.8 * losses[0]  # it learns
    steps, values = series(run_dir, "val/loss")
    assert (steps, values) == ([h["step"] for h in eval_logs], pytest.approx([h["eval_loss"] for h in eval_logs], rel=1e-12))
    steps, epochs = series(run_dir, "train/epoch")  # one point per step, though eval logs carry it too
    assert (steps, epochs) == ([h["step"] for h in train_logs], pytest.approx([h["epoch"] for h in train_logs]))
    steps, norms = series(run_dir, "train/grad_norm")
    assert (steps, norms) == ([h["step"] for h in train_logs], pytest.approx([h["grad_norm"] for h in train_logs], rel=1e-12))

    # run.watch() counts the Trainer's optimizer steps with the same numbers (1..max_steps):
    # at each logged step its lr is the Trainer's, and its global norm is the Trainer's
    # pre-clip norm after clipping at max_grad_norm (1.0).
    watch_steps, watch_norms = series(run_dir, "grad/global_norm")
    assert watch_steps == list(range(1, 61))
    by_step = dict(zip(watch_steps, watch_norms))
    assert [by_step[h["step"]] for h in train_logs] == pytest.approx([min(h["grad_norm"], 1.0) for h in train_logs], rel=1e-4)
    lr_steps, lrs = series(run_dir, lr_tag(run_dir))
    assert lr_steps == watch_steps
    assert [dict(zip(lr_steps, lrs))[h["step"]] for h in train_logs] == [h["learning_rate"] for h in train_logs]
    assert set(series(run_dir, "train/grad_zeroed")[1]) == {1.0}

    import trainscope as ts
    meta = ts.open_run(run_dir).meta
    config = json.loads(meta["config"]) if isinstance(meta["config"], str) else meta["config"]
    assert config["training_args"]["learning_rate"] == HEALTHY_LR and config["model_config"]["n_layer"] == 2
    assert meta["status"] == "finished"
    report = diagnosis(run_dir)
    assert report["steps"] == 60
    assert alarms(report) == []


def test_trainer_records_the_loss_and_labels_of_every_step_whatever_its_logging_cadence(torch_one_thread, tmp_path):
    """Issue 27: at the Trainer's default cadence the loss reached trainscope every 500 steps,
    and no label statistics at all: the loss and label checks saw nothing."""
    torch = torch_one_thread
    trainer, callback = train_with_trainer(torch, tmp_path, HEALTHY_LR, steps=60, logging_steps=50)
    run_dir = callback.run.dir
    steps, losses = series(run_dir, "train/step_loss")
    assert steps == list(range(1, 61))
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in logged] == [50]
    # The Trainer's logged loss is the mean of the steps since its last log.
    assert sum(losses[:50]) / 50 == pytest.approx(logged[0]["loss"], rel=1e-4)
    # The labels are the input ids (0..VOCAB-1): their range at every step input checks run.
    label_steps, label_min = series(run_dir, "input/label_min")
    _, label_max = series(run_dir, "input/label_max")
    assert label_steps[:10] == list(range(1, 11))
    assert min(label_min) >= 0 and max(label_max) <= VOCAB - 1 and max(label_max) >= VOCAB - 8
    report = diagnosis(run_dir)
    assert alarms(report) == []
    assert not any(n["check"] == "loss curve" for n in report.get("not_checked", [])), report["not_checked"]


def test_trainer_with_lr_1000x_gets_the_findings_of_a_hand_written_loop(torch_one_thread, tmp_path):
    torch = torch_one_thread
    hand = lr_findings(diagnosis(train_gpt2_by_hand(torch, tmp_path / "hand", FAULTY_LR, steps=100)))
    assert hand, "the hand-written loop's fault is not found: the scenario does not test the integration"
    _, callback = train_with_trainer(torch, tmp_path, FAULTY_LR, steps=100, logging_steps=1)
    trainer = lr_findings(diagnosis(callback.run.dir))
    # Not the same batches (the Trainer shuffles its own way), so not necessarily every code,
    # but the same diagnosis: a too-high learning rate, through at least one common finding.
    assert trainer & hand, f"Trainer run: {sorted(trainer)}, hand-written loop: {sorted(hand)}"


def test_trainer_callback_failure_is_reported_and_training_goes_on(torch_one_thread, tmp_path, capfd):
    torch = torch_one_thread
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    trainer, callback = train_with_trainer(torch, tmp_path, HEALTHY_LR, steps=5, logging_steps=1,
                                           logdir=str(not_a_directory))
    # The store cannot be made (its logdir is a file): the run records nothing and says so
    # once (docs/architecture.md, the write path); the training finishes.
    assert trainer.state.global_step == 5
    err = capfd.readouterr().err
    assert "cannot create the run store" in err and "training goes on unmonitored" in err, err[-2000:]


def test_trainer_log_keys_get_trainscope_tags():
    pytest.importorskip("transformers")
    from trainscope.integrations.huggingface import trainscope_tag
    assert [trainscope_tag(k) for k in ("loss", "learning_rate", "grad_norm", "epoch", "eval_loss", "eval_accuracy",
                                        "eval_runtime", "train_loss", "test_f1", "my_metric", "custom/x")] == [
        "train/loss", "opt/lr", "train/grad_norm", "train/epoch", "val/loss", "val/acc",
        "perf/eval_runtime", "train/mean_loss", "test/f1", "train/my_metric", "custom/x"]


# ---- Lightning ----

def lightning_module():
    try:
        import lightning.pytorch as pl
    except ImportError:
        pl = pytest.importorskip("pytorch_lightning")
    return pl


def blobs(torch, count, seed):
    """4 classes, linearly separable: the label is the argmax of a fixed projection."""
    x = torch.randn(count, 16, generator=torch.Generator().manual_seed(seed))
    projection = torch.randn(16, 4, generator=torch.Generator().manual_seed(99))
    return x, (x @ projection).argmax(1)


def mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def fit_with_lightning(torch, tmp_path, lr, steps, logdir=None, log_every_n_steps=1):
    pl = lightning_module()
    from trainscope.integrations.lightning import TrainscopeLogger, TrainscopeWatch

    class Classifier(pl.LightningModule):
        def __init__(self, lr):
            super().__init__()
            self.save_hyperparameters()
            self.net = mlp(torch)  # training_step calls self.net, not self(): the callback marks the steps
            self.logged = []       # (global_step, loss) as training_step saw them
            self.grad_norms = []   # the global gradient norm just before each optimizer step

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train/loss", loss)
            self.logged.append((self.global_step, loss.item()))
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val/loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def on_before_optimizer_step(self, optimizer):
            self.grad_norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.parameters()])).item())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    x, y = blobs(torch, 2048, 1)
    xv, yv = blobs(torch, 256, 2)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32, shuffle=True,
                                        generator=torch.Generator().manual_seed(0))
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xv, yv), batch_size=256)
    model = Classifier(lr)
    logger = TrainscopeLogger(logdir or str(tmp_path / "runs"), name="lightning")
    trainer = pl.Trainer(max_steps=steps, logger=logger, callbacks=[TrainscopeWatch()], accelerator="cpu",
                         log_every_n_steps=log_every_n_steps, val_check_interval=32, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(model, train, val)
    return trainer, model, logger


def train_mlp_by_hand(torch, logdir, lr, steps):
    import trainscope as ts
    model = mlp(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = blobs(torch, 2048, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    run = ts.init(logdir, "hand")
    run.watch(model, optimizer)
    for _, (xb, yb) in zip(range(steps), run.data(loader)):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        run.log({"train/loss": loss})
    run.finish()
    return run.dir


def test_lightning_run_is_recorded_at_lightnings_steps(torch_one_thread, tmp_path):
    torch = torch_one_thread
    trainer, model, logger = fit_with_lightning(torch, tmp_path, HEALTHY_LR, steps=128)
    run_dir = logger.experiment.dir
    assert run_dir == str(tmp_path / "runs" / "lightning") and trainer.global_step == 128

    steps, losses = series(run_dir, "train/loss")
    assert steps == [s for s, _ in model.logged] == list(range(128))
    assert losses == pytest.approx([v for _, v in model.logged], rel=1e-6)  # float32 loss, logged as float
    assert losses[-1] < 0.5 * losses[0]
    assert series(run_dir, "val/loss")[0] == [31, 63, 95, 127]  # after batches 32, 64, ...: Lightning's step
    assert series(run_dir, "train/epoch")[0] == list(range(128))

    # run.watch() saw each step's own gradients, though Lightning computes them inside
    # optimizer.step(closure): the closure is run first (else they would lag one step and
    # gradients would look never zeroed).
    steps, norms = series(run_dir, "grad/global_norm")
    assert steps == list(range(128))
    assert norms == pytest.approx(model.grad_norms, rel=1e-4)
    assert set(series(run_dir, "train/grad_zeroed")[1]) == {1.0}
    assert series(run_dir, "opt/lr")[1] == [HEALTHY_LR] * 128

    import trainscope as ts
    meta = ts.open_run(run_dir).meta
    config = json.loads(meta["config"]) if isinstance(meta["config"], str) else meta["config"]
    assert config == {"lr": HEALTHY_LR} and meta["status"] == "finished"
    report = diagnosis(run_dir)
    assert report["steps"] == 127
    assert alarms(report) == []


def test_lightning_records_the_loss_and_labels_of_every_step_whatever_its_logging_cadence(torch_one_thread, tmp_path):
    """Issue 27: at Lightning's default cadence (50 steps) the loss checks saw a handful of points."""
    torch = torch_one_thread
    trainer, model, logger = fit_with_lightning(torch, tmp_path, HEALTHY_LR, steps=128, log_every_n_steps=50)
    run_dir = logger.experiment.dir
    assert series(run_dir, "train/loss")[0] == [49, 99]  # what the module logged reaches the run at Lightning's cadence
    steps, losses = series(run_dir, "train/step_loss")
    assert steps == [s for s, _ in model.logged] == list(range(128))
    assert losses == pytest.approx([v for _, v in model.logged], rel=1e-6)
    _, label_min = series(run_dir, "input/label_min")
    _, label_max = series(run_dir, "input/label_max")
    assert min(label_min) == 0 and max(label_max) == 3  # the 4 classes
    assert alarms(diagnosis(run_dir)) == []


def test_lightning_with_lr_1000x_gets_the_findings_of_a_hand_written_loop(torch_one_thread, tmp_path):
    torch = torch_one_thread
    hand = lr_findings(diagnosis(train_mlp_by_hand(torch, tmp_path / "hand", FAULTY_LR, steps=128)))
    assert hand, "the hand-written loop's fault is not found: the scenario does not test the integration"
    _, _, logger = fit_with_lightning(torch, tmp_path, FAULTY_LR, steps=128)
    lightning = lr_findings(diagnosis(logger.experiment.dir))
    assert lightning & hand, f"Lightning run: {sorted(lightning)}, hand-written loop: {sorted(hand)}"


def test_lightning_logger_failure_is_reported_and_training_goes_on(torch_one_thread, tmp_path, capfd):
    torch = torch_one_thread
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    trainer, model, logger = fit_with_lightning(torch, tmp_path, HEALTHY_LR, steps=8, logdir=str(not_a_directory))
    assert trainer.global_step == 8
    err = capfd.readouterr().err
    assert "cannot create the run store" in err and "training goes on unmonitored" in err, err[-2000:]
