"""Template files, chat-template arguments and ``prompt_format.json`` as hard as the other
surfaces (issues 45 and 48): every hostile template — runtime errors that are not Jinja's own,
include/import/extends, huge ranges, strings and numbers, loops that would hang, an empty or a
constant template, one that fails only on a real item — is one line naming the template (and
the item), through ``tasks show`` and before ``measure`` loads a model; reserved chat-template
arguments are refused; the run folder's ``prompt_format.json`` is held to the command line's
rules (and nested too deep is one line, not a RecursionError); a mix of prompt formats in one
trajectory spells out what differs and is not called an engine mix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clirun import run_cli

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytestmark = pytest.mark.usefixtures("one_thread")

from tinyrun import CHAT_TEMPLATE, build_tiny_run, make_gsm8k_rows, write_jsonl  # noqa: E402

DEEP = 20_000  # nesting that overflows Python's recursion limit in a naive reader
# sizes just over the limits (not 10**9): without the limits they render, not exhaust memory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny LoRA run (one checkpoint) whose base tokenizer has a chat template, and a copy
    of its base whose chat template renders the same text for every item (--base COPY)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("hostile")
    run = build_tiny_run(root, steps=(10,), n_validation=4, n_test=3)
    tok = AutoTokenizer.from_pretrained(str(run.base))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(run.base))
    constant = root / "constant-base"
    shutil.copytree(run.base, constant)
    tok.chat_template = "{% if add_generation_prompt %}Assistant:{% endif %}"
    tok.save_pretrained(str(constant))
    return {"run": run, "constant_base": constant, "root": root}


@pytest.fixture()
def loads(monkeypatch):
    """How many models were loaded (from_pretrained on a causal LM class)."""
    from transformers import AutoModelForCausalLM

    count = {"n": 0}
    original = AutoModelForCausalLM.from_pretrained

    def counting(*args, **kwargs):
        count["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", counting)
    return count


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _one_line_refusal(code: int, said: str, *needles: str) -> None:
    lines = [ln for ln in said.strip().splitlines() if ln.strip()]
    assert code == 2, said
    assert len(lines) == 1, said
    assert "Traceback" not in said, said
    for needle in needles:
        assert needle in said, (needle, said)


# ---------------------------------------------------------------------- template files

TEMPLATES = {
    "zero-division": ("{{ prompt }}{{ 1 // 0 }}", "ZeroDivisionError"),
    "include": ("{% include 'other.jinja' %}{{ prompt }}", "{% include %} is not allowed"),
    "import": ("{% import 'macros.jinja' as m %}{{ prompt }}", "{% import %} is not allowed"),
    "from-import": ("{% from 'm.jinja' import f %}{{ prompt }}", "is not allowed"),
    "extends": ("{% extends 'base.jinja' %}{{ prompt }}", "{% extends %} is not allowed"),
    "huge-range": ("{{ prompt }}{% for i in range(10**9) %}.{% endfor %}", "at most 100000"),
    "huge-string": ("{{ prompt }}{{ 'x' * 10**7 }}", "repeated"),
    "huge-power": ("{{ prompt }}{{ 2 ** 10000000 }}", "too large"),
    "huge-width": ("{{ prompt|center(10000000) }}", "filter center"),
    "huge-format": ("{{ '{:>10000000}'.format(prompt) }}", "width"),
    "huge-percent": ("{{ '%10000000s' % prompt }}", "width"),
    "hanging-loops": (
        "{% set r = range(3000)|list %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}{{ prompt }}",
        "loop iterations",
    ),
    "doubling": ("{% set a = prompt %}" + "{% set a = a ~ a %}" * 15 + "{{ a }}", "'~'"),
    "output-flood": ("{% for i in range(100000) %}{{ prompt }}{% endfor %}", "characters of output"),
    "recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ prompt }}{{ f(0) }}", "recursion"),
    "deep-parens": ("{{ " + "(" * DEEP + "prompt" + ")" * DEEP + " }}", "nested too deeply"),
    "escape": ("{{ prompt.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    "empty": ("", "is empty"),
    "blank": ("  \n\n", "is empty"),
    "constant": ("Answer the question.\n", "never uses {{ prompt }}"),
    "lipsum": ("{{ prompt }}{{ lipsum(1000) }}", "lipsum"),
    "sandbox-names": ("{% set ckptsel_loop = none %}{{ prompt }}", "ckptsel_loop"),
    "too-long": ("{{ prompt }}" + "x" * 200_000, "characters (at most"),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_hostile_template_file_is_one_line_in_tasks_show(name, tmp_path, capsys):
    text, needle = TEMPLATES[name]
    template = tmp_path / f"{name}.jinja"
    template.write_text(text, encoding="utf-8")
    items = write_jsonl(tmp_path / "items.jsonl", make_gsm8k_rows(2))
    before = _listing(tmp_path)
    code, said = run_cli(["tasks", "show", "gsm8k", "--items", items, "--prompt-format", template], capsys)
    _one_line_refusal(code, said, f"{name}.jinja", needle)
    assert _listing(tmp_path) == before


def test_a_template_file_not_utf8_is_one_line(tmp_path, capsys):
    template = tmp_path / "latin.jinja"
    template.write_bytes(b"\xff\xfe{{ prompt }}\x80")
    code, said = run_cli(["tasks", "show", "gsm8k", "--prompt-format", template], capsys)
    _one_line_refusal(code, said, "latin.jinja", "cannot read")


# ---------------------------------------------------------------------- template arguments

ARGS = {
    "chat_template": ('{"chat_template": "{{ messages }}"}', "'chat_template'"),
    "tokenize": ('{"tokenize": true}', "'tokenize'"),
    "add_generation_prompt": ('{"add_generation_prompt": false}', "'add_generation_prompt'"),
    "messages": ('{"messages": []}', "'messages'"),
    "continue_final_message": ('{"continue_final_message": true}', "'continue_final_message'"),
    "return_dict": ('{"return_dict": true}', "'return_dict'"),
    "nan": ('{"temperature": NaN}', "not JSON"),
    "deep": ('{"a": ' + "[" * DEEP + "]" * DEEP + "}", "nested"),
    "huge": ('{"a": "' + "x" * 100_000 + '"}', "characters of JSON"),
}


@pytest.mark.parametrize("name", sorted(ARGS))
def test_reserved_or_hostile_chat_template_args_are_refused(name, tiny, tmp_path, capsys):
    text, needle = ARGS[name]
    items = write_jsonl(tmp_path / "items.jsonl", make_gsm8k_rows(2))
    code, said = run_cli(
        [
            "tasks",
            "show",
            "gsm8k",
            "--items",
            items,
            "--prompt-format",
            "chat",
            "--tokenizer",
            tiny["run"].base,
            "--chat-template-args",
            text,
        ],
        capsys,
    )
    _one_line_refusal(code, said, "--chat-template-args", needle)


# ---------------------------------------------------------------------- measure: before the model


def _measure(tiny, out: Path, *extra, run_dir: Path | None = None, capsys):
    run = tiny["run"]
    return run_cli(
        [
            "measure",
            run_dir or run.run_dir,
            "--task",
            "gsm8k",
            "--validation",
            run.validation,
            "--test",
            run.test,
            "--out",
            out,
            "--max-new-tokens",
            4,
            "--batch-size",
            4,
            "--no-progress",
            *extra,
        ],
        capsys,
    )


def _copy_run(tiny, tmp_path: Path, blob=None, raw: str | None = None) -> Path:
    run_dir = tmp_path / "run-a"
    shutil.copytree(tiny["run"].run_dir, run_dir)
    if blob is not None or raw is not None:
        text = raw if raw is not None else json.dumps(blob)
        (run_dir / "prompt_format.json").write_text(text, encoding="utf-8")
    return run_dir


def test_a_template_that_fails_on_one_real_item_is_refused_before_the_model(tiny, tmp_path, loads, capsys):
    template = tmp_path / "picky.jinja"
    template.write_text("{% if id == 'gsm8k-2' %}{{ 1 // 0 }}{% endif %}Q: {{ prompt }}\nA:")
    out = tmp_path / "records"
    code, said = _measure(tiny, out, "--prompt-format", template, capsys=capsys)
    _one_line_refusal(code, said, "picky.jinja", "item 'gsm8k-2'", "ZeroDivisionError")
    assert loads["n"] == 0 and not out.exists()


def test_a_template_whose_prompts_do_not_depend_on_the_item_is_refused(tiny, tmp_path, loads, capsys):
    template = tmp_path / "blind.jinja"
    template.write_text("Solve it.{{ prompt[:0] }}\nA:")
    out = tmp_path / "records"
    code, said = _measure(tiny, out, "--prompt-format", template, capsys=capsys)
    _one_line_refusal(code, said, "blind.jinja", "render the same prompt")
    assert loads["n"] == 0 and not out.exists()


def test_a_chat_template_that_drops_the_question_is_refused(tiny, tmp_path, loads, capsys):
    out = tmp_path / "records"
    code, said = _measure(tiny, out, "--prompt-format", "chat", "--base", tiny["constant_base"], capsys=capsys)
    _one_line_refusal(code, said, "the tokenizer's chat template", "render the same prompt")
    assert loads["n"] == 0 and not out.exists()


RECORDS = {
    "alpaca-with-system": ({"prompt_format": "alpaca", "system_prompt": "Be brief."}, "'system_prompt' needs"),
    "alpaca-with-args": ({"prompt_format": "alpaca", "chat_template_args": {"x": 1}}, "'chat_template_args' needs"),
    "system-not-text": ({"prompt_format": "chat", "system_prompt": 5}, "must be text"),
    "system-a-list": ({"prompt_format": "chat", "system_prompt": ["a"]}, "must be text"),
    "template-missing": ({"prompt_format": "qa.jinja"}, "needs 'template'"),
    "template-not-text": ({"prompt_format": "qa.jinja", "template": 3}, "needs 'template'"),
    "template-with-args": ({"prompt_format": "qa.jinja", "template": "Q: {{ prompt }}", "chat_template_args": {"x": 1}}, "chat only"),
    "template-include": ({"prompt_format": "qa.jinja", "template": "{% include 'x' %}{{ prompt }}"}, "'template'"),
    "template-empty": ({"prompt_format": "qa.jinja", "template": ""}, "is empty"),
    "template-constant": ({"prompt_format": "qa.jinja", "template": "Hi"}, "never uses"),
    "chat-with-template": ({"prompt_format": "chat", "template": "{{ prompt }}"}, "only for a template file"),
    "reserved-arg": ({"prompt_format": "chat", "chat_template_args": {"chat_template": "x"}}, "'chat_template'"),
    "unknown-key": ({"prompt_format": "chat", "systm_prompt": "Be brief."}, "'systm_prompt'"),
    "empty-kind": ({"prompt_format": "  "}, "'prompt_format' is empty"),
    "not-an-object": ([1, 2], 'its text under "template"'),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_run_folder_format_is_held_to_the_command_line_rules(name, tiny, tmp_path, loads, capsys):
    blob, needle = RECORDS[name]
    run_dir = _copy_run(tiny, tmp_path, blob)
    before = _listing(run_dir)
    out = tmp_path / "records"
    code, said = _measure(tiny, out, run_dir=run_dir, capsys=capsys)
    _one_line_refusal(code, said, "prompt_format.json", needle)
    assert loads["n"] == 0 and not out.exists() and _listing(run_dir) == before


@pytest.mark.parametrize(
    "raw, needle",
    [
        ('{"prompt_format": "chat", "chat_template_args": {"a": ' + "[" * DEEP + "]" * DEEP + "}}", "nested too deeply"),
        ('{"prompt_format": "chat", "chat_template_args": {"a": NaN}}', "NaN"),
        ('{"prompt_format": "chat", "chat_template_args": {"a": [[[[[[[[[1]]]]]]]]]}}', "nested"),
    ],
    ids=["recursion", "nan", "deeper-than-8"],
)
def test_a_hostile_prompt_format_json_is_one_line(raw, needle, tiny, tmp_path, loads, capsys):
    run_dir = _copy_run(tiny, tmp_path, raw=raw)
    out = tmp_path / "records"
    code, said = _measure(tiny, out, run_dir=run_dir, capsys=capsys)
    _one_line_refusal(code, said, "prompt_format.json", needle)
    assert loads["n"] == 0 and not out.exists()


def test_the_no_format_refusal_names_the_system_prompt_and_the_file(tiny, tmp_path, loads, capsys):
    out = tmp_path / "records"
    code, said = _measure(tiny, out, capsys=capsys)
    _one_line_refusal(code, said, "--prompt-format chat", "--system-prompt", "--chat-template-args", "prompt_format.json")
    assert loads["n"] == 0 and not out.exists()


def test_a_stated_format_that_forgets_the_run_folder_system_prompt_says_so(tiny, tmp_path, loads, capsys):
    run_dir = _copy_run(tiny, tmp_path, {"prompt_format": "chat", "system_prompt": "Be brief."})
    out = tmp_path / "records"
    code, said = _measure(tiny, out, "--prompt-format", "chat", run_dir=run_dir, capsys=capsys)
    _one_line_refusal(code, said, "differ in system prompt", "'Be brief.'")
    assert loads["n"] == 0 and not out.exists()


def test_a_forgotten_system_prompt_is_a_format_mix_spelled_out_not_an_engine_mix(tiny, tmp_path, loads, capsys):
    from ckptsel.records.scan import read_frame

    out = tmp_path / "records"
    system = "You are a careful assistant. Think step by step, then give the final number."
    code, said = _measure(tiny, out, "--prompt-format", "chat", "--system-prompt", system, capsys=capsys)
    assert code == 0, said
    assert loads["n"] >= 1  # the counter sees a model load (the refusals above saw none)
    loads["n"] = 0
    before = read_frame(out, "generations")
    listing = _listing(out)
    code, said = _measure(tiny, out, "--prompt-format", "chat", capsys=capsys)
    _one_line_refusal(
        code,
        said,
        "another prompt format",
        "system prompt (this run: none; the records: 'You are a careful",
        "refusing to mix prompt formats",
    )
    assert "engine" not in said and "--allow-mixed-engines" not in said
    assert loads["n"] == 0
    assert read_frame(out, "generations").equals(before) and _listing(out) == listing
