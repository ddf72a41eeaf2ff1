"""Prompt formats: how an item's prompt becomes the text and tokens a model sees, at training,
generation and NLL time alike (the same :class:`PromptFormat` serves all three).

The format sits beside the task, not inside it (as lm-evaluation-harness's
``--apply_chat_template`` sits beside its task files): a task says which field is the prompt and
how the answer is scored; the format says how the prompt is wrapped.

``alpaca``
    ckptsel's default, the Alpaca no-input prompt (:data:`ckptsel.data.PROMPT_TEMPLATE`)::

        Below is an instruction that describes a task. Write a response that appropriately
        completes the request.

        ### Instruction:
        {instruction}

        ### Response:

    tokenized with the tokenizer's own special tokens (e.g. BOS); the scored response is the
    response's tokens (no special tokens) followed by EOS.
``chat``
    The checkpoint's own tokenizer's chat template (``tokenizer.apply_chat_template``): an
    optional system turn (``system_prompt``), one user turn holding the prompt, and the
    generation prompt; ``template_args`` go to the template (e.g. Qwen3's
    ``{"enable_thinking": false}``). The prompt tokens are exactly
    ``apply_chat_template(messages, add_generation_prompt=True, tokenize=True)``; the scored
    response is what the template renders after them for the conversation that ends with the
    response as the assistant turn (its end-of-turn tokens included) — the completion trl's
    ``SFTTrainer`` trains on for conversational prompt–completion data.
a template file
    A Jinja template over the item's fields (``prompt``, ``id``, ``group``, ``stratum``, and
    ``system`` from ``system_prompt``), rendered and tokenized like ``alpaca`` (special tokens
    added by the tokenizer; response + EOS scored). The reference answer and the response are
    not offered to the template.

A format has an :attr:`PromptFormat.identity` — ``alpaca``, ``chat[<sha of template, system
prompt, arguments>]``, ``template[<sha>]`` — that enters the measurement fingerprints and the
records' provenance, so records made under two formats never mix silently. Records made
before formats existed read as ``alpaca``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel.data.tasks import format_prompt
from ckptsel.errors import CkptselError

ALPACA = "alpaca"
CHAT = "chat"
TEMPLATE = "template"
FORMAT_FILE = "prompt_format.json"  # in a run folder: the format its checkpoints were trained with
FORMAT_CHOICES = "--prompt-format chat (the tokenizer's chat template), alpaca (ckptsel's Alpaca prompt) or a template file"


def _sha(blob: Any) -> str:
    text = blob if isinstance(blob, str) else json.dumps(blob, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def template_args_json(args: Any, where: str = "--chat-template-args") -> str:
    """Chat-template arguments as canonical JSON text (``""`` for none); ``args`` is a dict or
    JSON object text; anything else is refused in one line naming ``where``."""
    if args in (None, "", {}):
        return ""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise CkptselError(f"{where}: not JSON ({exc.msg}): {args!r}") from None
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise CkptselError(f"{where}: must be a JSON object of named arguments, got {args!r}")
    return json.dumps(args, sort_keys=True, separators=(",", ":")) if args else ""


@dataclass(frozen=True)
class PromptFormat:
    """One prompt format (module doc): ``kind`` ``alpaca`` | ``chat`` | ``template``.

    ``system_prompt``: the system turn (chat) or the template's ``system``; ``template_args``:
    the chat template's arguments as canonical JSON text; ``template``: a template file's text
    (``source``: where it came from, for messages); ``chat_template``: the tokenizer's chat
    template, once known (it names :attr:`identity`)."""

    kind: str = ALPACA
    system_prompt: str | None = None
    template_args: str = ""
    template: str = field(default="", repr=False)
    source: str = ""
    chat_template: str = field(default="", repr=False)

    @property
    def identity(self) -> str:
        """What names the format in fingerprints and provenance (module doc)."""
        if self.kind == ALPACA:
            return ALPACA
        if self.kind == CHAT:
            return f"chat[{_sha([self.chat_template, self.system_prompt, self.template_args])}]"
        return f"template[{_sha([self.template, self.system_prompt])}]"

    def describe(self) -> str:
        """The format in words, e.g. ``chat template (tokenizer's, sha 3fa2…), system prompt``."""
        if self.kind == ALPACA:
            return "alpaca (ckptsel's Alpaca prompt)"
        extra = [f"system prompt {self.system_prompt!r}"] if self.system_prompt else []
        extra += [f"template arguments {self.template_args}"] if self.template_args else []
        if self.kind == CHAT:
            head = f"chat (the tokenizer's chat template, {self.identity})"
        else:
            head = f"template file {self.source} ({self.identity})"
        return ", ".join([head, *extra])

    def with_tokenizer(self, tokenizer: Any, where: str = "the tokenizer") -> PromptFormat:
        """This format bound to ``tokenizer``'s chat template (chat only; a tokenizer without
        one is refused in one line)."""
        if self.kind != CHAT:
            return self
        template = chat_template_of(tokenizer)
        if not template:
            raise CkptselError(
                f"{where} has no chat template; --prompt-format chat needs one (use alpaca or "
                "a template file)"
            )
        if template == self.chat_template:
            return self
        return PromptFormat(CHAT, self.system_prompt, self.template_args, chat_template=template)

    # ------------------------------------------------------------------ text

    def render(self, instruction: str, item: Any = None, tokenizer: Any = None) -> str:
        """The prompt text the model sees for ``instruction`` (``item``: its other fields, for a
        template file; ``tokenizer``: the chat template's owner, for chat)."""
        return self.render_many([instruction], [item], tokenizer)[0]

    def render_many(
        self, instructions: Sequence[str], items: Sequence[Any] | None = None, tokenizer: Any = None
    ) -> list[str]:
        """:meth:`render` of each instruction."""
        if self.kind == ALPACA:
            return [format_prompt(i) for i in instructions]
        if self.kind == TEMPLATE:
            items = items if items is not None else [None] * len(instructions)
            return [self._fill(i, it) for i, it in zip(instructions, items, strict=True)]
        if tokenizer is None:
            raise CkptselError("--prompt-format chat: a tokenizer is needed to render the prompt")
        return [
            self._chat_text(tokenizer, self._messages(i), generation_prompt=True)
            for i in instructions
        ]

    def _fill(self, instruction: str, item: Any) -> str:
        return _render_template(self.template, self.source, {
            "prompt": instruction, "instruction": instruction,
            "id": getattr(item, "item_id", ""), "group": getattr(item, "group", ""),
            "stratum": getattr(item, "subtask", ""), "system": self.system_prompt or "",
        })  # fmt: skip

    def _messages(self, instruction: str, response: str | None = None) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": instruction})
        if response is not None:
            messages.append({"role": "assistant", "content": response})
        return messages

    def _chat_text(
        self, tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool
    ) -> str:
        args = json.loads(self.template_args) if self.template_args else {}
        try:
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt, **args
            )
        except Exception as exc:  # a template's own error (raise_exception, a missing role)
            raise CkptselError(f"the chat template failed on an item: {exc}") from None
        if not isinstance(text, str):
            raise CkptselError("the chat template did not render text")
        return text

    # ------------------------------------------------------------------ tokens

    def encode(
        self, tokenizer: Any, instructions: Sequence[str], responses: Sequence[str] | None = None,
        items: Sequence[Any] | None = None,
    ) -> tuple[list[list[int]], list[list[int]] | None]:  # fmt: skip
        """``(prompt_ids, response_ids)`` of each item: the tokens the model is fed before it
        answers, and the scored response tokens that follow them (its end included: EOS for
        alpaca and template files, the template's end of turn for chat). ``responses=None``:
        prompts only."""
        texts = self.render_many(instructions, items, tokenizer)
        prompts = self.encode_prompts(tokenizer, texts)
        if responses is None:
            return prompts, None
        return prompts, self.encode_responses(tokenizer, instructions, responses, prompts)

    def encode_prompts(self, tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts (:meth:`render_many`): with the tokenizer's special
        tokens (e.g. BOS), except for chat, whose template writes its own."""
        if not texts:
            return []
        ids = tokenizer(list(texts), add_special_tokens=self.kind != CHAT)["input_ids"]
        return [list(p) for p in ids]

    def encode_responses(
        self, tokenizer: Any, instructions: Sequence[str], responses: Sequence[str],
        prompts: Sequence[list[int]],
    ) -> list[list[int]]:  # fmt: skip
        """The scored tokens of each response, after its prompt's ids ``prompts``: the
        response's tokens then EOS (alpaca, template files), or the chat template's
        continuation (module doc)."""
        if not responses:
            return []
        if self.kind == CHAT:
            return self._chat_responses(tokenizer, instructions, responses, prompts)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise CkptselError("the tokenizer has no EOS token; cannot mark a response's end")
        ids = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
        return [[*r, int(eos)] for r in ids]

    def _chat_responses(
        self, tokenizer: Any, instructions: Sequence[str], responses: Sequence[str],
        prompts: Sequence[list[int]],
    ) -> list[list[int]]:  # fmt: skip
        """The template's continuation after each prompt for the conversation ending in its
        response, as trl's ``SFTTrainer`` cuts it (a template that renders the prompt
        differently when the answer follows is refused: the NLL would score tokens after a
        context the model was not trained on)."""
        full = [
            self._chat_text(tokenizer, self._messages(i, r), generation_prompt=False)
            for i, r in zip(instructions, responses, strict=True)
        ]
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        out = []
        for k, (p, f) in enumerate(zip(prompts, full_ids, strict=True)):
            f = list(f)
            if f[: len(p)] != list(p) or len(f) == len(p):
                raise CkptselError(
                    f"the chat template does not render item {k}'s prompt as the start of its "
                    "prompt + response (tokens merge across the boundary, or the template "
                    "rewrites the turn): its response cannot be scored as trained; use a "
                    "template file or alpaca"
                )
            out.append(f[len(p) :])
        return out

    def to_dict(self) -> dict[str, Any]:
        """What a run folder records (:data:`FORMAT_FILE`) and ``run.json`` says."""
        out: dict[str, Any] = {"prompt_format": self.kind if self.kind != TEMPLATE else self.source}
        if self.system_prompt:
            out["system_prompt"] = self.system_prompt
        if self.template_args:
            out["chat_template_args"] = json.loads(self.template_args)
        if self.kind == TEMPLATE:
            out["template"] = self.template
        out["identity"] = self.identity
        return out


def _render_template(template: str, source: str, values: dict[str, Any]) -> str:
    from jinja2 import StrictUndefined, TemplateError
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    try:
        return env.from_string(template).render(**values)
    except TemplateError as exc:
        raise CkptselError(f"{source}: prompt template: {exc}") from None


def chat_template_of(tokenizer: Any) -> str:
    """The tokenizer's chat template text (``""`` when it has none; a named set of templates is
    its ``default`` one, as ``apply_chat_template`` picks)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) else ""


