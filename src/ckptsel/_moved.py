"""Old module names, kept for one release as thin re-exports with a ``DeprecationWarning``.

The package was reorganised into one package per stage (ARCHITECTURE.md). Code that imports
an old name (``from ckptsel.answers import is_correct``, ``from ckptsel.select import
select_checkpoint``, ``import ckptsel.pipeline``) keeps working: a finder at the end of
``sys.meta_path`` answers only for the names in :data:`MOVED` (real modules always win) with a
module that holds the new homes' names, and warns once per old name. Names that changed with
the move are in :data:`RENAMED`. Remove this module (and its ``install()`` call) in the next
release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old module -> the modules that now hold its names (the first is its main new home)
MOVED: dict[str, tuple[str, ...]] = {
    "ckptsel.io": ("ckptsel._util.io",),
    "ckptsel.analysis": (
        "ckptsel.stats", "ckptsel.stats.resample", "ckptsel.stats.distributions",
        "ckptsel.stats.paired", "ckptsel.stats.exact", "ckptsel.stats.estimates",
    ),  # fmt: skip
    "ckptsel.analysis.core": ("ckptsel.choose.core", "ckptsel.choose.evaluate"),
    "ckptsel.analysis.bootstrap": ("ckptsel.stats.bootstrap", "ckptsel.stats.resample"),
    "ckptsel.analysis.paired": ("ckptsel.stats.paired", "ckptsel.stats.resample"),
    "ckptsel.analysis.intervals": (
        "ckptsel.stats.intervals", "ckptsel.stats.distributions", "ckptsel.results.summary",
    ),  # fmt: skip
    "ckptsel.analysis.blas": ("ckptsel._util.threads",),
    "ckptsel.answers": ("ckptsel.data.scoring", "ckptsel.data.answers"),
    "ckptsel.answers.numbers": ("ckptsel.data.answers.numbers",),
    "ckptsel.answers.gsm8k": ("ckptsel.data.answers.gsm8k",),
    "ckptsel.answers.math": ("ckptsel.data.answers.latex",),
    "ckptsel.answers.commonsense": ("ckptsel.data.answers.commonsense",),
    "ckptsel.tasks": ("ckptsel.data.tasks",),
    "ckptsel.pools": ("ckptsel.data.pools",),
    "ckptsel.split": ("ckptsel.data.split",),
    "ckptsel.audit": (
        "ckptsel.data.audit", "ckptsel.data.audit.grams", "ckptsel.data.audit.indexes",
        "ckptsel.data.audit.findings", "ckptsel.data.audit.plant", "ckptsel.data.audit.files",
    ),  # fmt: skip
    "ckptsel.ingest": ("ckptsel.measure.ingest.lm_eval",),
    "ckptsel.rules": ("ckptsel.choose.rules",),
    "ckptsel.evaluate": ("ckptsel.choose.evaluate",),
    "ckptsel.publish": ("ckptsel.results.publish",),
    "ckptsel.pipeline": ("ckptsel.workflows.analysis",),
    "ckptsel.select": ("ckptsel.workflows.advise.selection", "ckptsel.stats.resample"),
    "ckptsel.compare": ("ckptsel.workflows.advise.comparison",),
    "ckptsel.plan": ("ckptsel.workflows.advise.planning",),
    "ckptsel.runner": ("ckptsel.workflows.study_run",),
    "ckptsel.simulate": ("ckptsel.sim.simulate", "ckptsel.stats.distributions"),
    "ckptsel.embedded": ("ckptsel.sim.embedded",),
    "ckptsel.tiny": ("ckptsel.sim.tiny",),
    "ckptsel.quickstart": ("ckptsel.sim.quickstart",),
    "ckptsel.commands": ("ckptsel.cli",),
    "ckptsel.records.dataset": ("ckptsel.records.scan", "ckptsel.records.units", "ckptsel.records.store"),
    "ckptsel.records.read": ("ckptsel.records.load", "ckptsel.records.codec"),
    "ckptsel.records.write": ("ckptsel.records.store", "ckptsel.records.schema", "ckptsel.records.codec"),
    "ckptsel.measure.runner": ("ckptsel.measure.measurer", "ckptsel.measure.run"),
    "ckptsel.measure.checkpoints": ("ckptsel.train.checkpoints",),
    "ckptsel.measure.models": ("ckptsel.measure.backends.hf",),
    "ckptsel.measure.vllm_backend": ("ckptsel.measure.backends.vllm",),
    "ckptsel.measure.generate": ("ckptsel.measure.tokens",),
    "ckptsel.measure.nll": ("ckptsel.measure.tokens",),
    "ckptsel.measure.ray_executor": ("ckptsel.measure.executors.ray_actors",),
}
# old module -> {old name: new name}
RENAMED: dict[str, dict[str, str]] = {
    "ckptsel.evaluate": {"Scored": "ScoredChoices"},
    "ckptsel.measure.nll": {"Scored": "ResponseNll"},
    "ckptsel.records.dataset": {"Unit": "UnitFile"},
    "ckptsel.measure.runner": {"_Measurer": "Measurer"},
    "ckptsel.analysis.intervals": {"LABELS": "INTERVAL_LABELS", "label": "interval_label"},
}
# package -> {the module that defines them: names its __init__ no longer exports}: only tests and
# docs imported them there (issue 49, tests/test_exports.py); still given, with a warning
_LEFT_INIT: dict[str, dict[str, tuple[str, ...]]] = {
    "ckptsel.choose": {
        "ckptsel.choose.choices": ("PoolSubsets", "pool_key", "thinned"),
        "ckptsel.choose.evaluate": ("SCHEMES", "quantity_names"),
        "ckptsel.choose.frozen": ("CHOICES_FILE", "FrozenChoices", "HASH_FILE"),
        "ckptsel.choose.rules": ("RuleSpec",),
        "ckptsel.choose.settings": ("check_budgets", "parse_budgets"),
    },
    "ckptsel.data": {
        "ckptsel.data.answers": ("FAMILIES",),
        "ckptsel.data.answers.rules": ("AnswerRule", "COMPARE_RULES", "EXTRACT_RULES"),
        "ckptsel.data.prompts": ("ALPACA", "BOS_CHOICES", "adds_bos", "drop_final_newline"),
        "ckptsel.data.scoring": ("family_of", "normalize_reference"),
        "ckptsel.data.taskdef": ("Fields", "ROLES", "TASK_FILE_KEYS", "read_task_file"),
        "ckptsel.data.tasks": ("COMMONSENSE_TASKS", "QUESTION_FIELDS", "task_family"),
    },
    "ckptsel.data.audit": {
        "ckptsel.data.audit.files": ("read_questions",),
        "ckptsel.data.audit.findings": ("CheckResult", "PairReport", "PlantedPair"),
        "ckptsel.data.audit.grams": (
            "CHAR_N", "WORD_N", "char_ngrams", "jaccard", "normalize", "threshold_fraction",
            "word_ngrams",
        ),
        "ckptsel.data.audit.indexes": (
            "JaccardIndex", "MAX_WORD_PAIRS", "SharedGramIndex", "TEMPLATE_FRACTION",
            "TEMPLATE_MIN_COUNT", "brute_force_jaccard_pairs", "jaccard_pairs", "shared_ngram_pairs",
        ),
        "ckptsel.data.audit.plant": ("EXPECTED_CHECKS", "PLANT_KINDS"),
    },
    "ckptsel.integrations": {
        "ckptsel.integrations.hf_trainer": ("SELECTION_FILE",),
    },
    "ckptsel.report": {
        "ckptsel.report.figures": ("FIGURE_FORMATS", "all_figures", "save_figure"),
        "ckptsel.report.html": ("render_html",),
        "ckptsel.report.tables": ("TABLE_FORMATS", "write_tables"),
    },
    "ckptsel.results": {
        "ckptsel.results.estimate": ("DIGITS",),
        "ckptsel.results.summary": (
            "Exclusions", "INTERVAL_LABELS", "NOT_PREREGISTERED", "SCHEMA", "interval_label",
            "main_table_rows", "rule_order",
        ),
    },
    "ckptsel.sim": {
        "ckptsel.sim.presets": ("PRESETS", "SimSpec", "TaskSim"),
        "ckptsel.sim.quickstart": ("make_plan",),
        "ckptsel.sim.tiny": ("build_model", "build_tokenizer", "save_tiny"),
    },
    "ckptsel.stats": {
        "ckptsel.stats.distributions": ("t_quantile",),
        "ckptsel.stats.estimates": ("FEW_CONFIGURATIONS", "est"),
        "ckptsel.stats.exact": ("clopper_pearson", "needed_units", "valid_at", "verdict"),
        "ckptsel.stats.paired": ("ADJUSTMENTS",),
        "ckptsel.stats.resample": ("CHUNK", "cluster_sums", "draw_counts", "map_chunks"),
    },
    "ckptsel.trackers": {
        "ckptsel.trackers.base": (
            "ALIAS", "Payload", "Registration", "build_payload", "evidence", "metric_name",
            "read_summary", "registration", "summary_metrics",
        ),
    },
    "ckptsel.train": {
        "ckptsel.train.checkpoints": (
            "CHECKPOINT_PREFIX", "LAYOUTS", "TrajectoryStatus", "trajectory_status", "weight_files",
        ),
        "ckptsel.train.models": ("build_trainable", "check_device", "use_bf16"),
        "ckptsel.train.study": ("write_final_steps",),
        "ckptsel.train.trajectory": (
            "TrainResult", "encode_example", "encode_items", "example_order", "train_trajectory",
        ),
    },
}
# package -> {name that left it: its new home}, answered by that package's __getattr__
MOVED_NAMES: dict[str, dict[str, str]] = {
    "ckptsel.measure": {
        "Checkpoint": "ckptsel.train",
        "discover_checkpoints": "ckptsel.train",
    },
    **{
        package: {name: home for home, names in homes.items() for name in names}
        for package, homes in _LEFT_INIT.items()
    },
}


def _warn(old: str, new: str, skip: int = 0) -> None:
    """A DeprecationWarning attributed to the code that used the old name (``warnings`` skips
    the import machinery's frames itself; this skips this module's)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None:
        if "importlib" not in frame.f_code.co_filename:
            level += 1
            if frame.f_code.co_filename != __file__:
                if skip == 0:
                    break
                skip -= 1
        frame = frame.f_back
    warnings.warn(
        f"{old} is deprecated: use {new} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=level,
    )


def moved_attribute(package: str, name: str):
    """For a package's ``__getattr__``: a name that moved to another stage, with a warning."""
    home = MOVED_NAMES.get(package, {}).get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{home}.{name}", skip=1)  # past the package's __getattr__
    return getattr(importlib.import_module(home), name)


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old module names of :data:`MOVED`, and nothing else."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in MOVED:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec):
        return None  # a plain new module

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        homes = MOVED[old]
        _warn(old, homes[0])
        for home in reversed(homes):  # the main home's names win
            new = importlib.import_module(home)
            module.__dict__.update(
                {k: v for k, v in vars(new).items() if not (k.startswith("__") and k.endswith("__"))}
            )
        for was, now in RENAMED.get(old, {}).items():
            module.__dict__[was] = module.__dict__[now]
        module.__doc__ = f"Deprecated alias of {homes[0]}."


_FINDER = _MovedFinder()


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
