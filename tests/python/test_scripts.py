"""Training scripts written the way people write them (tests/python/scripts/: nanoGPT-style,
PyTorch-examples MNIST and word language model), run healthy and with the bugs people make
(--fault), recorded with ts.init + run.watch, then diagnosed. The table is
tests/python/scripts/faults.py: every fault found with the right code, at the step the
script says it became real (within the documented delay) and with the right first cause;
no warning on the healthy runs; no advice to clip to scripts that clip; the scripts that
save the whole watched model with torch.save complete, and the file loads.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import PYTHON, child_env

SCRIPTS = pathlib.Path(__file__).resolve().parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
from faults import RUNS, run_name, script_args  # noqa: E402

import trainscope as ts  # noqa: E402

CLIPPING_SCRIPTS = {"char_gpt", "word_lm"}  # clip_grad_norm_ before every update


def run_script(row, logdir):
    proc = subprocess.run([PYTHON, str(SCRIPTS / f"{row['script']}.py"), "--logdir", str(logdir), *script_args(row)],
                          env=child_env(), capture_output=True, text=True, timeout=300)
    run_dir = logdir / run_name(row)
    if row.get("crashes"):
        assert proc.returncode != 0, f"{run_name(row)} was expected to raise"
        return run_dir, {"step": 0}, proc.stderr
    assert proc.returncode == 0, f"{run_name(row)} failed:\n{proc.stderr[-3000:]}"
    truth = json.loads((run_dir / "truth.json").read_text())
    return run_dir, truth, proc.stderr


def describe(findings):
    return "\n".join(f"  {f['severity']} {f['code']}@{f['step']} (detected {f['evidence'].get('detected_at')}) "
                     f"{f['location']} {[c['id'] for c in f['causes']]}" for f in findings)


# The held-out quarter is scored by `make bench-doctor` only: a test that fails is a reason to tune.
@pytest.mark.parametrize("row", [r for r in RUNS if not r.get("held_out")], ids=run_name)
def test_script_run_is_diagnosed_right(row, tmp_path):
    run_dir, truth, stderr = run_script(row, tmp_path)
    assert ts.open_run(run_dir).meta["status"] == ("crashed" if row.get("crashes") else "finished")
    findings = ts.diagnose(run_dir)["findings"]
    listing = describe(findings)
    alarms = [f for f in findings if f["severity"] in ("warning", "critical")]
    # Advice to clip is never given to a script that clips (char_gpt at 1.0, word_lm at 0.25).
    if row["script"] in CLIPPING_SCRIPTS:
        for f in findings:
            assert not any("clip" in a.lower() for a in f["actions"]), f"clipping advised in {f['code']}:\n{listing}"
    if not row["expected"]:
        assert alarms == [], f"healthy {run_name(row)} got warnings:\n{listing}"
        return
    match = [f for f in findings if f["code"] in row["expected"]]
    assert match, f"{run_name(row)}: none of {row['expected']} found:\n{listing}"
    found = match[0]
    if row["expected"][0] == "ARCHITECTURE_WARNING":
        assert len(match) == 1, f"one grouped finding expected:\n{listing}"
    step = truth["step"]
    detected = found["evidence"].get("detected_at", found["step"])
    assert step <= detected <= step + (row["max_delay"] if row["max_delay"] is not None else 1 << 30), \
        f"{run_name(row)}: detected at {detected}, fault real at {step} (max delay {row['max_delay']}):\n{listing}"
    if row.get("causes"):
        assert found["causes"] and found["causes"][0]["id"] in row["causes"], \
            f"{run_name(row)}: first cause {found['causes'][:2]}, expected one of {row['causes']}:\n{listing}"
    if row.get("location"):
        assert found["location"].startswith(row["location"]), f"location {found['location']!r}:\n{listing}"
    for code in row.get("forbidden", ()):
        assert not any(f["code"] == code for f in findings), f"{run_name(row)}: {code} found:\n{listing}"
    # "Raise the learning rate" is never the advice when the learning rate blew the run up.
    if row.get("causes") == ["lr_too_high"]:
        for f in findings:
            assert not (f["causes"] and f["causes"][0]["id"] == "lr_too_low"), listing
            assert not any("raise the learning rate" in a.lower() for a in f["actions"]), listing


def test_word_lm_saves_the_watched_model_every_epoch_and_it_loads(tmp_path):
    row = next(r for r in RUNS if r["script"] == "word_lm" and r["fault"] == "none")
    run_dir, truth, _ = run_script(row, tmp_path)
    assert truth["saved"]
    saved = tmp_path / f"{run_name(row)}.pt"
    # The script pickled __main__.RNNModel (it ran as a script): load it where that name exists.
    code = ("import sys, torch, __main__; sys.path.insert(0, sys.argv[1]); from word_lm import RNNModel; "
            "__main__.RNNModel = RNNModel; "
            "kw = {} if torch.__version__ < '2.6' else {'weights_only': False}; "
            "m = torch.load(sys.argv[2], **kw); out, _ = m(torch.zeros(3, 2, dtype=torch.long), m.init_hidden(2)); "
            "assert out.shape == (6, m.ntoken) and bool(torch.isfinite(out).all()); "
            "print('loaded', type(m).__name__)")
    proc = subprocess.run([PYTHON, "-c", code, str(SCRIPTS), str(saved)], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "loaded RNNModel" in proc.stdout, proc.stderr[-2000:]


def test_target_check_tells_next_token_targets_from_copies():
    from trainscope.checks import target_match
    import torch
    x = torch.arange(40).view(4, 10) % 7
    shifted = torch.roll(x, -1, dims=1)
    copy, nxt = target_match(x, shifted)
    assert nxt == pytest.approx(1.0) and copy < 0.2
    copy, nxt = target_match(x, x.clone())
    assert copy == 1.0 and nxt < 0.5
    # The word-LM layout: (time, batch) inputs, flattened targets one time step on.
    seq = torch.randint(0, 50, (21, 3), generator=torch.Generator().manual_seed(0))
    copy, nxt = target_match(seq[:-1], seq[1:].reshape(-1))
    assert nxt == pytest.approx(1.0) and copy < 0.2


def test_overfit_check_on_a_language_model_batch():
    """Issue 15: overfit_check said FAILED on a healthy nanoGPT batch (4.46 -> 0.295), "passed"
    on the current-token bug, and could not take a model returning (logits, loss)."""
    import torch
    import char_gpt
    torch.manual_seed(0)
    data, vocab = char_gpt.make_corpus(chars=4000)
    ix = torch.randint(len(data) - 33, (16,), generator=torch.Generator().manual_seed(1))
    x = torch.stack([data[i:i + 32] for i in ix])
    y_next = torch.stack([data[i + 1:i + 33] for i in ix])
    model = char_gpt.GPT(vocab)
    healthy = ts.overfit_check(model, None, ((x, y_next), y_next), steps=100, verbose=False)
    assert healthy.passed, healthy.verdict
    assert healthy.target_ratio == 0.1 and healthy.final_loss <= 0.1 * healthy.initial_loss
    leak = ts.overfit_check(model, None, ((x, x.clone()), x.clone()), steps=100, verbose=False)
    assert not leak.passed and leak.problem == "targets_are_inputs", leak.verdict
    assert leak.final_loss < 0.1 * leak.initial_loss  # it did memorise, by copying
    # (logits, loss) with a loss_fn: the logits go to it.
    flat = lambda logits, t: torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), t.view(-1))
    with_fn = ts.overfit_check(model, flat, (x, y_next), steps=100, verbose=False)
    assert with_fn.passed, with_fn.verdict
