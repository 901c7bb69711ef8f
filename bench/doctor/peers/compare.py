#!/usr/bin/env python3
"""The doctor's corpus side by side with two published diagnosis tools, training-doctor 0.1.0
and torchmortem 0.1.1 (PyPI): a benchmark, not a test (issue 27).

Every corpus run — the training scripts of tests/python/scripts/ with their table
(faults.py's RUNS) and the scenarios of scenarios/ (each one's SPEC), both read at run time
through bench/doctor/run_scenarios.py's load_specs/load_script_specs — is trained four
times, one after the other:

  plain            no monitor: shim_plain/trainscope, the API doing nothing
  trainscope       run_scenarios.run_scenario (the real client, then `trainscope diagnose`)
  training_doctor  shim_training_doctor/trainscope: the scripts' ts.* calls forwarded to
                   training-doctor as its README attaches it (doctor.log each step)
  torchmortem      shim_torchmortem/trainscope: forwarded to torchmortem's Autopsy

The shims go first on PYTHONPATH, so the scripts run unchanged; the peers run in the venv
/root/.cache/trainscope/peers-venv (--python), made with --system-site-packages over Debian's
/usr/bin/python3 (torch 1.13) and `pip install --no-deps` of the two wheels plus jinja2 and
plotly (torchmortem declares torch>=2.0 but runs on 1.13: docs/benchmarks.md).

Each tool's findings are mapped to trainscope's codes by the explicit tables below and scored
alike: recall (a faulty run is found when a warning or critical finding maps to one of its
expected codes), first cause (the cause of that finding, for runs whose table names the
accepted causes), false alarms (healthy runs with any warning or critical finding), the
runs a tool broke (the training raised under it and not in the plain run), and overhead
(the training process's wall time over the plain run's, median over the runs).

    nice -n 10 /usr/bin/python3 bench/doctor/peers/compare.py [--only a,b] [--write]
        [--build build] [--python VENV/bin/python] [--json results.json]
    /usr/bin/python3 bench/doctor/peers/compare.py --from-json results.json [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))  # bench/doctor: run_scenarios
import run_scenarios  # noqa: E402

VENV_PYTHON = "/root/.cache/trainscope/peers-venv/bin/python"
PEERS = ("training_doctor", "torchmortem")
TOOLS = ("trainscope",) + PEERS
TOOL_TITLES = {"trainscope": "trainscope", "training_doctor": "training-doctor 0.1.0",
               "torchmortem": "torchmortem 0.1.1"}
ALARM = ("warning", "critical")
SECTION = "## Doctor side by side with training-doctor and torchmortem"

# ---------------------------------------------------------------------------------------------
# Mappings: a peer's finding -> trainscope codes (and the cause it names, if any).
# ---------------------------------------------------------------------------------------------

# training-doctor: a Diagnosis has a problem (one per detector) and evidence lines. The
# problem is a cause statement; what was seen is in the evidence, so the codes come from
# each evidence observation (a diagnosis maps to the union of its evidence's codes).
TRAINING_DOCTOR_EVIDENCE = [
    # (regex on Evidence.observation, trainscope code, why)
    (r"^NaN or Inf values detected", "NONFINITE_LOSS", "lr_too_high: a NaN/Inf in the logged loss"),
    (r"^Sudden NaN outbreak", "NONFINITE_LOSS", "mixed precision detector: NaN losses after stable ones"),
    (r"^Loss spiked \d+ times", "LOSS_SPIKE", "loss points > 3.5 std from the last 100's mean"),
    (r"^Loss increasing rapidly|^Loss slowly diverging", "LOSS_DIVERGENCE", "the loss trend rises (20 or 500 points)"),
    (r"^NaN or Inf gradients detected|^NaN/Inf gradients detected", "NONFINITE_GRAD", "a NaN/Inf logged grad_norm"),
    (r"^Gradient norm spiked|^Exploding gradients|^Gradient spikes detected|^Highly unstable gradients"
     r"|^Extreme gradient norm range", "GRAD_EXPLOSION",
     "grad_norm > 10, > 3 std above its mean, or a coefficient of variation > 1.5: the explosion family"),
    (r"^Vanishing gradients|^Gradient norms extremely small", "GRAD_VANISHING", "grad_norm < 0.01 (or mean < 1e-6)"),
    (r"^Loss barely changed|^Loss has extremely low variance|^Loss plateaued|^Loss still at high level"
     r"|^High gradient variance during plateau|^Loss stuck", "LOSS_PLATEAU", "a flat loss"),
    (r"^Train loss decreasing|^Eval loss increasing|^Eval loss .*higher than train|^Train-eval gap"
     r"|^Eval loss", "OVERFITTING", "overfitting detector's evidence: train down, eval up, a growing gap"),
    (r"^Train and eval loss suspiciously similar|^Eval loss unexpectedly lower", "TARGET_LEAK",
     "train/eval mismatch detector (not a default detector): leakage"),
]
# What the problem line itself claims, whatever its evidence: "Learning rate likely too high"
# says the loss spikes or diverges from the LR (its explanation), so it is a LOSS_DIVERGENCE
# finding even when its only evidence is a gradient spike; the plateau and LR-too-low
# problems claim a flat loss, the overfitting one overfitting.
TRAINING_DOCTOR_PROBLEM = {
    "Learning rate likely too high": ["LOSS_DIVERGENCE"],
    "Learning rate may be too low": ["LOSS_PLATEAU"],
    "Training plateau detected": ["LOSS_PLATEAU"],
    "Early training plateau": ["LOSS_PLATEAU"],
    "Overfitting detected": ["OVERFITTING"],
    "Unusual train/eval pattern": ["TARGET_LEAK"],
    "Gradient instability detected": [],  # its evidence says which (NaN, explosion, vanishing)
    "Possible mixed precision instability": [],
}
# The cause a diagnosis names (its problem line); None: the diagnosis names no cause.
TRAINING_DOCTOR_CAUSE = {
    "Learning rate likely too high": "lr_too_high",
    "Learning rate may be too low": "lr_too_low",
    "Overfitting detected": "overfitting",
    "Possible mixed precision instability": "precision_overflow",
    # "Training plateau detected": its explanation blames a too-small batch only when the
    # gradient-variance evidence is there (batch_too_small, not a trainscope cause); else none.
    # "Gradient instability detected": names exploding gradients as the problem when that
    # evidence is there (gradient_explosion), else no cause.
}

# torchmortem: a Finding has a detector, a category and a title (per layer for some); the
# title says what was seen. No cause field: the nearest thing is the first remediation
# (the report's "Top recommendation"), read as a cause by TORCHMORTEM_REMEDIATION_CAUSE.
TORCHMORTEM_TITLE = [
    # (regex on Finding.title, trainscope codes, why)
    (r"^Training divergence detected", ["LOSS_DIVERGENCE"], "the smoothed loss rises in >= 80 % of 20 steps, x1.5"),
    (r"^Loss plateau detected", ["LOSS_PLATEAU"], "relative range < 1e-5 over 20 steps in the second half"),
    (r"^Catapult phase detected", ["LOSS_SPIKE"], "an early spike that recovers (info)"),
    (r"^Edge of stability", [], "sharpness near 2/lr (info; needs a loss tensor)"),
    (r"^Vanishing gradients detected", ["GRAD_VANISHING"], "last/first layer output-gradient ratio > 100"),
    (r"^Exploding gradients detected", ["GRAD_EXPLOSION"], "a layer's output-gradient norm > 1000"),
    (r"^Gradient stalling in", ["GRAD_VANISHING"], "a layer's output gradient < 1e-8 in >= 30 % of steps"),
    (r"^High gradient noise", [], "gradient SNR < 1"),
    (r"^Dead units in", ["DEAD_UNITS"], "> 50 % of a layer's outputs |x| < 1e-6 in >= half the late steps"),
    (r"^Activation saturation in", ["ACTIVATION_SATURATION"], "> 50 % of a layer's outputs |x| > 0.95"),
    (r"^Update ratio too low in", ["UPDATE_RATIO_LOW"], "median |dW|/|W| < 1e-5"),
    (r"^Update ratio too high in", ["UPDATE_RATIO_HIGH"], "median |dW|/|W| > 0.1"),
    (r"^Weight norm explosion", [], "final/initial weight norm > 10 (a growth, not a gradient or an update)"),
    (r"^Stagnant weight norms", ["PARAM_NOT_UPDATED", "UPDATE_RATIO_LOW"],
     "a layer's weight norm changed < 1e-4 relative over the run: not updated"),
    (r"^Inter-layer weight norm imbalance", [], "max/min final layer norm > 100"),
    (r"^Rank collapse in", [], "effective rank late/early < 0.5"),
]
TORCHMORTEM_REMEDIATION_CAUSE = [
    (r"^Reduce the learning rate", "lr_too_high"),
    (r"^(Apply|Add) gradient clipping", "gradient_explosion"),
    (r"^Switch from ReLU to LeakyReLU", "dying_relu"),
    (r"^Replace sigmoid/tanh", "saturating_activation"),
    (r"^Try increasing the learning rate|^Increase the learning rate", "lr_too_low"),
    (r"^Increase the batch size", "batch_too_small"),
    # Remedies that name no cause: add residual connections, investigate the layer, add
    # weight decay, check for vanishing gradients, per-layer LR scaling, less regularization.
]


# Families: a finding counts for a run when its code is in the same family as one of the
# run's expected codes ("recall by family"); "strict" needs the expected code itself. trainscope's
# taxonomy is finer than the peers' (a spike or a divergence, a NaN in the loss or in the
# weights that caused it): the families give every tool, trainscope included, the benefit
# of the doubt on that distinction.
FAMILIES = [
    ("loss blow-up", {"LOSS_DIVERGENCE", "LOSS_SPIKE"}),
    ("non-finite values", {"NONFINITE_LOSS", "NONFINITE_GRAD", "NONFINITE_ACTIVATION", "NONFINITE_WEIGHT",
                           "NONFINITE_INPUT", "FP16_OVERFLOW"}),
    ("updates too large", {"GRAD_EXPLOSION", "UPDATE_RATIO_HIGH"}),
    ("updates too small", {"GRAD_VANISHING", "UPDATE_RATIO_LOW"}),
    ("flat loss", {"LOSS_PLATEAU", "METRIC_STALL"}),
]


def family(codes):
    out = set(codes)
    for _, members in FAMILIES:
        if out & members:
            out |= members
    return out


def map_training_doctor(d):
    codes = list(TRAINING_DOCTOR_PROBLEM.get(d["title"], []))
    for e in d.get("evidence", []):
        for pattern, code, _ in TRAINING_DOCTOR_EVIDENCE:
            if re.search(pattern, e.get("observation", "")) and code not in codes:
                codes.append(code)
    cause = TRAINING_DOCTOR_CAUSE.get(d["title"])
    observations = " ".join(e.get("observation", "") for e in d.get("evidence", []))
    if d["title"] == "Training plateau detected" and "High gradient variance" in observations:
        cause = "batch_too_small"
    if d["title"] == "Gradient instability detected" and re.search(r"Exploding|spikes", observations):
        cause = "gradient_explosion"
    return {"codes": codes, "severity": d["severity"], "step": d.get("step"), "cause": cause,
            "confidence": d.get("confidence"),
            "label": d["title"] + " [" + "; ".join(e.get("observation", "") for e in d.get("evidence", [])) + "]"}


def map_torchmortem(f):
    if f.get("severity") == "insight":
        return None  # cross-signal insights are built from findings already counted
    codes = next((c for pattern, c, _ in TORCHMORTEM_TITLE if re.search(pattern, f["title"])), [])
    first = (f.get("remediation") or [""])[0]
    cause = next((c for pattern, c in TORCHMORTEM_REMEDIATION_CAUSE if re.search(pattern, first)), None)
    label = f["title"] + (f" ({f['model']})" if f.get("model") else "")
    return {"codes": list(codes), "severity": f["severity"], "step": f.get("step"), "cause": cause, "label": label}


def map_trainscope(f):
    causes = f.get("causes") or []
    return {"codes": [f["code"]], "severity": f["severity"], "step": f.get("step"),
            "cause": causes[0]["id"] if causes else None,
            "label": f["code"] + (f" {f['location']}" if f.get("location") else "")}


MAPPERS = {"trainscope": map_trainscope, "training_doctor": map_training_doctor, "torchmortem": map_torchmortem}

# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def run_shim(spec, tool, logdir, python, cwd):
    """Trains spec under shim_<tool> (plain: no monitor); the peer's findings from the shim."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, f"shim_{tool}"), run_scenarios.SCENARIOS,
                                         env.get("PYTHONPATH", "")])
    run_dir = os.path.join(logdir, spec["name"])
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([python, spec["file"], "--logdir", logdir, *spec.get("args", [])], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=1200)
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as error:
        rc, stderr = "timeout", str(error)
    wall = time.perf_counter() - t0
    out = {"tool": tool, "rc": rc, "seconds": wall, "stderr": stderr[-1500:], "findings": []}
    path = os.path.join(run_dir, "peer_findings.json")
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
        out["findings"] = record["findings"]
        out["status"] = record["status"]
        out["exit_reason"] = record.get("exit_reason", "")
    else:
        out["error"] = "no findings file (the shim never finished)"
    truth = os.path.join(run_dir, "truth.json")
    if os.path.exists(truth):
        with open(truth) as f:
            out["truth_step"] = json.load(f).get("step")
    return out


