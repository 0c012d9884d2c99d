"""GLUE metrics as a local ``evaluate`` module, loadable offline.

Follows huggingface/evaluate ``metrics/glue/glue.py`` (same config names, same keys, same scikit-learn/scipy calls;
the metric of each task: docs/glue.md), shipped with the package because ``evaluate.load("glue", ...)`` downloads the
script from the Hub and fails offline. Load it with an absolute path (the file or its folder)::

    import evaluate
    from hf_bertology.evaluation.glue import GLUE_METRIC_PATH
    metric = evaluate.load(GLUE_METRIC_PATH, config_name="mrpc")
    metric.compute(predictions=[0, 1], references=[0, 1])  # {'accuracy': 1.0, 'f1': 1.0}

This file imports only ``datasets``, ``evaluate``, ``scipy`` and ``scikit-learn``: ``evaluate`` copies it into its
module cache and imports it from there, so it must not import ``hf_bertology``.
"""

import datasets
import evaluate
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

_CITATION = """\
@inproceedings{wang2019glue,
  title={{GLUE}: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding},
  author={Wang, Alex and Singh, Amanpreet and Michael, Julian and Hill, Felix and Levy, Omer and Bowman, Samuel R.},
  note={In the Proceedings of ICLR.},
  year={2019}
}
"""

_DESCRIPTION = """\
GLUE, the General Language Understanding Evaluation benchmark (https://gluebenchmark.com/): the metric of each of
its tasks, as the GLUE leaderboard computes it.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted labels (class ids; floats for stsb).
    references: gold labels (class ids; floats for stsb).
Returns, depending on the config name:
    "accuracy": for sst2, mnli, mnli_matched, mnli_mismatched, qnli, rte, wnli, ax, mrpc, qqp
    "f1": F1 of class 1, for mrpc and qqp
    "pearson", "spearmanr": for stsb
    "matthews_correlation": for cola
Examples:
    >>> glue_metric = evaluate.load(GLUE_METRIC_PATH, config_name="stsb")
    >>> glue_metric.compute(predictions=[0.0, 1.0, 2.5], references=[0.0, 1.0, 2.5])
    {'pearson': 1.0, 'spearmanr': 1.0}
"""

CONFIG_NAMES = (
    "cola",
    "sst2",
    "mrpc",
    "stsb",
    "qqp",
    "mnli",
    "mnli_matched",
    "mnli_mismatched",
    "qnli",
    "rte",
    "wnli",
    "ax",
)


def simple_accuracy(preds, labels) -> float:
    return float((preds == labels).mean())


def acc_and_f1(preds, labels) -> dict:
    return {"accuracy": simple_accuracy(preds, labels), "f1": float(f1_score(y_true=labels, y_pred=preds))}


def pearson_and_spearman(preds, labels) -> dict:
    return {"pearson": float(pearsonr(preds, labels)[0]), "spearmanr": float(spearmanr(preds, labels)[0])}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Glue(evaluate.Metric):
    """The GLUE metric of one task, chosen by ``config_name``."""

    def _info(self):
        if self.config_name not in CONFIG_NAMES:
            raise KeyError(f"unknown GLUE config {self.config_name!r}: use one of {', '.join(CONFIG_NAMES)}")
        dtype = "float32" if self.config_name == "stsb" else "int64"
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value(dtype), "references": datasets.Value(dtype)}),
            codebase_urls=[],
            reference_urls=[],
            format="numpy",
        )

    def _compute(self, predictions, references):
        if self.config_name == "cola":
            return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
        if self.config_name == "stsb":
            return pearson_and_spearman(predictions, references)
        if self.config_name in ("mrpc", "qqp"):
            return acc_and_f1(predictions, references)
        return {"accuracy": simple_accuracy(predictions, references)}
