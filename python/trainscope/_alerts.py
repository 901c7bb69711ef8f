"""Alerts on the Python side: StopTraining, the callbacks `ts.on_alert` registers, and the
rules init(alerts=...) passes to the recorder (the rules themselves are judged in C++,
docs/doctor.md "Alert rules")."""

from __future__ import annotations

import json
import os

from trainscope import _core


class StopTraining(SystemExit):
    """Raised at a step boundary when an alert rule with the "stop" action fired.

    A SystemExit (exit status 0), so a generic `except Exception` in the training loop or
    in a library does not swallow it, and an uncaught one ends the script quietly; the
    run is then recorded with status "stopped" and the rule as exit reason. Catch it
    (`except ts.StopTraining as stop:`) to save a checkpoint first; stop.alert is the alert.
    An alert callback may raise it too, to stop on its own judgement.
    """

    def __init__(self, alert=None, reason=None):
        super().__init__(0)
        self.alert = alert or {}
        self.reason = reason or _stop_reason(self.alert)

    def __str__(self):
        return self.reason


def _stop_reason(alert):
    if not alert:
        return "stopped by the training script"
    return (f"alert rule '{alert.get('rule')}': {alert.get('series')} = {alert.get('value'):.6g} "
            f"at step {alert.get('step')}")


alert_callbacks = {}  # name -> the function on_alert registered under it


def on_alert(name, fn=None):
    """Registers fn as the alert callback called `name` (a rule's callback = "name").

    As a decorator, `@ts.on_alert("on_stall")`, or directly, `ts.on_alert("on_stall", fn)`.
    fn(alert) gets the alert as a dict (rule, series, severity, step, value, message,
    actions) at the step boundary after the rule fired. An exception in it is reported
    once and never reaches the training (ts.StopTraining excepted: it stops the run).
    """
    if not isinstance(name, str) or not name:
        raise TypeError("ts.on_alert(name, fn): name must be a non-empty str")

    def register(function):
        if not callable(function):
            raise TypeError(f"ts.on_alert({name!r}, fn): fn must be callable")
        alert_callbacks[name] = function
        return function
    return register if fn is None else register(fn)


def alert_rules_source(alerts):
    """(file, text, origin) for the recorder from init(alerts=...)."""
    if alerts is None or alerts is False:
        return "", "", ""
    if isinstance(alerts, (str, os.PathLike)):
        path = os.fspath(alerts)
        if not os.path.isfile(path):
            raise ValueError(f"alerts={path!r}: no such rules file (expected a TOML file of [[rule]] tables)")
        return path, "", ""
    if isinstance(alerts, dict):
        alerts = [alerts]
    if not isinstance(alerts, (list, tuple)):
        raise TypeError(f"alerts= takes a rules file path or a list of rule dicts, not {type(alerts).__name__}")
    blocks = []
    for index, rule in enumerate(alerts):
        if not isinstance(rule, dict):
            raise ValueError(f"alerts[{index}]: expected a dict of rule keys, got {type(rule).__name__}")
        lines = ["[[rule]]"]
        for key, value in rule.items():
            lines.append(f"{json.dumps(str(key))} = {_toml_value(value, f'alerts[{index}][{key!r}]')}")
        block = "\n".join(lines) + "\n"
        _core.check_alert_rules(block, f"alerts[{index}]")  # errors name the rule's index
        blocks.append(block)
    return "", "\n".join(blocks), "alerts=[...]"


def _toml_value(value, where):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    raise ValueError(f"{where}: a {type(value).__name__} is not a rule value (numbers, strings, true/false, lists)")
