"""run.log_classification(): accuracy, per-class and macro precision/recall/F1 and the
confusion matrix, accumulated on the outputs' device without a sync per batch.

Batches accumulate into one confusion matrix (on the device) while the run's step stays
the same, e.g. a validation loop inside one training step. The metrics are logged at that
step when the step has moved on and the next batch arrives, when commit=True is passed,
after `window` batches, or when the run finishes. Accuracy alone misleads on imbalanced
classes; macro F1 and the per-class recall do not.
"""

from __future__ import annotations


class ClassificationAccumulator:
    def __init__(self, run, prefix, num_classes=None, window=None):
        self.run = run
        self.prefix = prefix
        self.num_classes = num_classes
        self.window = window
        self.confusion = None  # [true class, predicted class] counts, on the device
        self.step = None
        self.batches = 0

    def add(self, outputs, targets, step, commit=False):
        import torch  # here, so that `import trainscope` does not import torch
        if self.step is not None and step != self.step:
            self.flush()
        outputs = outputs.detach()
        targets = targets.detach().reshape(-1).to(torch.int64)
        if outputs.is_floating_point() and outputs.dim() >= 2:
            classes = outputs.shape[-1]
            predicted = outputs.reshape(-1, classes).argmax(dim=1)
        else:
            predicted = outputs.reshape(-1).to(torch.int64)
            classes = self.num_classes
        if self.num_classes is None:
            if classes is None:  # labels only: the largest label seen so far decides (one sync)
                classes = int(torch.maximum(predicted.max(), targets.max()).item()) + 1
            self.num_classes = classes
        c = self.num_classes
        if self.confusion is not None and self.confusion.shape[0] < c:
            grown = torch.zeros((c, c), dtype=torch.int64, device=self.confusion.device)
            k = self.confusion.shape[0]
            grown[:k, :k] = self.confusion
            self.confusion = grown
        if self.confusion is None:
            self.confusion = torch.zeros((c, c), dtype=torch.int64, device=targets.device)
        valid = (targets >= 0) & (targets < c) & (predicted >= 0) & (predicted < c)
        index = targets[valid] * c + predicted[valid]
        self.confusion += torch.bincount(index, minlength=c * c).reshape(c, c)
        self.step = step
        self.batches += 1
        if commit or (self.window and self.batches >= self.window):
            self.flush()

    def flush(self):
        if self.confusion is None:
            return
        import torch
        confusion, step = self.confusion.to("cpu").to(torch.float64), self.step  # the one copy
        self.confusion, self.step, self.batches = None, None, 0
        self.run.log(classification_metrics(confusion, self.prefix), step=step)
        tag = f"{self.prefix}/confusion"
        self.run._recorder.log_vector_id(self.run._recorder.series(tag, "vector"), step,
                                         confusion.reshape(-1).tolist())


def classification_metrics(confusion, prefix):
    """{tag: value} from a [true, predicted] count matrix (a CPU tensor)."""
    total = float(confusion.sum())
    true_positive = confusion.diag()
    predicted = confusion.sum(dim=0)
    actual = confusion.sum(dim=1)
    out = {f"{prefix}/acc": float(true_positive.sum()) / total if total else float("nan")}
    f1s = []
    for k in range(confusion.shape[0]):
        tp = float(true_positive[k])
        precision = tp / float(predicted[k]) if predicted[k] > 0 else 0.0
        recall = tp / float(actual[k]) if actual[k] > 0 else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        out[f"{prefix}/precision/{k}"] = precision
        out[f"{prefix}/recall/{k}"] = recall
        out[f"{prefix}/f1/{k}"] = f1
        if actual[k] > 0 or predicted[k] > 0:  # classes never seen nor predicted don't count
            f1s.append(f1)
    out[f"{prefix}/macro_f1"] = sum(f1s) / len(f1s) if f1s else float("nan")
    return out
