#!/usr/bin/env python3
"""Runs every scenario training (scenarios/*.py), diagnoses each run with the trainscope
CLI and scores the doctor: per scenario the expected code, what was found, the step found
vs the injected one (and when it was detected), the location found vs the true one and the
top cause; then recall, false alarms, localisation, median detection delay and the
doctor's overhead. `make bench-doctor` runs it; --write puts the table into
docs/bench/doctor.md.

    /usr/bin/python3 bench/doctor/run_scenarios.py [--build build] [--only a,b] [--write]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = os.path.join(ROOT, "scenarios")
SCRIPTS = os.path.join(ROOT, "tests", "python", "scripts")  # training scripts written as people write them
PYTHON = "/usr/bin/python3"


def load_specs(only=None):
    specs = []
    sys.path.insert(0, SCENARIOS)
    for name in sorted(os.listdir(SCENARIOS)):
        if not name.endswith(".py") or name.startswith("_") or name == "common.py":
            continue
        stem = name[:-3]
        if only and stem not in only:
            continue
        # SPEC is a literal dict near the top: read it without importing torch.
        text = open(os.path.join(SCENARIOS, name)).read()
        start = text.index("SPEC = ")
        end = text.index("\n", text.index(")", start))
        spec = eval(text[start + 7:end], {"dict": dict, "None": None})  # noqa: S307 (our own files)
        spec["file"] = os.path.join(SCENARIOS, name)
        specs.append(spec)
    return specs


def load_script_specs(only=None):
    """The training scripts of tests/python/scripts/ (faults.py's table) as specs: each run is
    a script with --fault; the step the fault became real comes from the run's truth.json."""
    sys.path.insert(0, SCRIPTS)
    from faults import RUNS, run_name, script_args
    specs = []
    for row in RUNS:
        name = run_name(row)
        if only and name not in only:
            continue
        specs.append({"name": name, "kind": "faulty" if row["expected"] else "healthy", "expected": row["expected"],
                      "step": None, "location": row.get("location"), "causes": row.get("causes"),
                      "max_delay": row.get("max_delay"), "forbidden": row.get("forbidden", []),
                      "cause": (row.get("causes") or [None])[0], "why": row["why"],
                      "file": os.path.join(SCRIPTS, row["script"] + ".py"),
                      "held_out": bool(row.get("held_out")), "crashes": bool(row.get("crashes")),
                      "args": script_args(row)})
    return specs


def run_scenario(spec, logdir, build, pybuild):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(pybuild, "python"), SCENARIOS, env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    proc = subprocess.run([PYTHON, spec["file"], "--logdir", logdir, *spec.get("args", [])], env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    run_dir = os.path.join(logdir, spec["name"])
    result = {"spec": spec, "train_seconds": wall, "rc": proc.returncode, "stderr": proc.stderr[-2000:]}
    truth_file = os.path.join(run_dir, "truth.json")
    if os.path.exists(truth_file):  # a training script's own account of its fault
        with open(truth_file) as f:
            spec["step"] = json.load(f).get("step")
    elif spec.get("crashes"):  # the script raised at its first batch, before writing truth.json
        spec["step"] = 0
    if not os.path.isdir(run_dir):
        result["error"] = "no run recorded"
        result["diagnosis"] = {"findings": [{"code": "NO_RUN", "severity": "critical", "step": 0, "location": "",
                                             "causes": [], "evidence": {}}]}
        return result
    cli = os.path.join(build, "trainscope")
    out = subprocess.run([cli, "diagnose", run_dir, "--json"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        result["error"] = out.stderr.strip()
        return result
    result["diagnosis"] = json.loads(out.stdout)
    bench = os.path.join(build, "bench", "trainscope_doctor_bench")
    if os.path.exists(bench):
        b = subprocess.run([bench, run_dir], capture_output=True, text=True, timeout=300)
        if b.returncode == 0:
            result["doctor"] = json.loads(b.stdout.splitlines()[0])
    # Training step time: the median of time/step as the client recorded it.
    try:
        sys.path.insert(0, os.path.join(pybuild, "python"))
        import trainscope as ts
        steps = ts.open_run(run_dir).scalars("time/step")["value"]
        result["step_seconds"] = float(statistics.median(steps)) if len(steps) else None
    except Exception as error:  # the reader is optional for the score
        result["step_seconds"] = None
        result["reader_error"] = str(error)
    return result


def score(result):
    spec = result["spec"]
    findings = result.get("diagnosis", {}).get("findings", [])
    row = {"name": spec["name"], "kind": spec["kind"], "expected": "/".join(spec["expected"]) or "-",
           "injected": spec["step"], "true_location": spec["location"], "findings": findings}
    match = next((f for f in findings if f["code"] in spec["expected"]), None)
    alarms = [f for f in findings if f["severity"] in ("warning", "critical")]
    row["alarms"] = alarms
    row["found"] = match is not None
    row["match"] = match
    if match:
        row["found_code"] = match["code"]
        row["found_severity"] = match["severity"]
        row["step_found"] = match["step"]
        row["detected_at"] = match.get("evidence", {}).get("detected_at", match["step"])
        row["location_found"] = match["location"]
        row["top_cause"] = match["causes"][0]["id"] if match["causes"] else "-"
        if spec["step"] is not None:
            row["delay"] = row["detected_at"] - spec["step"]
    return row


def fmt_table(rows, results):
    lines = ["| scenario | kind | expected | found | step found (detected) vs injected | location found vs true | top cause (expected) |",
             "|---|---|---|---|---|---|---|"]
    for row, res in zip(rows, results):
        spec = res["spec"]
        if row["kind"] == "healthy":
            found = "none" if not row["alarms"] else ", ".join(f"**{f['code']}**@{f['step']}" for f in row["alarms"])
            infos = [f["code"] for f in row["findings"] if f["severity"] == "info"]
            if infos:
                found += f" (info: {', '.join(infos)})"
            lines.append(f"| {row['name']} | healthy | - | {found} | - | - | - |")
            continue
        if not row["found"]:
            other = ", ".join(f"{f['code']}@{f['step']}" for f in row["findings"][:3]) or "nothing"
            err = f" ({res.get('error')})" if res.get("error") else ""
            lines.append(f"| {row['name']} | faulty | {row['expected']} | **missed** ({other}){err} | - | - | - |")
            continue
        step = f"{row['step_found']} ({row['detected_at']}) vs {spec['step'] if spec['step'] is not None else 'start'}"
        loc = f"{row['location_found'] or '-'} vs {spec['location'] or '-'}"
        lines.append(f"| {row['name']} | faulty | {row['expected']} | {row['found_code']} ({row['found_severity']}) | "
                     f"{step} | {loc} | {row['top_cause']} ({spec.get('cause') or '-'}) |")
    return "\n".join(lines)


def totals(rows, results):
    faulty = [r for r in rows if r["kind"] == "faulty"]
    healthy = [r for r in rows if r["kind"] == "healthy"]
    found = [r for r in faulty if r["found"]]
    false_alarms = sum(len(r["alarms"]) for r in healthy)
    nonfinite = [r for r in faulty if r["expected"].startswith("NONFINITE") or r["expected"].startswith("LABEL")]
    localised = [r for r in nonfinite if r["found"] and r["location_found"] == r["true_location"]]
    at_step = [r for r in nonfinite if r["found"] and r.get("delay") == 0 and r["step_found"] == r["injected"]]
    delays = [r["delay"] for r in faulty if r.get("delay") is not None]
    fast = [r for r in faulty if r["found"] and r.get("found_code") in ("LOSS_DIVERGENCE", "LOSS_SPIKE")
            and r.get("delay") is not None]
    fast_ok = [r for r in fast if r["delay"] <= 10]
    causes = [r for r, res in zip(rows, results) if r["kind"] == "faulty" and r["found"] and res["spec"].get("cause")]
    causes_ok = [r for r, res in zip(rows, results) if r in causes and r["top_cause"] == res["spec"]["cause"]]
    overheads = []
    for res in results:
        d, step = res.get("doctor"), res.get("step_seconds")
        if d and step:
            overheads.append(d["us_per_step"] * 1e-6 / step)
    us = [res["doctor"]["us_per_step"] for res in results if res.get("doctor")]
    out = {
        "faulty": len(faulty), "healthy": len(healthy),
        "recall": f"{len(found)}/{len(faulty)} = {100 * len(found) / max(1, len(faulty)):.0f} %",
        "false_alarms": f"{false_alarms} warning/critical findings on {len(healthy)} healthy scenarios",
        "localisation": f"{len(localised)}/{len(nonfinite)} non-finite scenarios name the true first producer",
        "nonfinite_at_step": f"{len(at_step)}/{len(nonfinite)} found at the injected step",
        "median_delay": f"{statistics.median(delays):.0f} steps (detected_at - injected, over {len(delays)} scenarios with a known step)" if delays else "-",
        "spike_divergence_within_10": f"{len(fast_ok)}/{len(fast)}",
        "top_cause": f"{len(causes_ok)}/{len(causes)} found faulty scenarios rank the expected cause first",
        "doctor_us_per_step": f"median {statistics.median(us):.0f} us per step (online, all detectors)" if us else "-",
        "overhead": f"median {100 * statistics.median(overheads):.2f} % of the scenarios' step time" if overheads else "-",
    }
    return out


# The delays docs/doctor.md documents, for the runs that do not name their own (scenarios):
# a non-finite value or a label out of range at its step, a forgotten zero_grad at the second
# optimizer step, a blow-up within 10 steps, a data wait after the detector's 5 + 20 steps,
# dead units at the third per-unit record (units_every = 100), a leak when the loss is below
# 5 % of its start. Codes not listed have no single step to be found at (plateaus, overfitting).
DOCUMENTED_DELAY = {"NONFINITE_LOSS": 0, "NONFINITE_GRAD": 0, "NONFINITE_ACTIVATION": 0, "NONFINITE_INPUT": 0,
                    "NONFINITE_WEIGHT": 0, "LABEL_OUT_OF_RANGE": 0, "GRAD_NOT_ZEROED": 2, "LOSS_DIVERGENCE": 10,
                    "LOSS_SPIKE": 10, "GRAD_EXPLOSION": 10, "DATALOADER_BOTTLENECK": 30, "DEAD_UNITS": 250,
                    "TARGET_LEAK": 300}


def judged(row, spec):
    """One run's verdict on the corpus criteria: found (any expected code), first cause right
    (None: no cause expected), step within the delay (None: not judged), false alarm."""
    if spec["kind"] == "healthy":
        return {"false_alarm": bool(row["alarms"]), "alarm_codes": sorted({f["code"] for f in row["alarms"]}),
                "info_codes": sorted({f["code"] for f in row["findings"] if f["severity"] == "info"})}
    causes = spec.get("causes") or ([spec["cause"]] if spec.get("cause") else None)
    out = {"found": row["found"], "cause_right": None, "in_time": None}
    if causes:
        out["cause_right"] = row["found"] and row["top_cause"] in causes
    max_delay = spec.get("max_delay")
    if max_delay is None and spec.get("max_delay", "absent") == "absent":  # a scenario: the code's documented delay
        max_delay = DOCUMENTED_DELAY.get(spec["expected"][0])
    if max_delay is not None and spec["step"] is not None:
        delay = row.get("delay")
        out["in_time"] = row["found"] and delay is not None and 0 <= delay <= max_delay
    return out


def corpus_summary(specs, rows):
    """The corpus scores, development and held-out apart: recall, first cause, step within
    the documented delay, healthy runs with a warning, and each detector's false-alarm rate."""
    verdicts = [(spec, judged(row, spec)) for spec, row in zip(specs, rows)]

    def rate(items, key):
        judged_items = [v[key] for _, v in items if v.get(key) is not None]
        if not judged_items:
            return "-"
        return f"{sum(judged_items)}/{len(judged_items)} = {100 * sum(judged_items) / len(judged_items):.0f} %"

    lines = ["| part | faults | recall | first cause right | step within the documented delay | healthy runs | "
             "healthy runs with a warning |", "|---|---|---|---|---|---|---|"]
    for part, held in (("development", False), ("held-out quarter", True), ("all", None)):
        items = [(s, v) for s, v in verdicts if held is None or bool(s.get("held_out")) == held]
        faulty = [(s, v) for s, v in items if s["kind"] == "faulty"]
        healthy = [(s, v) for s, v in items if s["kind"] == "healthy"]
        lines.append(f"| {part} | {len(faulty)} | {rate(faulty, 'found')} | {rate(faulty, 'cause_right')} | "
                     f"{rate(faulty, 'in_time')} | {len(healthy)} | {rate(healthy, 'false_alarm')} |")
    healthy = [(s, v) for s, v in verdicts if s["kind"] == "healthy"]
    codes = sorted({c for _, v in healthy for c in v["alarm_codes"] + v["info_codes"]})
    detector_lines = ["| code | healthy runs with it as a warning or critical | as info only | runs |", "|---|---|---|---|"]
    for code in codes:
        alarms = [s["name"] for s, v in healthy if code in v["alarm_codes"]]
        infos = [s["name"] for s, v in healthy if code in v["info_codes"] and code not in v["alarm_codes"]]
        detector_lines.append(f"| {code} | {len(alarms)}/{len(healthy)} | {len(infos)}/{len(healthy)} | "
                              f"{', '.join(alarms + infos)} |")
    return "\n".join(lines), "\n".join(detector_lines)


def script_verdict(row, spec):
    """faults.py's criteria (tests/python/test_scripts.py checks the same): the code, the
    delay from the step the script reports, the first cause, the place, no forbidden code."""
    if spec["kind"] == "healthy":
        return "ok" if not row["alarms"] else "FALSE ALARM"
    if not row["found"]:
        return "MISSED"
    problems = []
    delay = row.get("delay")
    if spec.get("max_delay") is not None and (delay is None or not 0 <= delay <= spec["max_delay"]):
        problems.append(f"delay {delay} > {spec['max_delay']}")
    if spec.get("causes") and row["top_cause"] not in spec["causes"]:
        problems.append(f"cause {row['top_cause']}")
    if spec.get("location") and not (row["location_found"] or "").startswith(spec["location"]):
        problems.append(f"location {row['location_found']}")
    extra = [c for c in spec.get("forbidden", []) if any(f["code"] == c for f in row["findings"])]
    if extra:
        problems.append("also " + ",".join(extra))
    return "ok" if not problems else "; ".join(problems)


def fmt_script_table(rows, results):
    lines = ["| run | what | expected | found | detected vs fault step (max delay) | top cause (accepted) | other warnings | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for row, res in zip(rows, results):
        spec = res["spec"]
        verdict = script_verdict(row, spec)
        others = [f"{f['code']}@{f['step']}" for f in row["alarms"] if f is not row.get("match")]
        if spec["kind"] == "healthy":
            lines.append(f"| {spec['name']} | {spec['why']} | - | - | - | - | {', '.join(others) or 'none'} | {verdict} |")
            continue
        if not row["found"]:
            lines.append(f"| {spec['name']} | {spec['why']} | {row['expected']} | **missed** | - | - | "
                         f"{', '.join(others) or 'none'} | {verdict} |")
            continue
        accepted = "/".join(spec.get("causes") or []) or "-"
        max_delay = spec.get("max_delay")
        lines.append(f"| {spec['name']} | {spec['why']} | {row['expected']} | {row['found_code']} ({row['found_severity']}) | "
                     f"{row['detected_at']} vs {spec['step']} ({'-' if max_delay is None else max_delay}) | "
                     f"{row['top_cause']} ({accepted}) | {', '.join(others) or 'none'} | {verdict} |")
    return "\n".join(lines)


def torch_version():
    out = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def replace_section(path, heading, body):
    """Puts body under heading in the markdown file at path: in place of the section's old
    text (up to the next heading of the same level), or at the end."""
    with open(path) as f:
        lines = f.read().split("\n")
    level = heading.split(" ")[0] + " "
    try:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    except ValueError:
        start = end = len(lines)
        while lines and lines[-1] == "":
            lines.pop()
            start = end = len(lines)
        lines.append("")
        start = end = len(lines)
    lines[start:end] = [heading, ""] + body
    with open(path, "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.environ.get("TRAINSCOPE_BUILD_DIR", os.path.join(ROOT, "build")))
    parser.add_argument("--pybuild", default="", help="build dir holding python/trainscope (default: --build)")
    parser.add_argument("--only", default="")
    parser.add_argument("--logdir", default="")
    parser.add_argument("--write", action="store_true", help="write docs/bench/doctor.md")
    parser.add_argument("--json", default="", help="also dump the raw results here")
    parser.add_argument("--no-scripts", action="store_true", help="skip the training scripts of tests/python/scripts")
    parser.add_argument("--part", choices=("all", "dev", "held-out"), default="all",
                        help="dev: leave the held-out quarter out (what tuning may look at); held-out: only it")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    specs = load_specs(only)
    script_specs = [] if args.no_scripts else load_script_specs(only)
    if args.part != "all":
        keep = args.part == "held-out"
        specs = [s for s in specs if bool(s.get("held_out")) == keep]
        script_specs = [s for s in script_specs if bool(s.get("held_out")) == keep]
    logdir = args.logdir or tempfile.mkdtemp(prefix="trainscope-scenarios-")
    results = []
    for spec in specs:
        shutil.rmtree(os.path.join(logdir, spec["name"]), ignore_errors=True)
        res = run_scenario(spec, logdir, args.build, args.pybuild or args.build)
        results.append(res)
        row = score(res)
        status = ("ok" if row["found"] else "MISSED") if spec["kind"] == "faulty" else \
                 ("ok" if not row["alarms"] else "FALSE ALARM: " + ",".join(f["code"] for f in row["alarms"]))
        if res.get("error"):
            status += f" (error: {res['error']}; {res['stderr'][-300:]})"
        print(f"{spec['name']:32s} {res['train_seconds']:5.1f}s rc={res['rc']} {status}", file=sys.stderr)
    script_results = []
    for spec in script_specs:
        shutil.rmtree(os.path.join(logdir, spec["name"]), ignore_errors=True)
        res = run_scenario(spec, logdir, args.build, args.pybuild or args.build)
        script_results.append(res)
        status = script_verdict(score(res), spec)
        if res.get("error"):
            status += f" (error: {res['error']}; {res['stderr'][-300:]})"
        print(f"{spec['name']:32s} {res['train_seconds']:5.1f}s rc={res['rc']} {status}", file=sys.stderr)
    rows = [score(r) for r in results]
    table = fmt_table(rows, results)
    tot = totals(rows, results)
    print(table)
    print()
    for k, v in tot.items():
        print(f"{k}: {v}")
    script_rows = [score(r) for r in script_results]
    script_table = fmt_script_table(script_rows, script_results) if script_results else ""
    script_tot = {}
    if script_results:
        verdicts = [script_verdict(r, res["spec"]) for r, res in zip(script_rows, script_results)]
        faulty = [v for v, res in zip(verdicts, script_results) if res["spec"]["kind"] == "faulty"]
        healthy = [r for r, res in zip(script_rows, script_results) if res["spec"]["kind"] == "healthy"]
        script_tot = {"script_faults_right": f"{faulty.count('ok')}/{len(faulty)} faults found with the right code, "
                                             "delay, first cause and place",
                      "script_false_alarms": f"{sum(len(r['alarms']) for r in healthy)} warning/critical findings on "
                                             f"{len(healthy)} healthy script runs"}
        print()
        print(script_table)
        print()
        for k, v in script_tot.items():
            print(f"{k}: {v}")
    corpus, detectors = corpus_summary(specs + script_specs, rows + script_rows)
    print()
    print(corpus)
    print()
    print(detectors)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [{k: v for k, v in r.items() if k not in ("findings", "alarms", "match")} for r in rows],
                       "totals": tot}, f, indent=1, default=str)
    if args.write:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:12]
        doc = ["# Doctor benchmark: scenario trainings", "",
               "Every scenario in `scenarios/` is a real PyTorch training on the CPU, recorded with `ts.init` + "
               "`run.watch`, with a known fault injected at a known step (or none). Each run is then diagnosed with "
               "`trainscope diagnose RUN --json`. Reproduce with:", "",
               "    cmake --build build && /usr/bin/python3 bench/doctor/run_scenarios.py --write", "",
               "\"step found\" is the finding's `step` (when the problem began); \"detected\" is the step the doctor "
               "was judging when it opened the finding (`evidence.detected_at`): their difference from the injected "
               "step is the detection delay. Locations are checked for non-finite faults (DESIGN.md's first "
               "producer).", "", table, "", "## Totals", ""]
        doc += [f"- {k.replace('_', ' ')}: {v}" for k, v in tot.items()]
        if script_results:
            doc += ["", "## Training scripts", "",
                    "The training scripts of `tests/python/scripts/` (a nanoGPT-style char GPT, a PyTorch-examples "
                    "MNIST CNN, the examples' word-level LSTM with manual SGD), healthy and with `--fault`; each run "
                    "writes the step its fault became real (`truth.json`). Criteria from "
                    "`tests/python/scripts/faults.py` (the same as `tests/python/test_scripts.py`).", "",
                    script_table, ""]
            doc += [f"- {k.replace('_', ' ')}: {v}" for k, v in script_tot.items()]
        doc += ["", "Overhead: `build/bench/trainscope_doctor_bench RUN` replays each recorded run through the "
                "online doctor (every detector, samples in step order), median of 5; divided by the scenario's "
                "median recorded step time (`time/step`). The scenarios' steps are tiny (about a millisecond), so "
                "this is an upper bound for real trainings.", "", "Machine:", "", "```"] + lscpu + ["```", ""]
        with open(os.path.join(ROOT, "docs", "bench", "doctor.md"), "w") as f:
            f.write("\n".join(doc))
        if args.part == "all" and not only:
            machine = f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), torch {torch_version()}"
            today = time.strftime("%Y-%m-%d")
            replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), "## Doctor on its corpus", [
                f"Command: `make bench-doctor` (`bench/doctor/run_scenarios.py --write`). Machine: {machine}. "
                f"Date: {today}.", "",
                f"The corpus: {sum(s['kind'] == 'faulty' for s in specs + script_specs)} faulty and "
                f"{sum(s['kind'] == 'healthy' for s in specs + script_specs)} healthy trainings (`scenarios/*.py` "
                "and the rows of `tests/python/scripts/faults.py`). The held-out quarter was frozen before any of "
                "it was run (faults.py says how it was drawn); this is the latest run, and the held-out quarter's "
                "first score, before anything was fixed after seeing it, is in the next section. Per run tables: "
                "docs/bench/doctor.md.", "",
                corpus, ""])
            replace_section(os.path.join(ROOT, "docs", "doctor.md"), "## False alarms on the healthy corpus", [
                f"Each code that appeared on a healthy run of the corpus (`make bench-doctor`, {today}), with how "
                f"many of the {sum(s['kind'] == 'healthy' for s in specs + script_specs)} healthy runs got it. "
                "A code not listed appeared on none.", "", detectors, ""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
