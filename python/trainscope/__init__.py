"""trainscope: finds what goes wrong in deep-learning training, and shows it.

    import trainscope as ts
    run = ts.init(logdir="runs", name=None, config={"lr": 3e-4})
    for step, batch in enumerate(loader):
        ...
        run.log({"train/loss": loss, "train/acc": acc})
    run.finish()
"""

from trainscope.reader import RunView, diagnose, open_run, list_runs
from trainscope._alerts import StopTraining, on_alert
from trainscope.run import Run, init
from trainscope.metrics import classification_metrics
from trainscope.checks import check_model
from trainscope.overfit import overfit_check

__all__ = ["Run", "RunView", "StopTraining", "check_model", "classification_metrics", "count_flops", "diagnose", "init", "list_runs",
           "on_alert", "open_run", "overfit_check"]
__version__ = "0.1.0"


def __getattr__(name):
    # ts.perf and ts.count_flops on first use: `python -m trainscope.perf` (what the CLI runs)
    # then imports the package without the module already in sys.modules.
    # Both import torch: `import trainscope` itself needs only NumPy (a reader of runs on a
    # machine without torch).
    import importlib
    if name == "perf":
        return importlib.import_module("trainscope.perf")
    if name == "count_flops":
        return importlib.import_module("trainscope.flops").count_flops
    raise AttributeError(f"module 'trainscope' has no attribute {name!r}")
