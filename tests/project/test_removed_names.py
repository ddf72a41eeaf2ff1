"""What 0.1.0 no longer carries (issue 49): the old module names of the reorganisation are gone,
and ``import ckptsel`` installs no import hook."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# a few of the module names the package had before its one-package-per-stage layout
OLD_MODULES = (
    "ckptsel.answers",
    "ckptsel.select",
    "ckptsel.pipeline",
    "ckptsel.analysis.bootstrap",
    "ckptsel.records.read",
    "ckptsel.measure.runner",
)


def _hooks_after(code: str) -> None:
    """Run ``code`` in a fresh interpreter and fail if it changed ``sys.meta_path`` or
    ``sys.path_hooks``."""
    check = (
        "import sys\n"
        "finders, hooks = list(sys.meta_path), list(sys.path_hooks)\n"
        f"{code}\n"
        "assert sys.meta_path == finders, (finders, sys.meta_path)\n"
        "assert sys.path_hooks == hooks, (hooks, sys.path_hooks)\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_import_ckptsel_installs_no_import_hook():
    _hooks_after("import ckptsel")


def test_nor_does_a_stage_beyond_what_its_dependencies_install():
    # third-party packages may add their own finders (six does): import them first, then check
    # that ckptsel's stages add none of their own
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ckptsel.measure, ckptsel.workflows, ckptsel.study\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} - {'ckptsel'})))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    first = "".join(f"try:\n    import {m}\nexcept Exception:\n    pass\n" for m in listed if m.isidentifier() and not m.startswith("_"))
    subprocess.run(
        [
            sys.executable,
            "-c",
            first + "import sys\n"
            "finders, hooks = list(sys.meta_path), list(sys.path_hooks)\n"
            "import ckptsel.measure, ckptsel.workflows, ckptsel.study\n"
            "mine = [f for f in sys.meta_path if f not in finders]\n"
            "assert not mine, mine\n"
            "assert sys.path_hooks == hooks, (hooks, sys.path_hooks)\n",
        ],
        check=True,
    )


@pytest.mark.parametrize("old", OLD_MODULES)
def test_an_old_module_name_is_not_found(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_a_name_that_left_a_package_is_an_attribute_error():
    import ckptsel.measure as measure
    import ckptsel.train as train
    import ckptsel.train.checkpoints as checkpoints

    assert checkpoints.discover_checkpoints  # its home
    with pytest.raises(AttributeError):
        measure.discover_checkpoints  # noqa: B018
    with pytest.raises(AttributeError):
        train.discover_checkpoints  # noqa: B018
    with pytest.raises(AttributeError):
        measure.no_such_name  # noqa: B018


def test_the_public_api_of_today_works_without_warnings():
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "from ckptsel.data.scoring import is_correct\n"
        "from ckptsel.records.load import load_validation, load_test\n"
        "from ckptsel.records.scan import read_rows\n"
        "from ckptsel.records.store import write_unit\n"
        "from ckptsel.measure import MeasureConfig, measure_model, measure_run\n"
        "from ckptsel.workflows import analyze, select_checkpoint\n"
        "assert is_correct('gsm8k', 'The answer is 4', '4')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