def run_trainscope(spec, logdir, build):
    res = run_scenarios.run_scenario(dict(spec), logdir, build, build)
    out = {"tool": "trainscope", "rc": res["rc"], "seconds": res["train_seconds"], "stderr": res["stderr"][-1500:],
           "findings": res.get("diagnosis", {}).get("findings", [])}
    if res.get("error"):
        out["error"] = res["error"]
    return out


def snapshot_build(build, dest):
    """Copies what run_scenario uses (the CLI, the Python package, the doctor bench) out of the
    shared build directory, so that one build judges every run even when someone rebuilds
    meanwhile. Statically linked, the knowledge base embedded: the copies run as they are."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, "bench"))
    shutil.copy2(os.path.join(build, "trainscope"), os.path.join(dest, "trainscope"))
    shutil.copytree(os.path.join(build, "python"), os.path.join(dest, "python"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    bench = os.path.join(build, "bench", "trainscope_doctor_bench")
    if os.path.exists(bench):
        shutil.copy2(bench, os.path.join(dest, "bench", "trainscope_doctor_bench"))
    probe = subprocess.run([run_scenarios.PYTHON, "-c", "import trainscope"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(dest, "python")))
    cli = subprocess.run([os.path.join(dest, "trainscope"), "--help"], capture_output=True, text=True)
    if probe.returncode != 0 or cli.returncode not in (0, 1, 2):
        raise SystemExit(f"the build in {build} does not work (being rebuilt?): {probe.stderr[-500:]}")
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(os.path.join(build, "trainscope"))))
    return dest, when


def plain_spec(spec):
    keep = ("name", "kind", "expected", "cause", "causes", "file", "args", "why", "step", "location", "held_out",
            "crashes")
    return {k: spec.get(k) for k in keep if k in spec}


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def accepted_causes(spec):
    if spec.get("causes"):
        return list(spec["causes"])
    if spec.get("cause"):
        return [spec["cause"]]
    return []


STRONG = 0.6  # training-doctor's README: confidence "> 0.6 - Strong signal, likely a real problem"


def score_tool(spec, result, plain, strong_only=False):
    mapper = MAPPERS[result["tool"]]
    findings = [m for m in (mapper(f) for f in result.get("findings", []) if "error" not in f) if m is not None]
    if strong_only:
        findings = [m for m in findings if (m.get("confidence") or 0) >= STRONG]
    alarms = [m for m in findings if m["severity"] in ALARM]
    row = {"alarms": alarms, "findings": findings}
    row["broke"] = result["rc"] != 0 and plain is not None and plain["rc"] == 0
    if spec["kind"] == "faulty":
        expected = set(spec["expected"])
        match = next((m for m in alarms if family(m["codes"]) & expected), None)
        row["found"] = match is not None
        row["found_strict"] = any(set(m["codes"]) & expected for m in alarms)
        row["match"] = match
        row["info_only"] = match is None and any(family(m["codes"]) & expected for m in findings)
        accepted = accepted_causes(spec)
        row["cause_judged"] = bool(accepted)
        row["cause_right"] = bool(match and accepted and match["cause"] in accepted)
    if plain is not None and plain["rc"] == result["rc"] and plain["seconds"] > 0:
        row["ratio"] = result["seconds"] / plain["seconds"]
    return row


def unrunnable(record):
    """The script refuses its arguments without any monitor (a row of the table ahead of its
    script while the corpus is being written): left out of the scores. A fault that makes
    the training raise (faults.py's crashes, a scenario's exit 3) is scored as any other."""
    plain = record["results"].get("plain")
    return (plain is not None and plain["rc"] != 0 and not record["spec"].get("crashes")
            and ("usage:" in plain["stderr"] or "error: argument" in plain["stderr"]))


def totals(records):
    out = {}
    records = [r for r in records if not unrunnable(r)]
    for tool in TOOLS:
        rows = [(r["spec"], r["scores"][tool]) for r in records if tool in r["scores"]]
        faulty = [(s, x) for s, x in rows if s["kind"] == "faulty"]
        healthy = [(s, x) for s, x in rows if s["kind"] == "healthy"]
        judged = [(s, x) for s, x in faulty if x["cause_judged"]]
        ratios = [x["ratio"] for _, x in rows if x.get("ratio")]
        by_kind = {kind: [x["ratio"] for sp, x in rows if x.get("ratio") and f"{os.sep}{kind}{os.sep}" in sp["file"]]
                   for kind in ("scripts", "scenarios")}
        out[tool] = {
            "faulty": len(faulty), "found": sum(x["found"] for _, x in faulty),
            "found_strict": sum(x["found_strict"] for _, x in faulty),
            "info_only": sum(x.get("info_only", False) for _, x in faulty),
            "judged": len(judged), "judged_found": sum(x["found"] for _, x in judged),
            "cause_right": sum(x["cause_right"] for _, x in judged),
            "healthy": len(healthy), "healthy_alarmed": sum(bool(x["alarms"]) for _, x in healthy),
            "healthy_alarms": sum(len(x["alarms"]) for _, x in healthy),
            "healthy_critical": sum(any(a["severity"] == "critical" for a in x["alarms"]) for _, x in healthy),
            "broke": sum(x["broke"] for _, x in rows), "broke_names": [s["name"] for s, x in rows if x["broke"]],
            "overhead": statistics.median(ratios) if ratios else None, "overhead_n": len(ratios),
            "overhead_by": {k: (statistics.median(v), len(v)) for k, v in by_kind.items() if v},
        }
    return out


def part_table(records):
    """Recall, first cause and false alarms for the development rows and the held-out
    quarter apart (faults.py's held_out; the scenarios are all development)."""
    tools = [t for t in TOOLS if any(t in r["scores"] for r in records)]
    lines = ["| part | faulty / healthy runs | " + " | ".join(f"{TOOL_TITLES[t]}: recall, cause, false alarms"
                                                          for t in tools) + " |", "|---|---|" + "---|" * len(tools)]
    for part, held in (("development", False), ("held-out quarter", True)):
        subset = [r for r in records if bool(r["spec"].get("held_out")) == held]
        if not subset:
            continue
        tot = totals(subset)
        any_tool = tot[tools[0]]
        cells = [f"{tot[t]['found']}/{tot[t]['faulty']}, {tot[t]['cause_right']}/{tot[t]['judged']}"
                 f"{'*' if t == 'torchmortem' else ''}, {tot[t]['healthy_alarmed']}/{tot[t]['healthy']}" for t in tools]
        lines.append(f"| {part} | {any_tool['faulty']} / {any_tool['healthy']} | " + " | ".join(cells) + " |")
    if "torchmortem" in tools:
        lines.append("")
        lines.append("\\* torchmortem has no cause field: its first remediation read as a cause.")
    return "\n".join(lines)


def pct(a, b):
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else f"{a}/{b}"


def summary_table(tot):
    tools = [t for t in TOOLS if tot[t]["faulty"] + tot[t]["healthy"]]
    lines = ["| | " + " | ".join(TOOL_TITLES[t] for t in tools) + " |", "|---|" + "---:|" * len(tools)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(tot[t], t) for t in tools) + " |")

    row("recall: faulty runs found (a warning/critical finding in an expected code's family)",
        lambda x, t: f"**{pct(x['found'], x['faulty'])}**" + (f" (+{x['info_only']} as info only)" if x["info_only"] else ""))
    row("recall, strict (the expected code itself)", lambda x, t: pct(x["found_strict"], x["faulty"]))

    def cause(x, t):
        text = f"{x['cause_right']}/{x['judged']} ({x['judged_found']} of them found)"
        if t == "torchmortem":
            return f"n/a: no cause field (first remediation read as a cause: {text})"
        return f"**{text}**"
    row("first cause right: faulty runs whose table names the accepted causes", cause)
    row("false alarms: healthy runs with a warning/critical finding",
        lambda x, t: f"**{pct(x['healthy_alarmed'], x['healthy'])}**, {x['healthy_alarms']} finding"
                     f"{'' if x['healthy_alarms'] == 1 else 's'}, "
                     f"critical on {x['healthy_critical']}")
    def strong(x, t):
        if t != "training_doctor" or "strong" not in x:
            return "-"
        y = x["strong"]
        return f"{pct(y['found'], y['faulty'])}, {y['cause_right']}/{y['judged']}, {pct(y['healthy_alarmed'], y['healthy'])}"
    row(f"only findings of confidence ≥ {STRONG} (training-doctor's \"strong signal\"): recall, first cause, "
        "false alarms", strong)
    row("runs the tool broke (the training raised under it, not without it)",
        lambda x, t: str(x["broke"]) + (f": {', '.join(x['broke_names'])}" if x["broke_names"] else ""))
    row("overhead: training wall time / plain run's, median (all runs; the scripts; the scenarios)",
        lambda x, t: (f"**{x['overhead']:.2f}x** (n={x['overhead_n']}); " if x["overhead"] else "-; ")
        + "; ".join(f"{m:.2f}x (n={n})" for m, n in x["overhead_by"].values()))
    return "\n".join(lines)


