"""A study file's errors about a whole table (a key it lacks) name the line of its header."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptsel.errors import CkptselError
from ckptsel.study.spec import load_spec

EXTERNAL_ONLY = """# every configuration is existing runs, and [study] has no base_model
schema = 2
[study]
name = "external"
seeds = [1]

[[configurations]]
name = "a"
runs = "runs/a-*"
"""


def test_missing_base_model_names_the_study_line(tmp_path: Path) -> None:
    path = tmp_path / "study.toml"
    path.write_text(EXTERNAL_ONLY, encoding="utf-8")
    with pytest.raises(CkptselError) as err:
        load_spec(path)
    assert str(err.value).endswith("study.toml, line 3: [study]: needs 'base_model'")