def prompt_format(
    spec: str | None = None, system_prompt: str | None = None, template_args: Any = None,
) -> PromptFormat:  # fmt: skip
    """The :class:`PromptFormat` of ``--prompt-format`` (``alpaca``, ``chat`` or a template
    file's path; ``None``: alpaca), ``--system-prompt`` and ``--chat-template-args``; bad values
    are refused in one line."""
    args = template_args_json(template_args)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise CkptselError(f"--system-prompt must be text, not {system_prompt!r}")
    system_prompt = system_prompt or None
    spec = ALPACA if spec is None else spec
    if not isinstance(spec, str) or not spec.strip():
        raise CkptselError(f"--prompt-format must be alpaca, chat or a template file, not {spec!r}")
    if spec == ALPACA:
        if system_prompt or args:
            raise CkptselError(
                "--system-prompt and --chat-template-args need --prompt-format chat or a "
                "template file (the Alpaca prompt has no system turn)"
            )
        return PromptFormat()
    if spec == CHAT:
        return PromptFormat(CHAT, system_prompt, args)
    path = Path(spec)
    if not path.is_file():
        raise CkptselError(
            f"--prompt-format {spec!r}: not alpaca, chat, or a template file that exists"
        )
    if args:
        raise CkptselError("--chat-template-args apply to --prompt-format chat only")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CkptselError(f"{path}: cannot read the prompt template ({exc})") from None
    fmt = PromptFormat(TEMPLATE, system_prompt, template=text, source=str(path))
    fmt.render("check", None)  # a template that cannot render fails now, in one line
    return fmt


def format_from_dict(blob: Any, where: str) -> PromptFormat:
    """The format a run folder records (:meth:`PromptFormat.to_dict`), checked."""
    if not isinstance(blob, dict) or not isinstance(blob.get("prompt_format"), str):
        raise CkptselError(f"{where}: not a prompt format record (no 'prompt_format')")
    kind = blob["prompt_format"]
    args = template_args_json(blob.get("chat_template_args"), where)
    system = blob.get("system_prompt")
    if kind in (ALPACA, CHAT):
        return prompt_format(kind, system, args) if kind == CHAT else prompt_format(kind)
    text = blob.get("template")
    if not isinstance(text, str):
        raise CkptselError(f"{where}: a template format without its 'template' text")
    return PromptFormat(TEMPLATE, system or None, template=text, source=kind)


__all__ = [
    "ALPACA",
    "CHAT",
    "FORMAT_CHOICES",
    "FORMAT_FILE",
    "TEMPLATE",
    "PromptFormat",
    "chat_template_of",
    "format_from_dict",
    "prompt_format",
    "template_args_json",
]