def cell(spec, x, result):
    if x["broke"]:
        reason = (result.get("exit_reason") or result.get("stderr", "").strip().splitlines()[-1:] or ["?"])
        reason = reason if isinstance(reason, str) else reason[0]
        text = f"**broke the training** ({reason[:90]})"
        if spec["kind"] == "faulty" and x.get("found"):
            text += f"; found {x['match']['label'][:60]}"
        return text.replace("|", "/")
    if spec["kind"] == "healthy":
        if not x["alarms"]:
            return "ok"
        names = list(dict.fromkeys(a["label"].split(" [")[0] for a in x["alarms"]))
        return ("**" + f"{len(x['alarms'])} alarm{'s' if len(x['alarms']) > 1 else ''}**: "
                + ", ".join(names[:3]) + (" …" if len(names) > 3 else "")).replace("|", "/")
    if not x["found"]:
        names = list(dict.fromkeys(a["label"].split(" [")[0] for a in x["alarms"]))
        other = ("; saw " + ", ".join(names[:2]) + (" …" if len(names) > 2 else "")) if names else ""
        return ("missed" + (" (info only)" if x.get("info_only") else "") + other).replace("|", "/")
    m = x["match"]
    exact = [c for c in m["codes"] if c in spec["expected"]]
    if exact:
        text = f"{exact[0]} ({m['severity']})"
    else:  # found by family only
        near = next(c for c in m["codes"] if family([c]) & set(spec["expected"]))
        text = f"~{near} ({m['severity']})"
    if x["cause_judged"]:
        text += f", cause {m['cause'] or 'none'} {'✓' if x['cause_right'] else '✗'}"
    return text


