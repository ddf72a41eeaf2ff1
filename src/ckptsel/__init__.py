"""ckptsel: which checkpoint of an SFT run to keep, and what the validation data buys.

The front door: the names a user calls, served lazily (``import ckptsel`` loads none of the
stages; the first use of a name imports its stage):

* the analysis of a study: :func:`analyze`, :func:`verify` (``ckptsel analyze``/``verify``);
* one run: :func:`select_checkpoint`, :func:`select_all`, :func:`compare_checkpoints`,
  :func:`plan_from_pilot`, :func:`compare_logs` (``select``, ``compare``, ``plan``,
  ``compare-logs``);
* measuring: :func:`measure_model` (a model in memory), :func:`measure_run` (a run folder),
  :class:`MeasureConfig`;
* a study, a simulation, the quickstart, a task: :func:`load_study`, :func:`write_simulation`,
  :func:`run_quickstart`, :func:`register_task`;
* the results: :class:`Summary`, :class:`Estimate`, :class:`Selection`, :class:`StudySelection`;
* the Trainer callbacks: :class:`RecordingCallback`, :class:`SelectionCallback` (importing them
  imports ``transformers``);
* the errors: :class:`CkptselError` (bad input), :class:`VerificationError`.

Everything else lives in its stage, one package per stage in the order data flows
(ARCHITECTURE.md): ``records`` (the contract), ``data``, ``study``, ``train``, ``measure``,
``ingest``, ``choose``, ``results``, ``stats``, ``report``, ``trackers``, ``workflows``, ``sim``,
``integrations``, ``cli``. The analysis (``records``, ``choose``, ``stats``) is pure NumPy and
never imports torch. "SPEC §N" in the code is section N of the specification in this
repository's docs (``docs/reference/specification.md``).
"""

import importlib

from ckptsel._util.blas import pin_kernels

pin_kernels()  # before numpy/torch load: the same float results on every x86-64 CPU (_util/blas.py)

__version__ = "0.1.0"

# name -> the package that serves it (imported on first use; tests/project/test_exports.py reads this)
_EXPORTS: dict[str, str] = {
    "analyze": "ckptsel.workflows",
    "verify": "ckptsel.workflows",
    "select_checkpoint": "ckptsel.workflows",
    "select_all": "ckptsel.workflows",
    "compare_checkpoints": "ckptsel.workflows",
    "plan_from_pilot": "ckptsel.workflows",
    "compare_logs": "ckptsel.workflows",
    "measure_model": "ckptsel.measure",
    "measure_run": "ckptsel.measure",
    "MeasureConfig": "ckptsel.measure",
    "load_study": "ckptsel.study",
    "write_simulation": "ckptsel.sim",
    "run_quickstart": "ckptsel.sim",
    "register_task": "ckptsel.data",
    "Summary": "ckptsel.results",
    "Estimate": "ckptsel.results",
    "Selection": "ckptsel.workflows",
    "StudySelection": "ckptsel.workflows",
    "RecordingCallback": "ckptsel.integrations",
    "SelectionCallback": "ckptsel.integrations",
    "CkptselError": "ckptsel.errors",
    "VerificationError": "ckptsel.errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """A front-door name, imported from its stage on first use (then cached here)."""
    home = _EXPORTS.get(name)
    if home is None:
        raise AttributeError(f"module 'ckptsel' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
