"""The part-file keys (the hashes in ``step-<n>.<key>.gen.parquet`` / ``.nll.parquet``) of
representative settings, pinned as literal hex strings.

Released records (0.1.0) are named by these keys: a key that changes makes every recorded part
file unreachable (measured again, silently), so these values must never change. They were
computed by the code before the measurement settings were split (issue 49, step 4), and that
code and today's must agree on every one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptsel.measure.config import MeasureConfig

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TEMPLATE_TEXT = "Question: {{ prompt }}\nAnswer:"
TASK_TEXT = """\
name = "firstword"
[fields]
prompt = "q"
response = "target"
reference = "gold"
id = "uid"
[answer]
extract = '^\\s*(\\S+)'
compare = "exact"
"""


class _Tokenizer:
    """Just what binding a chat format reads: the chat template."""

    chat_template = CHAT_TEMPLATE


# name -> (MeasureConfig keywords, bind to the chat tokenizer?, (generations key, nll key))
CASES: dict[str, tuple[dict, bool, tuple[str, str]]] = {
    "gsm8k defaults": ({"task": "gsm8k"}, False, ("cd169d982152dd5a", "afae559f5bd67562")),
    "gsm8k alpaca stated": ({"task": "gsm8k", "prompt_format": "alpaca"}, False, ("cd169d982152dd5a", "afae559f5bd67562")),
    "metamath, gsm8k test": ({"task": "metamath", "test_task": "gsm8k"}, False, ("88e74b90f9a25bd6", "3c78ac27dba75e8c")),
    "math500": ({"task": "math500"}, False, ("5245f1db23abc0a2", "ff863f8ddac95fec")),
    "boolq window 64": ({"task": "boolq", "window": 64}, False, ("2610edc45fbe7d78", "87bec0cb41265b3e")),
    "commonsense window 0": ({"task": "commonsense", "window": 0}, False, ("5eba303eed30599e", "75fe8150f135e649")),
    "gsm8k 256 tokens": ({"task": "gsm8k", "max_new_tokens": 256}, False, ("686cbb20854e6155", "afae559f5bd67562")),
    "gsm8k window 128": ({"task": "gsm8k", "window": 128}, False, ("cd169d982152dd5a", "f97b26d7a5816eb0")),
    "gsm8k batch 4, no swap, no check": (
        {
            "task": "gsm8k",
            "batch_size": 4,
            "swap_weights": False,
            "conformance_check": False,
            "max_loras": 2,
            "kv_cache_gib": 1.5,
            "only": "generation",
        },
        False,
        ("cd169d982152dd5a", "afae559f5bd67562"),
    ),
    "gsm8k vllm": ({"task": "gsm8k", "backend": "vllm"}, False, ("96f0850839e3df32", "0a0ac846ba856d1e")),
    "gsm8k vllm generates, hf scores": (
        {"task": "gsm8k", "backend": "vllm", "nll_backend": "hf"},
        False,
        ("96f0850839e3df32", "afae559f5bd67562"),
    ),
    "gsm8k hf generates, vllm scores": ({"task": "gsm8k", "nll_backend": "vllm"}, False, ("cd169d982152dd5a", "0a0ac846ba856d1e")),
    "gsm8k cpu float32": ({"task": "gsm8k", "dtype": "float32"}, False, ("cd169d982152dd5a", "afae559f5bd67562")),
    "gsm8k cpu bfloat16": ({"task": "gsm8k", "dtype": "bfloat16"}, False, ("6e789ee97b24e6ec", "b8375db512ef884b")),
    "gsm8k cuda auto": ({"task": "gsm8k", "device": "cuda", "check_here": False}, False, ("6759ddd78f207ca4", "55933428c1c104ff")),
    "gsm8k cuda:1 float16 vllm": (
        {"task": "gsm8k", "device": "cuda:1", "dtype": "float16", "backend": "vllm", "check_here": False},
        False,
        ("ebd2ca543648f534", "7c34dd76d4d6ab2d"),
    ),
    "gsm8k chat": ({"task": "gsm8k", "prompt_format": "chat"}, True, ("049a2750672a5fcb", "e9ed0fb13fe5874a")),
    "gsm8k chat, system prompt, arguments": (
        {"task": "gsm8k", "prompt_format": "chat", "system_prompt": "Be brief.", "chat_template_args": {"enable_thinking": False}},
        True,
        ("ef86af0b95393bd3", "97a2bcfa8b3d6efb"),
    ),
    "metamath chat, gsm8k test, window 32": (
        {"task": "metamath", "test_task": "gsm8k", "prompt_format": "chat", "window": 32},
        True,
        ("744d30c63362ce59", "3bb4d1864fb1afb4"),
    ),
    "gsm8k template file": ({"task": "gsm8k", "prompt_format": "TEMPLATE"}, False, ("ea529e5d2f5bc90d", "c246f40c03aa4cea")),
    "gsm8k template file, system prompt": (
        {"task": "gsm8k", "prompt_format": "TEMPLATE", "system_prompt": "Be brief."},
        False,
        ("4f2d5460007147b4", "4deca790b0aaf11c"),
    ),
    "task file": ({"task": "TASK"}, False, ("7806d49532a3c3f5", "750c0d9675871a5b")),
    "gsm8k, task file test": ({"task": "gsm8k", "test_task": "TASK"}, False, ("dba01691be14e468", "80c624698ad693c3")),
}


def _config(tmp_path: Path, kwargs: dict, bind: bool) -> MeasureConfig:
    kwargs = dict(kwargs)
    if kwargs.get("prompt_format") == "TEMPLATE":
        path = tmp_path / "prompt.jinja"
        path.write_text(TEMPLATE_TEXT + "\n", encoding="utf-8")
        kwargs["prompt_format"] = str(path)
    for key in ("task", "test_task"):
        if kwargs.get(key) == "TASK":
            path = tmp_path / "firstword.toml"
            path.write_text(TASK_TEXT, encoding="utf-8")
            kwargs[key] = str(path)
    cfg = MeasureConfig(**kwargs)
    return cfg.bind_format(_Tokenizer()) if bind else cfg


def _keys(cfg: MeasureConfig) -> tuple[str, str]:
    measured = getattr(cfg, "measured", None)
    if measured is not None and hasattr(measured, "part_key"):
        keys = measured.part_key("generations"), measured.part_key("nll")
        assert keys == (cfg.generation_fingerprint(), cfg.nll_fingerprint())
        return keys
    return cfg.generation_fingerprint(), cfg.nll_fingerprint()


@pytest.mark.parametrize("name", list(CASES))
def test_part_keys_never_change(name: str, tmp_path: Path) -> None:
    kwargs, bind, expected = CASES[name]
    assert _keys(_config(tmp_path, kwargs, bind)) == expected, name


def test_settings_that_change_nothing_measured_share_the_default_keys() -> None:
    same = ("gsm8k alpaca stated", "gsm8k batch 4, no swap, no check", "gsm8k cpu float32")
    assert {CASES[name][2] for name in same} == {CASES["gsm8k defaults"][2]}
    assert len({CASES[name][2] for name in CASES}) == len(CASES) - len(same)