def detail_table(records):
    lines = ["| run | expected (accepted causes) | " + " | ".join(TOOL_TITLES[t] for t in TOOLS) + " |",
             "|---|---|" + "---|" * len(TOOLS)]
    for r in records:
        spec = r["spec"]
        if unrunnable(r):
            lines.append(f"| {spec['name']} | not scored: the script fails without a monitor "
                         f"(rc {r['results']['plain']['rc']}) | | | |")
            continue
        expected = "healthy" if spec["kind"] == "healthy" else "/".join(spec["expected"])
        causes = accepted_causes(spec)
        if causes:
            expected += f" ({'/'.join(causes)})"
        cells = [cell(spec, r["scores"][t], r["results"][t]) if t in r["scores"] else "-" for t in TOOLS]
        held = " (held out)" if spec.get("held_out") else ""
        lines.append(f"| {spec['name']}{held} | {expected} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def frequent_alarms(records, tool, kind="healthy", top=6):
    counts = {}
    for r in records:
        if r["spec"]["kind"] != kind or tool not in r["scores"]:
            continue
        seen = set()
        for a in r["scores"][tool]["alarms"]:
            name = re.sub(r" in \S+| \(\w+\)$", "", a["label"].split(" [")[0])
            if name not in seen:
                seen.add(name)
                counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])[:top]


