"""The old module names keep working for one release, with a DeprecationWarning (ckptsel._moved)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from ckptsel import _moved


def _fresh_import(name: str):
    """Import ``name`` as a first import would (its alias module, if any, made again)."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        if key in _moved.MOVED:
            del sys.modules[key]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


# old import -> (names it must still give, the new home of the first)
PUBLIC_API = {
    "ckptsel.answers": (["is_correct", "extract", "normalize_reference", "FAMILIES"], "ckptsel.data"),
    "ckptsel.select": (["select_checkpoint", "SelectSettings", "recommend"], "ckptsel.workflows"),
    "ckptsel.pipeline": (["analyze", "verify"], "ckptsel.workflows"),
    "ckptsel.compare": (["compare_checkpoints"], "ckptsel.workflows"),
    "ckptsel.plan": (["plan_from_pilot", "closed_form"], "ckptsel.workflows"),
    "ckptsel.tasks": (["load_items", "format_prompt", "register_task"], "ckptsel.data"),
    "ckptsel.records.read": (["load_validation", "load_test", "find_trajectory"], "ckptsel.records"),
    "ckptsel.records.write": (["write_unit", "upsert_records", "check_name"], "ckptsel.records"),
    "ckptsel.records.dataset": (["read_rows", "read_frame", "compact"], "ckptsel.records"),
    "ckptsel.analysis.bootstrap": (["percentile_interval", "resample_counts"], "ckptsel.stats"),
    "ckptsel.simulate": (["write_simulation", "norm_ppf"], "ckptsel.sim"),
}


@pytest.mark.parametrize("old", sorted(PUBLIC_API))
def test_an_old_name_gives_the_new_objects_with_a_warning(old):
    names, home = PUBLIC_API[old]
    module, warned = _fresh_import(old)
    assert any(f"{old} is deprecated" in str(w.message) for w in warned)
    new = importlib.import_module(home)
    for name in names:
        assert hasattr(module, name), f"{old}.{name} is gone"
    assert getattr(module, names[0]) is getattr(new, names[0])


def test_every_old_name_imports_and_every_new_home_exists():
    for old, homes in _moved.MOVED.items():
        for home in homes:
            importlib.import_module(home)
        module, warned = _fresh_import(old)
        assert warned, f"{old} imported without a DeprecationWarning"
        for was, now in _moved.RENAMED.get(old, {}).items():
            assert getattr(module, was) is getattr(module, now)


def test_the_public_api_of_today_works_from_the_new_homes_without_warnings():
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "from ckptsel.data import is_correct\n"
        "from ckptsel.records import load_validation, load_test, read_rows, write_unit\n"
        "from ckptsel.measure import MeasureConfig, measure_model, measure_run\n"
        "from ckptsel.workflows import analyze, select_checkpoint\n"
        "assert is_correct('gsm8k', 'The answer is 4', '4')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_moved_attribute_of_a_package_warns_and_an_unknown_one_fails():
    import ckptsel.measure as measure
    import ckptsel.train as train

    with pytest.warns(DeprecationWarning, match="ckptsel.train.discover_checkpoints"):
        assert measure.discover_checkpoints is train.discover_checkpoints
    with pytest.raises(AttributeError):
        measure.no_such_name  # noqa: B018


def test_real_modules_win_over_the_alias_finder():
    # the finder only answers the old names: a real module is never shadowed
    assert _moved._FINDER.find_spec("ckptsel.records.load", None) is None
    assert _moved._FINDER.find_spec("ckptsel.select", None) is not None
