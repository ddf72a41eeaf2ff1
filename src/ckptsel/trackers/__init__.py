"""Experiment trackers: a results folder (and a recommendation) logged to MLflow, Weights & Biases
or Trackio, and the recommended checkpoint registered there. Each tool's package is optional
(``pip install 'ckptsel[mlflow]'``, ``[wandb]``, ``[trackio]``) and imported only when used.

* :mod:`~ckptsel.trackers.base` — what is logged, whatever the tool (:class:`Payload`: metric
  names, settings and provenance, tables, files; :class:`Registration`; :class:`LogTarget`);
* :mod:`~ckptsel.trackers.mlflow`, :mod:`~ckptsel.trackers.wandb`,
  :mod:`~ckptsel.trackers.trackio` — each tool's calls;
* :mod:`~ckptsel.trackers.log` — :func:`log_results`, to several tools at once.

It sits after ``report`` (it reads results folders through ``ckptsel.results`` and
``ckptsel.report``) and before ``workflows``, whose ``analyze``/``select``/``run`` log through it.
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