def mapping_text():
    lines = ["Families (a finding counts for a run whose expected code is in its family): "
             + "; ".join(f"{name}: {', '.join(sorted(members))}" for name, members in FAMILIES) + ".", "",
             "training-doctor (a diagnosis maps to what its problem line claims plus the codes of its evidence "
             "lines; its problem line is its cause):", ""]
    for problem, codes in TRAINING_DOCTOR_PROBLEM.items():
        lines.append(f"- \"{problem}\" → {', '.join(codes) or 'by its evidence'}")
    for pattern, code, why in TRAINING_DOCTOR_EVIDENCE:
        lines.append(f"- `{pattern}` → {code}: {why}")
    lines.append("- causes: " + "; ".join(f"\"{k}\" → {v}" for k, v in TRAINING_DOCTOR_CAUSE.items())
                 + "; \"Gradient instability detected\" with exploding/spiking evidence → gradient_explosion; "
                   "\"Training plateau detected\" with gradient-variance evidence → batch_too_small; else none")
    lines += ["", "torchmortem (by the finding's title; the first remediation read as a cause):", ""]
    for pattern, codes, why in TORCHMORTEM_TITLE:
        lines.append(f"- `{pattern}` → {', '.join(codes) or 'no trainscope code (still an alarm)'}: {why}")
    lines.append("- first remediation → cause: " + "; ".join(f"`{p}` → {c}" for p, c in TORCHMORTEM_REMEDIATION_CAUSE))
    return "\n".join(lines)


