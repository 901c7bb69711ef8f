"""trainscope: finds what goes wrong in deep-learning training, and shows it.

    import trainscope as ts
    run = ts.init(logdir="runs", name=None, config={"lr": 3e-4})
    for step, batch in enumerate(loader):
        ...
        run.log({"train/loss": loss, "train/acc": acc})
    run.finish()
"""

from trainscope.reader import RunView, diagnose, open_run, list_runs
from trainscope.run import Run, init
from trainscope.metrics import classification_metrics

__all__ = ["Run", "RunView", "classification_metrics", "diagnose", "init", "list_runs", "open_run"]
__version__ = "0.1.0"
