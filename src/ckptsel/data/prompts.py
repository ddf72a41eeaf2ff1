"""Prompt formats: how an item's prompt becomes the text and tokens a model sees, at training,
generation and NLL time alike (the same :class:`PromptFormat` serves all three).

The format sits beside the task, not inside it (as lm-evaluation-harness's
``--apply_chat_template`` sits beside its task files): a task says which field is the prompt and
how the answer is scored; the format says how the prompt is wrapped.

``alpaca``
    ckptsel's default, the Alpaca no-input prompt (:data:`PROMPT_TEMPLATE`, :func:`format_prompt`)::

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
    ``system`` from ``system_prompt``), the file's one final newline (as editors save it)
    dropped, rendered and tokenized like ``alpaca`` (special tokens added by the tokenizer);
    the scored response is what a run trained on ``tokenizer(prompt + response)`` scores:
    prompt and response tokenized together, the tokens after the prompt's, then EOS. The
    reference answer and the response are not offered to the template.

The BOS (:attr:`PromptFormat.bos`, ``"bos"`` in ``prompt_format.json``): who wrote the run's
BOS — ``template`` (chat's default: ``apply_chat_template(tokenize=True)``, trl),
``tokenizer`` (alpaca's and a template file's default) or ``template+tokenizer``
(``tokenizer(apply_chat_template(..., tokenize=False))``: two when the template writes one).

A format has an :attr:`PromptFormat.identity` — ``alpaca``, ``chat[<sha of template, system
prompt, arguments>]``, ``template[<sha>];joint`` (``;bos=...`` after either when the BOS is
not the kind's default) — that enters the measurement fingerprints and the records'
provenance, so records made under two formats never mix silently. Records made before
formats existed read as ``alpaca``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

# every prompt template ckptsel writes lives in this module; the Alpaca no-input prompt is the
# default, and its text names the part files (ckptsel.measure.MeasureSpec.part_key): never edit it
PROMPT_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that "
    "appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)

ALPACA = "alpaca"
CHAT = "chat"
TEMPLATE = "template"
FORMAT_FILE = "prompt_format.json"  # in a run folder: the format its checkpoints were trained with
FORMAT_CHOICES = "--prompt-format chat (the tokenizer's chat template), alpaca (ckptsel's Alpaca prompt) or a template file"
# who wrote the BOS a run was trained with (PromptFormat.bos): the template (a chat template
# that writes {{ bos_token }}, tokenized as apply_chat_template(tokenize=True) does), the
# tokenizer's special tokens on the rendered text, or both (tokenizer(apply_chat_template(...,
# tokenize=False)), the hand-written path: two BOS when the template writes one)
BOS_CHOICES = ("template", "tokenizer", "template+tokenizer")


def format_prompt(instruction: str) -> str:
    """The Alpaca no-input prompt: the same text at training, generation and NLL time."""
    return PROMPT_TEMPLATE.format(instruction=instruction)


def _sha(blob: Any) -> str:
    text = blob if isinstance(blob, str) else json.dumps(blob, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened to about ``limit`` characters and a few levels (messages)."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlevel = limit, limit, 3
    return short.repr(value)


# arguments apply_chat_template takes for itself, or ckptsel sets: never a template argument
RESERVED_TEMPLATE_ARGS = frozenset(
    {
        "chat_template",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "messages",
        "conversation",
        "tools",
        "documents",
        "return_dict",
        "return_tensors",
        "return_assistant_tokens_mask",
        "padding",
        "truncation",
        "max_length",
        "tokenizer_kwargs",
        "processor_kwargs",
    }
)
MAX_ARGS_CHARS = 65_536  # --chat-template-args' JSON text


def _refuse_constant(text: str) -> None:
    raise ValueError(f"{text} is not a JSON number")


def template_args_json(args: Any, where: str = "--chat-template-args") -> str:
    """Chat-template arguments as canonical JSON text (``""`` for none); ``args`` is a dict or
    JSON object text; anything else — not JSON, not an object, NaN, nested too deep, too
    long, or a key ``apply_chat_template`` or ckptsel sets itself
    (:data:`RESERVED_TEMPLATE_ARGS`: ``chat_template`` would replace the tokenizer's
    template unsaid) — is refused in one line naming ``where``."""
    if args in (None, "", {}):
        return ""
    if isinstance(args, str):
        if len(args) > MAX_ARGS_CHARS:
            raise CkptselError(f"{where}: {len(args)} characters of JSON (at most {MAX_ARGS_CHARS})")
        try:
            args = json.loads(args, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise CkptselError(f"{where}: not JSON ({getattr(exc, 'msg', exc)}): {_short(args)}") from None
        except RecursionError:
            raise CkptselError(f"{where}: JSON nested too deeply") from None
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise CkptselError(f"{where}: must be a JSON object of named arguments, got {_short(args)}")
    reserved = sorted(k for k in args if k in RESERVED_TEMPLATE_ARGS)
    if reserved:
        raise CkptselError(
            f"{where}: {reserved[0]!r} is not a template argument ckptsel passes on "
            "(apply_chat_template's own, or set by ckptsel; the template is the tokenizer's — "
            "another template: --prompt-format FILE)"
        )
    if _depth(args) > MAX_FORMAT_DEPTH - 1:
        raise CkptselError(f"{where}: nested more than {MAX_FORMAT_DEPTH - 1} levels deep")
    try:
        text = json.dumps(args, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CkptselError(f"{where}: not JSON values ({exc})") from None
    return text if args else ""


TokenCache = dict[tuple[str, str], list[int]]  # (kind, text) -> token ids, for one tokenizer


def cached_ids(
    encode: Callable[[Sequence[str]], list[list[int]]], texts: Sequence[str], cache: TokenCache | None, kind: str
) -> list[list[int]]:
    """``encode(texts)``, through ``cache`` (keyed by ``(kind, text)``; each distinct text
    encoded once) when one is given; the lists returned are shared with the cache."""
    if cache is None:
        return encode(texts)
    todo = [t for t in dict.fromkeys(texts) if (kind, t) not in cache]
    if todo:
        cache.update(zip(((kind, t) for t in todo), encode(todo), strict=True))
    return [cache[(kind, t)] for t in texts]


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
    bos: str = ""  # one of BOS_CHOICES; "": not stated, the kind's default (bos_source)

    @property
    def identity(self) -> str:
        """What names the format in fingerprints and provenance (module doc)."""
        if self.kind == ALPACA:
            return ALPACA + self.tokens_tag
        if self.kind == CHAT:
            head = f"chat[{_sha([self.chat_template, self.system_prompt, self.template_args])}]"
            return head + self.tokens_tag
        return f"template[{_sha([self.template, self.system_prompt])}]" + self.tokens_tag

    def describe(self) -> str:
        """The format in words, e.g. ``chat template (tokenizer's, sha 3fa2…), system prompt``."""
        if self.kind == ALPACA:
            return "alpaca (ckptsel's Alpaca prompt)"
        extra = [f"system prompt {_short(self.system_prompt)}"] if self.system_prompt else []
        extra += [f"template arguments {self.template_args}"] if self.template_args else []
        extra += [f"BOS {self.bos_source}"] if self.bos else []
        if self.kind == CHAT:
            head = f"chat (the tokenizer's chat template, {self.identity})"
        else:
            head = f"template file {self.source} ({self.identity})"
        return ", ".join([head, *extra])

    def parts(self) -> dict[str, str]:
        """The format's parts in words (the system prompt shortened): what
        :meth:`differences` compares, and what ``measure`` remembers of a format it recorded."""
        if self.kind == ALPACA:
            return {"format": "alpaca"}
        parts = {"format": "chat" if self.kind == CHAT else "a template file"}
        if self.kind == CHAT:
            parts["chat template"] = f"sha {_sha(self.chat_template)}" if self.chat_template else "?"
        else:
            parts["template file"] = f"{self.source} (text sha {_sha(self.template)})"
        parts["system prompt"] = _short(self.system_prompt) if self.system_prompt else "none"
        if self.kind == CHAT:
            parts["template arguments"] = self.template_args or "none"
        if getattr(self, "bos", ""):
            parts["BOS"] = str(self.bos)
        return parts

    def differences(self, other: PromptFormat | dict[str, str], mine: str = "this run", theirs: str = "") -> str:
        """Where ``other`` (a format, or its :meth:`parts`) differs from this format, part by
        part, in words, e.g. ``system prompt (this run: none; the records: 'You are…')``;
        ``""`` when no part differs."""
        a, b = self.parts(), other if isinstance(other, dict) else other.parts()
        if a["format"] != b.get("format"):
            return f"the format ({mine}: {a['format']}; {theirs}: {b.get('format', '?')})"
        return ", ".join(
            f"{key} ({mine}: {a.get(key, 'none')}; {theirs}: {b.get(key, 'none')})"
            for key in dict.fromkeys([*a, *b])
            if a.get(key, "none") != b.get(key, "none")
        )

    def variant(self, identity: str) -> PromptFormat | None:
        """This format with its system prompt and/or template arguments dropped, or alpaca,
        if that is the format named ``identity`` (a forgotten ``--system-prompt``,
        recognised), else ``None``."""
        if identity == self.identity:
            return self
        if identity == ALPACA:
            return PromptFormat()
        for system in dict.fromkeys([self.system_prompt, None]):
            for args in dict.fromkeys([self.template_args, ""]):
                candidate = replace(self, system_prompt=system, template_args=args)
                if candidate.identity == identity:
                    return candidate
        return None

    def with_tokenizer(self, tokenizer: Any, where: str = "the tokenizer") -> PromptFormat:
        """This format bound to ``tokenizer``'s chat template (chat only; a tokenizer without
        one is refused in one line)."""
        if self.kind != CHAT:
            return self
        template = chat_template_of(tokenizer)
        if not template:
            raise CkptselError(f"{where} has no chat template; --prompt-format chat needs one (use alpaca or a template file)")
        if template == self.chat_template:
            return self
        return replace(self, chat_template=template)

    def check_tokenizer(self, tokenizer: Any, where: str) -> None:
        """Refuse, in one line naming ``where``, a ``tokenizer`` whose chat template is not the
        one this (bound) chat format was resolved with: a Ray worker's tokenizer that differs
        from the driver's, a trajectory measured with another run's tokenizer. Other formats
        do not depend on the tokenizer's template."""
        if self.kind == CHAT and self.chat_template and chat_template_of(tokenizer) != self.chat_template:
            raise CkptselError(
                f"{where}: its tokenizer's chat template is not the one the run was "
                f"resolved with ({self.identity}); measure each run with its own tokenizer"
            )

    # ------------------------------------------------------------------ BOS, tokenization

    @property
    def bos_source(self) -> str:
        """Who wrote the run's BOS (:data:`BOS_CHOICES`): the stated :attr:`bos`, else the
        kind's default: ``template`` for chat (``apply_chat_template(tokenize=True)``, trl's
        ``SFTTrainer``), ``tokenizer`` for alpaca and template files."""
        return self.bos or ("template" if self.kind == CHAT else "tokenizer")

    @property
    def adds_special_tokens(self) -> bool:
        """Whether the rendered text is tokenized with the tokenizer's special tokens."""
        return self.bos_source != "template"

    @property
    def tokens_tag(self) -> str:
        """What the tokenization adds to :attr:`identity`: ``;joint`` for a template file
        (prompt and response tokenized together, :meth:`encode_responses`), ``;bos=...`` for
        a BOS other than the kind's default; ``""`` otherwise (identities as before)."""
        tag = ";joint" if self.kind == TEMPLATE else ""
        default = "template" if self.kind == CHAT else "tokenizer"
        return tag + (f";bos={self.bos_source}" if self.bos_source != default else "")

    def with_bos(self, bos: Any, where: str = "bos") -> PromptFormat:
        """This format with its BOS stated (:data:`BOS_CHOICES`; ``None``/``""``: unstated);
        another value, ``tokenizer`` for chat (its template writes what it writes) or
        ``template+tokenizer`` for alpaca (its prompt writes no BOS) is refused in one line
        naming ``where``. ``template`` for alpaca or a template file: the text tokenized
        without the tokenizer's special tokens (no BOS but one the template writes)."""
        if bos in (None, ""):
            return replace(self, bos="")
        if not isinstance(bos, str) or bos not in BOS_CHOICES:
            shown = repr(bos) if len(repr(bos)) <= 60 else repr(bos)[:59] + "…"
            raise CkptselError(f"{where}: must be one of {', '.join(BOS_CHOICES)}, not {shown}")
        if self.kind == CHAT and bos == "tokenizer":
            raise CkptselError(
                f"{where}: a chat format's BOS is the template's (template) or the template's "
                "and then the tokenizer's (template+tokenizer), not 'tokenizer'"
            )
        if self.kind == ALPACA and bos == "template+tokenizer":
            raise CkptselError(
                f"{where}: the Alpaca prompt writes no BOS of its own: its BOS is the "
                "tokenizer's (tokenizer) or none (template), not 'template+tokenizer'"
            )
        return replace(self, bos=bos)

    def bos_note(self, tokenizer: Any) -> str:
        """A one-line warning when the BOS is not stated and the two usual ways of tokenizing
        a chat run differ for ``tokenizer`` (its chat template writes ``bos_token`` and the
        tokenizer adds BOS too: ``tokenizer(apply_chat_template(..., tokenize=False))`` gives
        two); ``""`` otherwise."""
        if self.kind != CHAT or self.bos or tokenizer is None:
            return ""
        text = getattr(tokenizer, "bos_token", None)
        writes = "bos_token" in self.chat_template or (isinstance(text, str) and bool(text) and text in self.chat_template)
        if not writes or not adds_bos(tokenizer):
            return ""
        return (
            "BOS assumed once, the chat template's (apply_chat_template(tokenize=True), trl's "
            "SFTTrainer); a run trained on tokenizer(apply_chat_template(..., tokenize=False)) "
            'had two: say which in the run folder\'s prompt_format.json, "bos": '
            '"template+tokenizer" (two) or "bos": "template" (one)'
        )

    # ------------------------------------------------------------------ text

    def render(self, instruction: str, item: Any = None, tokenizer: Any = None) -> str:
        """The prompt text the model sees for ``instruction`` (``item``: its other fields, for a
        template file; ``tokenizer``: the chat template's owner, for chat)."""
        return self.render_many([instruction], [item], tokenizer)[0]

    def render_many(self, instructions: Sequence[str], items: Sequence[Any] | None = None, tokenizer: Any = None) -> list[str]:
        """:meth:`render` of each instruction."""
        if self.kind == ALPACA:
            return [format_prompt(i) for i in instructions]
        if self.kind == TEMPLATE:
            items = items if items is not None else [None] * len(instructions)
            return [self._fill(i, it) for i, it in zip(instructions, items, strict=True)]
        if tokenizer is None:
            raise CkptselError("--prompt-format chat: a tokenizer is needed to render the prompt")
        return [self._chat_text(tokenizer, self._messages(i), generation_prompt=True) for i in instructions]

    def _fill(self, instruction: str, item: Any) -> str:
        item_id = getattr(item, "item_id", "")
        return _render_template(
            self.template,
            self.source,
            {
                "prompt": instruction,
                "instruction": instruction,
                "id": item_id,
                "group": getattr(item, "group", ""),
                "stratum": getattr(item, "subtask", ""),
                "system": self.system_prompt or "",
            },
            f" on item {item_id!r}" if item is not None else "",
        )

    @property
    def name(self) -> str:
        """What a message calls the format's template: the template file, or the tokenizer's
        chat template (with :attr:`identity`)."""
        if self.kind == TEMPLATE:
            return self.source
        if self.kind == CHAT:
            return f"the tokenizer's chat template ({self.identity})"
        return "the Alpaca prompt"

    def check_items(self, items: Sequence[Any], tokenizer: Any = None) -> None:
        """Render every item's prompt now, before any model loads: an item whose prompt fails
        is refused in one line naming the template and the item; a format under which items
        with different prompts all render the same text (the question never reaches the
        model) is refused too. Alpaca renders every prompt by construction."""
        if self.kind == ALPACA or not items:
            return
        texts = []
        for item in items:
            try:
                texts.append(self.render(item.instruction, item, tokenizer))
            except CkptselError as exc:
                if self.kind == TEMPLATE:
                    raise  # it names the file and the item
                raise CkptselError(f"{self.name}: item {getattr(item, 'item_id', '')!r}: {exc}") from None
        if len({it.instruction for it in items}) > 1 and len(set(texts)) == 1:
            raise CkptselError(
                f"{self.name}: all {len(items)} items render the same prompt "
                f"({_short(texts[0])}): the item's prompt never reaches the model; use a "
                "template that includes it" + (" ({{ prompt }})" if self.kind == TEMPLATE else "")
            )

    def _messages(self, instruction: str, response: str | None = None) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": instruction})
        if response is not None:
            messages.append({"role": "assistant", "content": response})
        return messages

    def _chat_text(self, tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        args = json.loads(self.template_args) if self.template_args else {}
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **args)
        except Exception as exc:  # a template's own error (raise_exception, a missing role)
            raise CkptselError(f"the chat template failed on an item: {exc}") from None
        if not isinstance(text, str):
            raise CkptselError("the chat template did not render text")
        return text

    # ------------------------------------------------------------------ tokens

    def encode(
        self,
        tokenizer: Any,
        instructions: Sequence[str],
        responses: Sequence[str] | None = None,
        items: Sequence[Any] | None = None,
        cache: TokenCache | None = None,
    ) -> tuple[list[list[int]], list[list[int]] | None]:
        """``(prompt_ids, response_ids)`` of each item: the tokens the model is fed before it
        answers, and the scored response tokens that follow them (its end included: EOS for
        alpaca and template files, the template's end of turn for chat). ``responses=None``:
        prompts only; ``items``: the items' other fields, for a template file.

        ``cache`` (a dict kept for one tokenizer, e.g. over a run's checkpoints;
        :func:`cached_ids`) saves tokenizing a text twice: prompts are keyed by their rendered
        text and how this format tokenizes it (:attr:`tokens_tag`); responses by their text,
        or, where a response's tokens depend on its prompt (a chat template's continuation, a
        template file's prompt and response tokenized together), by prompt and response. The
        lists returned are shared with the cache: read them, never change them."""
        texts = self.render_many(instructions, items, tokenizer)
        kind = {CHAT: "chat-", TEMPLATE: "template-"}.get(self.kind, "") + "prompt" + self.tokens_tag
        prompts = cached_ids(lambda t: self.encode_prompts(tokenizer, t), texts, cache, kind)
        if responses is None:
            return prompts, None
        if self.kind not in (CHAT, TEMPLATE):  # alpaca: the response alone, then EOS
            return prompts, cached_ids(lambda r: self.encode_responses(tokenizer, (), r, ()), responses, cache, "response")
        keys = [f"{t}\x00{r}" for t, r in zip(texts, responses, strict=True)]
        at = {key: k for k, key in enumerate(keys)}

        def continuations(todo: Sequence[str]) -> list[list[int]]:
            ks = [at[key] for key in todo]
            return self.encode_responses(
                tokenizer,
                [instructions[k] for k in ks],
                [responses[k] for k in ks],
                [prompts[k] for k in ks],
                None if items is None else [items[k] for k in ks],
            )

        return prompts, cached_ids(continuations, keys, cache, kind.replace("prompt", "response", 1))

    def encode_prompts(self, tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts (:meth:`render_many`): with the tokenizer's special
        tokens (e.g. BOS), except for chat, whose template writes its own — unless
        :attr:`bos` says otherwise (``template+tokenizer``: both; ``template``: the template's
        only). A template file that writes the BOS token itself while the tokenizer adds one
        is refused, as ``{{ bos_token }}`` is, unless ``bos`` is ``template+tokenizer``."""
        if not texts:
            return []
        self.check_bos(tokenizer)
        ids = tokenizer(list(texts), add_special_tokens=self.adds_special_tokens)["input_ids"]
        return [list(p) for p in ids]

    def check_bos(self, tokenizer: Any) -> None:
        """Refuse, in one line naming the file, a template file that writes ``tokenizer``'s
        BOS token text itself (``<s>``) while the tokenizer adds one (two BOS), unless
        :attr:`bos` is ``template+tokenizer``."""
        bos = getattr(tokenizer, "bos_token", None)
        if self.kind != TEMPLATE or not isinstance(bos, str) or not bos or bos not in self.template:
            return
        if self.bos_source == "tokenizer" and adds_bos(tokenizer):
            raise CkptselError(
                f"{self.source}: the template writes the BOS token {bos!r} and the tokenizer "
                "adds one too: every prompt would hold two; drop it from the template, "
                'or, if the run really had two, state "bos": "template+tokenizer" in the run '
                "folder's prompt_format.json"
            )

    def encode_responses(
        self,
        tokenizer: Any,
        instructions: Sequence[str],
        responses: Sequence[str],
        prompts: Sequence[list[int]],
        items: Sequence[Any] | None = None,
    ) -> list[list[int]]:
        """The scored tokens of each response, after its prompt's ids ``prompts`` (``items``:
        the items' other fields, for a template file): the
        response's tokens then EOS (alpaca), the tokens after the prompt in the prompt and
        response tokenized together, then EOS (template files, :meth:`_joint_responses`), or
        the chat template's continuation (module doc)."""
        if not responses:
            return []
        if self.kind == CHAT:
            return self._chat_responses(tokenizer, instructions, responses, prompts)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise CkptselError("the tokenizer has no EOS token; cannot mark a response's end")
        if self.kind == TEMPLATE:
            texts = self.render_many(instructions, items, tokenizer)
            joint = self._joint_responses(tokenizer, texts, responses, prompts)
            return [[*r, int(eos)] for r in joint]
        ids = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
        return [[*r, int(eos)] for r in ids]

    def _joint_responses(
        self, tokenizer: Any, texts: Sequence[str], responses: Sequence[str], prompts: Sequence[list[int]]
    ) -> list[list[int]]:
        """A template file's response tokens as a run trained on ``tokenizer(prompt +
        response)`` has them (trl's prompt-completion data, a hand-written label mask): the
        prompt and the response tokenized together, the scored tokens those after the
        prompt's own tokens (``full[len(prompt_ids):]``: trl's completion mask, and the
        hand-written ``labels[:len(prompt_ids)] = -100``). When the prompt's last token merges
        with the response's first (a template ending ``"Answer: "``: ``" "`` alone, ``" 7"``
        together), the merged token falls under that mask, unscored, as in training; the
        prompt is still fed as tokenized alone (what generation is fed)."""
        joined = [t + r for t, r in zip(texts, responses, strict=True)]
        full = tokenizer(joined, add_special_tokens=self.adds_special_tokens)["input_ids"]
        return [list(f)[len(p) :] for p, f in zip(prompts, full, strict=True)]

    def _chat_responses(
        self, tokenizer: Any, instructions: Sequence[str], responses: Sequence[str], prompts: Sequence[list[int]]
    ) -> list[list[int]]:
        """The template's continuation after each prompt for the conversation ending in its
        response, as trl's ``SFTTrainer`` cuts it (a template that renders the prompt
        differently when the answer follows is refused: the NLL would score tokens after a
        context the model was not trained on); both tokenized as the prompt is
        (:attr:`adds_special_tokens`: BOS ``template+tokenizer`` tokenizes the rendered
        conversation as ``tokenizer(text)`` does)."""
        full = [
            self._chat_text(tokenizer, self._messages(i, r), generation_prompt=False) for i, r in zip(instructions, responses, strict=True)
        ]
        full_ids = tokenizer(full, add_special_tokens=self.adds_special_tokens)["input_ids"]
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
        if self.bos:
            out["bos"] = self.bos
        out["identity"] = self.identity
        return out


# ---------------------------------------------------------------------- template files
# A template file runs in a sandbox that bounds what one render may do: Jinja's immutable
# sandbox (no unsafe attributes, no mutation), no include/import/extends (refused when the file
# is read), and a budget per render — loop iterations, numbers passed to calls, the size of
# every text it builds and outputs, its time — so a hostile or mistaken file fails in one line
# instead of hanging or exhausting memory.
MAX_TEMPLATE_CHARS = 100_000  # a template file's text; a system prompt
MAX_PROMPT_CHARS = 1_000_000  # a rendered prompt, and any text a template builds on the way
MAX_LOOP = 100_000  # loop iterations (and range() items) in one render
MAX_NUMBER = 100_000  # the largest number a template passes to a call or a filter (a width)
RENDER_SECONDS = 5.0  # one render's time
TEMPLATE_FIELDS = ("prompt", "instruction", "id", "group", "stratum", "system")
_GUARD = "ckptsel_"  # the sandbox's own names in a template (a file may not use them)
_budget: ContextVar[_Budget | None] = ContextVar("ckptsel_template_budget", default=None)


class _Limit(Exception):
    """A render over its budget (turned into one line by :func:`_render_template`)."""


class _Budget:
    """What one render has used: loop iterations, output, time."""

    def __init__(self) -> None:
        self.loops, self.chars = 0, 0
        self.deadline = time.monotonic() + RENDER_SECONDS

    def tick(self, loops: int = 0, chars: int = 0) -> None:
        self.loops += loops
        self.chars += chars
        if self.loops > MAX_LOOP:
            raise _Limit(f"more than {MAX_LOOP} loop iterations")
        if self.chars > MAX_PROMPT_CHARS:
            raise _Limit(f"more than {MAX_PROMPT_CHARS} characters of output")
        if time.monotonic() > self.deadline:
            raise _Limit(f"still rendering after {RENDER_SECONDS:g} s")


def _tick(loops: int = 0, chars: int = 0) -> None:
    budget = _budget.get()
    if budget is not None:
        budget.tick(loops, chars)


def _sized(value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_PROMPT_CHARS:
        raise _Limit(f"{what} builds a value of {len(value)} items (at most {MAX_PROMPT_CHARS})")
    return value


def _check_numbers(args: Sequence[Any], kwargs: dict[str, Any], what: str) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise _Limit(f"{what} is given the number {value} (at most {MAX_NUMBER})")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
    if operator == "**" and ints and abs(left) > 1 and right > 64:
        raise _Limit(f"{left} ** {right} is too large")
    if operator == "*" and ints and left.bit_length() + right.bit_length() > 4096:
        raise _Limit("a product too large")
    seq, count = (left, right) if isinstance(right, int) else (right, left)
    if operator == "*" and isinstance(seq, (str, list, tuple)) and isinstance(count, int):
        if len(seq) * count > MAX_PROMPT_CHARS:
            raise _Limit(f"a text repeated {count} times (at most {MAX_PROMPT_CHARS} characters)")


def _check_format_text(text: Any, what: str) -> None:
    """A format string (``%``, ``format``) may not ask for a width over :data:`MAX_NUMBER`."""
    if isinstance(text, str):
        for digits in re.findall(r"\d{6,}", text):
            if int(digits) > MAX_NUMBER:
                raise _Limit(f"{what} asks for a width of {digits} (at most {MAX_NUMBER})")


def _safe_range(*args: int) -> range:
    items = range(*args)
    if len(items) > MAX_LOOP:
        raise _Limit(f"range{args} has {len(items)} items (at most {MAX_LOOP})")
    return items


def _loop(iterable: Any) -> Any:
    for value in iterable:
        _tick(loops=1)
        yield value


def _out(value: Any) -> Any:
    _tick(chars=len(str(value)))
    return value


def _concat(*parts: Any) -> str:
    return _sized("".join(str(p) for p in parts), "'~'")


def _guarded_filter(name: str, func: Any) -> Any:
    from jinja2.utils import _PassArg

    skip = 2 if _PassArg.from_obj(func) is not None else 1  # the context, then the value
    what = f"filter {name}"

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_numbers(args[skip:], kwargs, what)
        if name == "format" and len(args) >= skip:
            _check_format_text(args[skip - 1], what)
        return _sized(func(*args, **kwargs), what)

    return guarded


@functools.lru_cache(maxsize=1)
def _sandbox() -> Any:
    """The environment template files render in (built once; module comment above)."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _tick()
            _check_binop(operator, left, right)
            if operator == "%":
                _check_format_text(left, "'%'")
            return _sized(super().call_binop(context, operator, left, right), f"'{operator}'")

        def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            _tick()
            what = getattr(obj, "__name__", "a call")
            if not any(obj is own for own in (_safe_range, _loop, _out, _concat)):
                _check_numbers(args, kwargs, what)
            if what in ("format", "format_map"):
                bound = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
                _check_format_text(getattr(bound, "__self__", None), what)
            return _sized(super().call(context, obj, *args, **kwargs), what)

    env = Sandbox(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters = {name: _guarded_filter(name, f) for name, f in env.filters.items()}
    env.globals.pop("lipsum", None)  # lipsum(n=...) writes n paragraphs
    env.globals.update({"range": _safe_range, f"{_GUARD}loop": _loop, f"{_GUARD}out": _out, f"{_GUARD}concat": _concat})
    return env


def _guarded_ast(env: Any, source: str, template: str) -> Any:
    """``template`` parsed and checked (refusals name ``source``), every loop, output and
    ``~`` routed through the render budget."""
    from jinja2 import TemplateSyntaxError, meta, nodes
    from jinja2.visitor import NodeTransformer

    if not template.strip():
        raise CkptselError(f"{source}: prompt template is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise CkptselError(f"{source}: prompt template is {len(template)} characters (at most {MAX_TEMPLATE_CHARS})")
    try:
        tree = env.parse(template)
    except TemplateSyntaxError as exc:
        raise CkptselError(f"{source}: prompt template, line {exc.lineno}: {exc.message}") from None
    except RecursionError:
        raise CkptselError(f"{source}: prompt template: nested too deeply") from None
    except Exception as exc:  # the parser's other limits
        raise CkptselError(f"{source}: prompt template: {_one_line(exc)}") from None
    for kind, word in (
        (nodes.Extends, "extends"),
        (nodes.Include, "include"),
        (nodes.Import, "import"),
        (nodes.FromImport, "from ... import"),
    ):
        found = next(iter(tree.find_all(kind)), None)
        if found is not None:
            raise CkptselError(
                f"{source}: prompt template, line {found.lineno}: {{% {word} %}} is not allowed "
                "(a prompt template is one self-contained file)"
            )
    used = meta.find_undeclared_variables(tree)
    unknown = sorted(n for n in used if n not in TEMPLATE_FIELDS and n not in env.globals)
    unknown += sorted(n.name for n in tree.find_all(nodes.Name) if n.name.startswith(_GUARD))
    if unknown:
        raise CkptselError(
            f"{source}: prompt template uses {{{{ {unknown[0]} }}}}, which is not an item "
            f"field (a template is given {', '.join(TEMPLATE_FIELDS)})"
        )
    if not used & {"prompt", "instruction"}:
        raise CkptselError(
            f"{source}: prompt template never uses {{{{ prompt }}}}: every item would get the "
            "same prompt and the item's question would never reach the model"
        )

    def call(name: str, *args: Any, at: Any) -> Any:
        return nodes.Call(nodes.Name(_GUARD + name, "load"), list(args), [], None, None).set_lineno(at.lineno)

    class Guard(NodeTransformer):
        def visit_For(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.iter = call("loop", node.iter, at=node)
            return node

        def visit_Output(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.nodes = [call("out", n, at=node) for n in node.nodes]
            return node

        def visit_Concat(self, node: Any) -> Any:
            return call("concat", *self.generic_visit(node).nodes, at=node)

    guarded = Guard().visit(tree)
    guarded.set_environment(env)
    return guarded


@functools.lru_cache(maxsize=32)
def _compiled(template: str, source: str) -> Any:
    """A template file's text, checked and compiled once (:func:`_guarded_ast`)."""
    env = _sandbox()
    tree = _guarded_ast(env, source, template)
    try:
        return env.from_string(tree)
    except Exception as exc:  # Python's own limits on the compiled code
        raise CkptselError(f"{source}: prompt template: {_one_line(exc)}") from None


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line: its type (unless a template's own error) and message."""
    text = " ".join(str(exc).split()) or "no message"
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text if isinstance(exc, (_Limit, CkptselError)) else f"{type(exc).__name__}: {text}"


def check_template(template: str, source: str) -> None:
    """Refuse, in one line naming ``source``, a template file that cannot be a prompt template:
    empty, too large, not Jinja, with ``include``/``import``/``extends``, a name that is no item
    field, or no ``{{ prompt }}`` (its prompts would not depend on the item)."""
    _compiled(template, source)


def _render_template(template: str, source: str, values: dict[str, Any], what: str = "") -> str:
    """``template`` rendered on ``values`` in the sandbox; any failure — Jinja's own, Python's
    (``1 // 0``), the budget's — is one line naming ``source`` and ``what`` (the item)."""
    compiled = _compiled(template, source)
    token = _budget.set(_Budget())
    try:
        text = "".join(compiled.generate(**values))
    except RecursionError:
        raise CkptselError(f"{source}: prompt template failed{what}: recursion too deep") from None
    except Exception as exc:
        raise CkptselError(f"{source}: prompt template failed{what}: {_one_line(exc)}") from None
    finally:
        _budget.reset(token)
    return text


def chat_template_of(tokenizer: Any) -> str:
    """The tokenizer's chat template text (``""`` when it has none; a named set of templates is
    its ``default`` one, as ``apply_chat_template`` picks)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) else ""


def drop_final_newline(text: str) -> str:
    """A template file's text less the one newline that ends it, as editors save a file (and
    as Jinja's own default drops it); a prompt meant to end in a newline ends the file with a
    blank line."""
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            return text[: -len(end)]
    return text


def adds_bos(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` adds its BOS token to a text it tokenizes with its special tokens
    (as ``tokenizer(text)`` does by default)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    except Exception:  # a tokenizer that cannot say: assume it adds none
        return False
    return bool(ids) and ids[0] == bos


FORMAT_KEYS = ("prompt_format", "system_prompt", "chat_template_args", "template", "bos", "identity")
MAX_FORMAT_DEPTH = 8  # a prompt format record's JSON nesting (chat_template_args included)
_FLAGS = {"format": "--prompt-format", "system": "--system-prompt", "args": "--chat-template-args"}


def _system_text(value: Any, name: str) -> str | None:
    """A system prompt: text of at most :data:`MAX_TEMPLATE_CHARS` (``""``: none)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise CkptselError(f"{name} must be text, not {type(value).__name__} {_short(value)}")
    if len(value) > MAX_TEMPLATE_CHARS:
        raise CkptselError(f"{name} is {len(value)} characters (at most {MAX_TEMPLATE_CHARS})")
    return value or None


def _checked_format(
    kind: str, system: Any, args: Any, names: dict[str, str], template: str | None = None, source: str = ""
) -> PromptFormat:
    """The one rule set of a prompt format, the command line's and ``prompt_format.json``'s
    alike (``names``: how the message names the format, system prompt and arguments): the
    Alpaca prompt takes no system prompt or arguments, a template file no arguments, a chat
    format no template text; a template file must be a prompt template
    (:func:`check_template`)."""
    at = names.get("where", "")
    args_text = template_args_json(args, at + names["args"])
    system_text = _system_text(system, at + names["system"])
    if kind == ALPACA:
        given = [names[k] for k, v in (("system", system_text), ("args", args_text)) if v]
        if given:
            raise CkptselError(
                f"{at}{' and '.join(given)} need{'s' if len(given) == 1 else ''} "
                f"{names['format']} "
                "chat or a template file (the Alpaca prompt has no system turn or template "
                "arguments)"
            )
        return PromptFormat()
    if kind == CHAT:
        return PromptFormat(CHAT, system_text, args_text)
    if args_text:
        raise CkptselError(f"{at}{names['args']} apply to {names['format']} chat only (a template file takes no template arguments)")
    try:
        check_template(template or "", source)
    except CkptselError as exc:
        if "template" not in names:
            raise
        raise CkptselError(f"{at}{names['template']}: {exc}") from None
    return PromptFormat(TEMPLATE, system_text, template=template or "", source=source)


def prompt_format(spec: str | None = None, system_prompt: str | None = None, template_args: Any = None) -> PromptFormat:
    """The :class:`PromptFormat` of ``--prompt-format`` (``alpaca``, ``chat`` or a template
    file's path; ``None``: alpaca), ``--system-prompt`` and ``--chat-template-args``; bad values
    are refused in one line (the same rules as ``prompt_format.json``'s,
    :func:`format_from_dict`)."""
    spec = ALPACA if spec is None else spec
    if not isinstance(spec, str) or not spec.strip():
        raise CkptselError(f"--prompt-format must be alpaca, chat or a template file, not {_short(spec)}")
    if spec in (ALPACA, CHAT):
        return _checked_format(spec, system_prompt, template_args, _FLAGS)
    path = Path(spec)
    if not path.is_file():
        raise CkptselError(f"--prompt-format {spec!r}: not alpaca, chat, or a template file that exists")
    template_args_json(template_args)  # its own errors first
    try:
        size = path.stat().st_size
        if size > 4 * MAX_TEMPLATE_CHARS:
            raise CkptselError(f"{path}: prompt template is {size} bytes (at most {MAX_TEMPLATE_CHARS} characters)")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CkptselError(f"{path}: cannot read the prompt template ({_one_line(exc)})") from None
    text = drop_final_newline(text)  # the one an editor adds at the end of a file
    return _checked_format(TEMPLATE, system_prompt, template_args, _FLAGS, text, str(path))


def resolve_format(
    stated: PromptFormat | None, tokenizer: Any, recorded: PromptFormat | None = None, where: str = "the run"
) -> PromptFormat:
    """The one prompt format a run is measured with, resolved once for its tokenizer: the
    ``stated`` one (``--prompt-format``; chat: bound to ``tokenizer``'s chat template), else
    the one the run folder ``recorded`` (:data:`FORMAT_FILE`: how it was trained), else
    alpaca — unless ``tokenizer`` has a chat template and nothing says how the run was
    trained: refused in one line naming the choices (never measured silently under the Alpaca
    prompt). A stated format that differs from the recorded one is refused too, and so is a
    chat format already bound to another template than ``tokenizer``'s."""
    if stated is not None and stated.kind == CHAT and stated.chat_template and recorded is None:
        stated.check_tokenizer(tokenizer, where)
        return stated
    if stated is not None and stated.kind == CHAT:
        stated = stated.with_tokenizer(tokenizer, f"{where}'s tokenizer")
    if recorded is not None and recorded.kind == CHAT:
        recorded = recorded.with_tokenizer(tokenizer, f"{where}'s tokenizer")
    if stated is not None and recorded is not None and not stated.bos:
        stated = replace(stated, bos=recorded.bos)  # the run folder's BOS, where it says one
    if stated is not None and recorded is not None and stated.identity != recorded.identity:
        differ = stated.differences(recorded, "stated", FORMAT_FILE)
        raise CkptselError(
            f"{where} was trained with the prompt format {recorded.describe()}, not "
            f"{stated.describe()}; they differ in {differ or 'their identity'}: measure it "
            "with the format it was trained with (drop --prompt-format, --system-prompt "
            "and --chat-template-args), or measure a copy whose prompt_format.json you "
            "changed"
        )
    fmt = stated or recorded
    if fmt is None:
        if chat_template_of(tokenizer):
            raise CkptselError(
                f"{where}: its tokenizer has a chat template and nothing says how the run "
                f"was trained; pass {FORMAT_CHOICES} (in study.toml: [measure] "
                "prompt_format), with --system-prompt TEXT and --chat-template-args JSON if "
                "the run was trained with a system turn or template arguments; or state it "
                f"once in the run folder's {FORMAT_FILE}, e.g. "
                '{"prompt_format": "chat", "system_prompt": "..."}'
            )
        fmt = PromptFormat()
    return fmt


def _depth(blob: Any) -> int:
    """The nesting depth of a JSON value (iterative: any depth is measured, none recursed)."""
    deepest, todo = 0, [(blob, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_FORMAT_DEPTH:
                todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def format_from_dict(blob: Any, where: str) -> PromptFormat:
    """The format a run folder records (:meth:`PromptFormat.to_dict`), held to the command
    line's rules (:func:`_checked_format`); each refusal is one line naming ``where`` and the
    key."""
    if not isinstance(blob, dict) or not isinstance(blob.get("prompt_format"), str):
        raise CkptselError(
            f'{where}: not a prompt format record: it needs "prompt_format": "chat", '
            '"alpaca" or a template file\'s name (with its text under "template")'
        )
    if _depth(blob) > MAX_FORMAT_DEPTH:
        raise CkptselError(f"{where}: nested more than {MAX_FORMAT_DEPTH} levels deep")
    unknown = sorted(str(k) for k in blob if k not in FORMAT_KEYS)
    if unknown:
        raise CkptselError(f"{where}: unknown key {unknown[0]!r} (a prompt format record has {', '.join(FORMAT_KEYS)})")
    kind = blob["prompt_format"].strip()
    names = {
        "where": f"{where}: ",
        "format": "'prompt_format'",
        "system": "'system_prompt'",
        "args": "'chat_template_args'",
        "template": "'template'",
    }
    text = blob.get("template")
    if kind in (ALPACA, CHAT) and text is not None:
        raise CkptselError(f"{where}: 'template' is only for a template file, not 'prompt_format' {kind!r}")
    if kind not in (ALPACA, CHAT):
        if not kind:
            raise CkptselError(f"{where}: 'prompt_format' is empty (chat, alpaca or a template file)")
        if not isinstance(text, str):
            raise CkptselError(
                f"{where}: 'prompt_format' {kind!r} is a template file, so the record needs "
                "'template': the template's Jinja text (ckptsel train writes it; "
                f"{'it is missing' if text is None else f'not {type(text).__name__}'})"
            )
    fmt = _checked_format(
        kind, blob.get("system_prompt"), blob.get("chat_template_args"), names, text, kind if kind not in (ALPACA, CHAT) else ""
    )
    if blob.get("bos") not in (None, ""):
        fmt = fmt.with_bos(blob["bos"], f"{where}: 'bos'")
    return fmt


__all__ = [
    "ALPACA",
    "BOS_CHOICES",
    "CHAT",
    "FORMAT_CHOICES",
    "FORMAT_FILE",
    "PROMPT_TEMPLATE",
    "TEMPLATE",
    "PromptFormat",
    "adds_bos",
    "chat_template_of",
    "drop_final_newline",
    "format_from_dict",
    "format_prompt",
    "prompt_format",
    "resolve_format",
    "template_args_json",
]