def render(data):
    records = data["records"]
    for r in records:
        plain = r["results"].get("plain")
        r["scores"] = {t: score_tool(r["spec"], r["results"][t], plain) for t in TOOLS if t in r["results"]}
    tot = totals(records)
    strong = [dict(r, scores={"training_doctor": score_tool(r["spec"], r["results"]["training_doctor"],
                                                             r["results"].get("plain"), strong_only=True)})
              for r in records if "training_doctor" in r["results"]]
    if strong:
        tot["training_doctor"]["strong"] = totals(strong)["training_doctor"]
    return records, tot, summary_table(tot) + "\n\n" + part_table(records), detail_table(records)


def write_section(text):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(path) as f:
        doc = f.read()
    start = doc.find("\n" + SECTION + "\n")
    if start >= 0:
        end = doc.find("\n## ", start + len(SECTION) + 2)
        doc = doc[:start + 1] + text.rstrip("\n") + "\n" + (doc[end:] if end >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    with open(path, "w") as f:
        f.write(doc)


def section(data, records, tot, summary, detail):
    meta = data["meta"]
    n_faulty = sum(r["spec"]["kind"] == "faulty" for r in records)
    n_healthy = len(records) - n_faulty
    plain_median = statistics.median(r["results"]["plain"]["seconds"] for r in records)
    out = [SECTION, "",
           f"{meta['date']}. The doctor's whole corpus, {len(records)} trainings ({n_faulty} faulty, {n_healthy} "
           "healthy: the training scripts of `tests/python/scripts/` with their table `faults.py`, and the "
           "scenarios of `scenarios/`), each trained four times one after the other: without a monitor, under "
           "trainscope (`run.watch`, then `trainscope diagnose`), and under the two published diagnosis tools "
           "found on PyPI, attached as their READMEs say through a shim of trainscope's API "
           "(`bench/doctor/peers/shim_*/trainscope`, first on PYTHONPATH, so the scripts run unchanged):", "",
           "- training-doctor 0.1.0: `Doctor()` (default detectors), `doctor.log(step, loss=, train_loss=, lr=, "
           "grad_norm=)` every training step (grad_norm: what the script's `clip_grad_norm_` returned, else the "
           "watched models' total gradient norm; the loss under both names, since its overfitting detector "
           "runs only with a `train_loss` and the others only with a `loss`) and `eval_loss=` when the script "
           "logs a validation loss; findings: `doctor.diagnoses`.",
           "- torchmortem 0.1.1: `Autopsy(model, optimizer=optimizer)` attached at `run.watch` (one per model; "
           "default sampling), `autopsy.step(loss=loss.item())` every training step, `detach()` and "
           "`report(...json)` at the end; findings: `report.findings`.", "",
           "Command (a benchmark, not CI; the peers in a venv, "
           f"`{meta['python']}`: `python3 -m venv --system-site-packages` over Debian's Python and "
           "`pip install --no-deps training-doctor==0.1.0 torchmortem==0.1.1 jinja2 plotly`; torchmortem declares "
           "torch>=2.0 and runs on torch 1.13 here):", "",
           f"    {meta['command']}", "",
           f"Machine: 2 vCPU Debian 12 VM, torch {meta['torch']} (CPU), Python {meta['python_version']}, "
           f"OPENBLAS_NUM_THREADS=1, trainings under `nice -n 10` one at a time, load average {meta['load']} "
           f"at the start; {meta['minutes']:.0f} minutes in all. trainscope: the build in {meta.get('build', '?')} "
           "(the working tree as built then, which may hold uncommitted work; copied at the start, since the "
           "build directory is shared).", "",
           "Scoring, the same for the three tools: a faulty run is found when a warning or critical finding "
           "maps to one of the run's expected codes (info findings do not count, trainscope's included; "
           "`make bench-doctor` counts them); its first cause is the cause of the first such finding in the "
           "tool's own order, judged where the table names the accepted causes; a false alarm is any warning "
           "or critical finding on a healthy run; overhead is the training process's wall time (import, "
           "training and the tool's analysis in the process; trainscope's `diagnose` after it is not "
           "counted) over the plain run's, median over the runs that ended the same way. The runs are "
           f"seconds long (the plain run's median: {plain_median:.1f} s), so imports weigh in the ratios, and the "
           "VM is shared. "
           "The scenarios call `run.watch` with dense options (activations, weights and updates every step, "
           "per-unit gradients every 10): trainscope's overhead there is that of those options, the scripts "
           "use its defaults.", "",
           summary, ""]
    for tool in TOOLS:
        freq = frequent_alarms(records, tool)
        if freq:
            out.append(f"- {TOOL_TITLES[tool]}'s alarms on healthy runs (runs): "
                       + ", ".join(f"{name} ({n})" for name, n in freq) + ".")
    out += ["", "What the peers' code does with this corpus (read in their sources, seen in these runs):", "",
            "- torchmortem breaks two kinds of ordinary script. Its hooks are closures, so `torch.save(model)` of "
            "the whole watched model raises (`Can't pickle local object 'GradientCollector._make_hook.<locals>.hook'`:"
            " every word_lm run, which saves its model each epoch as the PyTorch example does); and its "
            "`register_full_backward_hook` on every layer with parameters makes an in-place activation after such a "
            "layer raise at the first forward (`Output 0 of BackwardHookFunctionBackward is a view and is being "
            "modified inplace`: every dcgan run, `nn.ReLU(True)` after BatchNorm; pytorch/pytorch#61519, reported "
            "under torch 2.1 too in f-dangel/singd#56, so not an effect of torch 1.13 here).",
            "- training-doctor raised into the training loop once: `MetricStore.detect_spikes` squares `v - mean` "
            "in Python floats, and a loss near 1e200 (lstm_lbfgs-lr_high) gives `OverflowError: (34, 'Numerical "
            "result out of range')` from `doctor.log`. Its findings before that were kept.",
            "- torchmortem never sees a NaN or an Inf: its loss EMA turns NaN and every comparison with it is "
            "false, and `grad_norm > 1000` is false for NaN. The non-finite faults are missed unless a gradient "
            "passed 1000 first.",
            "- torchmortem's saturation detector counts outputs with |x| > 0.95 in every layer it hooks (Linear, "
            "Conv, LayerNorm, Embedding, not only sigmoid/tanh), its dead-unit detector flags a ReLU layer with "
            "more than half its outputs at zero, and \"gradient stalling\" reads the gradient of a module's first "
            "output only: an LSTM whose final hidden state is used (not its output sequence) and "
            "`nn.MultiheadAttention`'s `out_proj` (never called as a module) read zero. These make most of its "
            "alarms on healthy runs.",
            "- training-doctor's \"Learning rate likely too high\" takes one gradient-norm point beyond 3 standard "
            "deviations of the last 100 as evidence (confidence 0.2, still a warning), and \"Loss increasing "
            "rapidly\" compares the first and last of 20 mini-batch losses; its \"Learning rate may be too low: "
            "loss barely changed\" also fires when the loss rose (it tests `-relative_change < 1 %`, e.g. \"Loss "
            "barely changed over 100 steps (80.18%)\"). Its \"Overfitting detected\" needs only a last validation "
            "loss 10 % above the last training batch's loss (its `train_eval_gap` evidence, confidence 0.3): the "
            "usual generalisation gap of a healthy run. It sees only the scalars it is given (loss, lr, gradient "
            "norm, eval loss): a forgotten `zero_grad`, labels, inputs, the model, the data loader are out of its "
            "reach, and every non-finite loss is put down to the learning rate.",
            "", "How each peer's finding was mapped to trainscope's codes (`bench/doctor/peers/compare.py`, "
            "TRAINING_DOCTOR_EVIDENCE, TORCHMORTEM_TITLE):", "", mapping_text(), "",
            "Per run (✓/✗: the first cause against the accepted ones; ~CODE: found by family, not by the "
            "expected code itself):", "", detail, ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.environ.get("TRAINSCOPE_BUILD_DIR", os.path.join(ROOT, "build")))
    parser.add_argument("--python", default=VENV_PYTHON, help="the peers' venv python")
    parser.add_argument("--only", default="", help="run names, comma-separated")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--no-scripts", action="store_true")
    parser.add_argument("--no-scenarios", action="store_true")
    parser.add_argument("--part", choices=("all", "dev", "held-out"), default="all",
                        help="as run_scenarios.py: dev leaves faults.py's held-out quarter out, held-out runs only it")
    parser.add_argument("--no-snapshot", action="store_true", help="use --build in place, not a copy of it")
    parser.add_argument("--logdir", default="")
    parser.add_argument("--json", default="", help="save the raw results here (default: <logdir>/compare.json)")
    parser.add_argument("--from-json", default="", help="score and print saved results, train nothing")
    parser.add_argument("--write", action="store_true", help="put the section into docs/benchmarks.md")
    args = parser.parse_args()

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
    else:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        tools = [t for t in args.tools.split(",") if t]
        only = set(filter(None, args.only.split(",")))
        specs = ([] if args.no_scripts else run_scenarios.load_script_specs(only)) + \
                ([] if args.no_scenarios else run_scenarios.load_specs(only))
        if not args.no_scripts:  # the table's own flag for a fault that makes the script raise
            import faults
            crashes = {faults.run_name(row): bool(row.get("crashes")) for row in faults.RUNS}
            for spec in specs:
                spec["crashes"] = crashes.get(spec["name"], False)
        if only and len(specs) != len(only):
            missing = only - {s["name"] for s in specs}
            print(f"unknown runs: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
        if args.part != "all":
            specs = [s for s in specs if bool(s.get("held_out")) == (args.part == "held-out")]
        logdir = args.logdir or tempfile.mkdtemp(prefix="trainscope-peers-")
        cwd = os.path.join(logdir, "cwd")  # torchmortem's crash report lands in the working directory
        os.makedirs(cwd, exist_ok=True)
        build, build_time = (args.build, "") if args.no_snapshot else \
            snapshot_build(args.build, os.path.join(logdir, "build-snapshot"))
        head = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h"], capture_output=True, text=True)
        probe = subprocess.run([args.python, "-c", "import torch, sys, training_doctor, torchmortem; "
                                "print(torch.__version__, sys.version.split()[0])"], capture_output=True, text=True)
        if probe.returncode != 0:
            print(f"{args.python} cannot import the peers:\n{probe.stderr}", file=sys.stderr)
            return 2
        torch_version, python_version = probe.stdout.split()
        t_start = time.time()
        load = os.getloadavg()[0]
        date = subprocess.run(["date"], capture_output=True, text=True).stdout.strip()
        records = []
        for spec in specs:
            results = {}
            for tool in ["plain"] + tools:
                mode_dir = os.path.join(logdir, tool)
                if tool == "trainscope":
                    results[tool] = run_trainscope(spec, mode_dir, build)
                else:
                    results[tool] = run_shim(spec, tool, mode_dir, args.python, cwd)
            record = {"spec": plain_spec(spec), "results": results}
            records.append(record)
            plain = results["plain"]
            status = []
            for tool in tools:
                x = score_tool(spec, results[tool], plain)
                if spec["kind"] == "faulty":
                    s = "found" if x["found"] else "missed"
                else:
                    s = "ok" if not x["alarms"] else f"{len(x['alarms'])} alarms"
                if x["broke"]:
                    s += " BROKE"
                status.append(f"{tool}={s} {results[tool]['seconds']:.1f}s")
            print(f"{spec['name']:34s} plain {plain['seconds']:5.1f}s rc={plain['rc']}  " + "  ".join(status),
                  file=sys.stderr, flush=True)
        data = {"meta": {"date": date,
                         "torch": torch_version, "python_version": python_version, "python": args.python,
                         "load": f"{load:.1f}", "minutes": (time.time() - t_start) / 60,
                         "build": f"{args.build} at {head.stdout.strip()}" + (f", built {build_time} UTC" if build_time else ""),
                         "command": "nice -n 10 /usr/bin/python3 bench/doctor/peers/compare.py --write"
                                    + (f" --only {args.only}" if args.only else "")
                                    + (f" --part {args.part}" if args.part != "all" else "")},
                "records": records}
        path = args.json or os.path.join(logdir, "compare.json")
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)
        print(f"raw results: {path}", file=sys.stderr)

    records, tot, summary, detail = render(data)
    print(summary)
    print()
    print(detail)
    if args.write:
        write_section(section(data, records, tot, summary, detail))
        print(f"\nwrote the section '{SECTION[3:]}' of docs/benchmarks.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
