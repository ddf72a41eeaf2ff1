"""The conformance check: before ckptsel's fast measurement path is trusted with a model family,
it must give what the plain reference gives on a few of the real items.

Why: the fast path (:mod:`ckptsel.measure.passes`: one right-padded batched forward, greedy
decoding from its KV cache; vLLM in :mod:`ckptsel.measure.backends.vllm`) feeds every family's
cache the same way. A family whose cache or positions it feeds wrongly (Mamba's
``cache_params``, say) gave wrong texts silently, with exit 0. Rather than a patch per family,
an *unknown* seam is made loud: the first time a family is measured, it is checked.

**What is a family.** The key of a verdict (:func:`hf_key`, :func:`vllm_key`): the model class
(the architecture for vLLM), whether a LoRA adapter is applied unmerged, the dtype, the
attention implementation, the cache layout (full / sliding / other), whether the RoPE
frequencies depend on the call's length (static / longrope / dynamic: measured by another
path, so checked on their own — the first GPU check found a dynamic-RoPE Llama passed on the
plain Llama's cached verdict), the engine and its version
(transformers or vLLM), torch's version, the device kind, and a digest of the fast path's own
source (so a fixed ``passes.py`` is checked again, and a refused family stays refused only
while the code that was wrong is the code that runs).

**The check (HF).** :data:`CHECK_ITEMS` of the items being measured, picked by length (the
longest, the shortest and evenly between, so the batch has padding), go through the fast path
in ONE batch (the real ``measure_items``, same ``max_new_tokens``), and through the reference,
one unpadded item at a time: greedy ``model.generate`` (a fresh greedy ``GenerationConfig``,
the same stop tokens, pad token and ``max_new_tokens``; the model's own sampling settings play
no part) for the texts, and a single unpadded forward over prompt + response + EOS (log-softmax
in float64) for the NLL of the complete response.

**Tolerance.**

* texts, compared as token ids: equal, or different only from a step where the reference's
  chosen token and the fast path's token are within rounding of each other in the reference's
  own logits: ``gap <= TIE_ULPS * eps(dtype) * max(1, |top logit|)`` (float32: about 1e-6
  relative — in float32 this is "equal"; bfloat16: 6 %, float16: 0.8 % of the top logit, i.e.
  a few units of the dtype's rounding of that logit). After such a step the rest of the text
  may differ (a greedy tie went the other way). A fast path that mis-feeds its cache diverges
  where the reference is sure of its token, and is refused;
* NLL of the complete response: relative difference at most :data:`NLL_REL` (float32 1e-4,
  bfloat16 2e-2, float16 1e-2), the reference in the same dtype.

**vLLM.** An HF model beside the engine only for a reference would double memory on the GPU,
so vLLM is checked against itself: the same items generated in one batch and one request at a
time (batched scheduling, paged KV and prefix caching are the seams), with the same tie rule on
the top-2 log-probabilities vLLM returns per step (a log-prob gap is a logit gap; the margin
takes a logit of :data:`VLLM_LOGIT_SCALE`); when vLLM scores the NLL, its prompt log-prob NLL
in a batch against one request at a time, and against an HF unpadded forward when the run has
the HF model loaded anyway (``--backend hf --nll-backend vllm`` or the other way round).

**The verdict** is cached in ``conformance.json`` under ``$CKPTSEL_CACHE_DIR`` (``{node}``
there: the node), else ``$XDG_CACHE_HOME/ckptsel``, else ``~/.cache/ckptsel``, written
atomically (read, merged, replaced: two processes that check at once both write the same
verdict). Refusals are cached too: a refused family is refused at once every time, until a
version in its key changes (or the file is deleted). A cache folder that cannot be written
costs a check per process, nothing else. Every unit measured records the verdict in its
provenance (``conformance``: ``passed (6 items: texts vs unbatched generate, NLL vs an
unpadded forward)`` or :data:`SKIPPED`; the time and numbers of the check stay in the cache, so that a
unit's bytes do not depend on which cache or checkpoint checked); ``MeasureConfig(conformance_check=False)``
(``--no-conformance-check``) skips the check and says so there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.nodecache import CACHE_ENV, cache_root
from ckptsel.data import PromptFormat
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import device_kind, dtype_name
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.passes import cache_layout, fresh_rope, length_rope, measure_items
from ckptsel.measure.tokens import (
    cut_at_stop,
    pad_id,
    stop_token_ids,
)

CHECK_VERSION = 1  # bump when what the check compares changes
CHECK_ITEMS = 6
CACHE_FILE = "conformance.json"
SKIPPED = "skipped by --no-conformance-check"
TIE_ULPS = 8
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
NLL_REL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 1e-2}
VLLM_LOGIT_SCALE = 32.0
STATS = {"checks": 0, "cached": 0}  # this process's counts (tests, benchmarks)
_SOURCES = ("passes.py", "tokens.py", "conformance.py", "backends/vllm.py")


@dataclass(frozen=True)
class Verdict:
    """One family's verdict: ``passed``, the ``family`` (model class) and ``dtype``, what was
    found (``detail``: counts and the largest NLL difference), on how many ``items``, when
    (``checked``, UTC) and against what (``reference``)."""

    passed: bool
    family: str
    dtype: str
    detail: str
    items: int
    checked: str
    reference: str = ""

    def stamp(self) -> str:
        """The provenance's ``conformance`` value of the units this verdict admits: what
        passed against what, and no more (not the time or the numbers, which depend on the
        checkpoint and the cache that checked: a unit's bytes do not)."""
        return f"passed ({self.items} items: {self.reference})"

    def refusal(self) -> str:
        """The one line a refused family gets."""
        return (
            f"{self.family} {self.dtype}: {self.detail} — ckptsel's fast path is wrong for this "
            f"family (conformance check of {self.checked}, cached in {cache_path()}); measure "
            "with --no-conformance-check at your own risk"
        )


def cache_path() -> Path:
    """Where verdicts are kept: ``$CKPTSEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckptsel``, else
    ``~/.cache/ckptsel``; the file :data:`CACHE_FILE`."""
    if os.environ.get(CACHE_ENV):
        return cache_root() / CACHE_FILE
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ckptsel" / CACHE_FILE


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        return data["verdicts"] if isinstance(data.get("verdicts"), dict) else {}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}  # no cache or an unreadable one: checked again, rewritten


def cached_verdict(key: str) -> Verdict | None:
    """The cached verdict of ``key`` (:func:`key_string`), if any."""
    entry = _read_cache().get(key)
    try:
        return Verdict(**entry) if isinstance(entry, dict) else None
    except TypeError:
        return None


def save_verdict(key: str, verdict: Verdict) -> None:
    """Add ``verdict`` to the cache (atomically; a cache that cannot be written is skipped)."""
    verdicts = _read_cache()
    verdicts[key] = asdict(verdict)
    blob = json.dumps({"format": 1, "verdicts": verdicts}, indent=1, sort_keys=True)
    try:
        write_text(cache_path(), blob + "\n")
    except CkptselError:
        pass  # read-only home, say: the verdict holds for this process only


@functools.cache
def source_digest() -> str:
    """A digest of the fast path's source (and this check's): part of every key."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def key_string(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def _versions() -> dict[str, Any]:
    import torch

    return {"check": CHECK_VERSION, "code": source_digest(), "torch": torch.__version__}


def hf_key(model: Any, device: Any) -> dict[str, Any]:
    """A Hugging Face model's family (module doc)."""
    import transformers

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls = type(inner)
    return {
        **_versions(), "engine": "hf", "version": transformers.__version__,
        "model": f"{cls.__module__}.{cls.__qualname__}",
        "adapter": "unmerged" if inner is not model else "none",
        "dtype": dtype_name(inner.dtype),
        "attention": str(getattr(inner.config, "_attn_implementation", None) or "unknown"),
        "cache": cache_layout(model).kind, "device": device_kind(device),
        "rope": (length_rope(model) or ("static",))[0],
    }  # fmt: skip


def vllm_key(architecture: str, provenance: dict[str, Any], adapters: bool) -> dict[str, Any]:
    """A vLLM engine's family (module doc): ``provenance`` is the engine's."""
    return {
        **_versions(), "engine": "vllm", "version": provenance["version"],
        "model": architecture, "adapter": "lora" if adapters else "none",
        "dtype": provenance["dtype"], "attention": provenance["attention"],
        "device": provenance["device"],
    }  # fmt: skip


def pick_items(items: Sequence[Any], n: int = CHECK_ITEMS) -> list[Any]:
    """``n`` of ``items`` by length of prompt + response (characters): the longest, the
    shortest and evenly between, in their input order. An item without a response (a task file
    with none) is checked on an empty one (its EOS alone)."""
    items = [replace(it, response="") if it.response is None else it for it in items]
    lengths = [len(it.instruction) + len(it.response) for it in items]
    order = sorted(range(len(items)), key=lambda i: (-lengths[i], i))
    if len(order) > n > 1:
        step = (len(order) - 1) / (n - 1)
        order = [order[round(k * step)] for k in range(n)]
    return [items[i] for i in sorted(set(order))]


# --------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Step:
    """The reference's scores at one generation step: ``score(token)`` (a logit or log-prob;
    ``None`` when not known), its chosen token and the margin of a tie there."""

    score: Callable[[int], float | None]
    chosen: int
    margin: float


def text_agrees(
    ref: list[int], steps: Sequence[Step], fast: list[int], stops: Sequence[int]
) -> str:
    """``equal``, ``tie`` (the fast tokens leave the reference's only where its chosen token
    and the fast path's are within the step's margin) or ``wrong``. ``ref`` are the reference's
    tokens as generated (its stop token included), ``fast`` the fast path's cut at the stop."""
    cut = cut_at_stop(ref, stops)
    if fast == cut:
        return "equal"
    k = next(
        (j for j, (a, b) in enumerate(zip(cut, fast, strict=False)) if a != b),
        min(len(cut), len(fast)),
    )
    if k >= len(steps):
        return "wrong"
    step = steps[k]
    if k < len(fast):
        theirs = step.score(fast[k])
    else:  # the fast path stopped here: its best stop token
        theirs = max((s for s in (step.score(t) for t in stops) if s is not None), default=None)
    mine = step.score(step.chosen)
    if theirs is None or mine is None:
        return "wrong"
    return "tie" if mine - theirs <= step.margin else "wrong"


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-6)


def summarize(
    items: int,
    family: str, dtype: str, texts: Sequence[str], nll_rel: Sequence[float], against: str,
    nll_against: str = "an unpadded forward",
) -> Verdict:  # fmt: skip
    """The verdict on ``items`` items of their text results (``equal``/``tie``/``wrong``) and
    NLL relative differences (one or more per item)."""
    n, equal, ties = len(texts), texts.count("equal"), texts.count("tie")
    tol = NLL_REL.get(dtype, NLL_REL["bfloat16"])
    worst = max(nll_rel, default=0.0)
    detail = f"{equal} of {n} texts equal {against}" if texts else "texts not checked"
    detail += f" ({ties} more differ only after a near-tie)" if ties else ""
    if nll_rel:
        detail += f"; NLL max rel diff {worst:.1e} vs {nll_against} (tolerance {tol:.0e})"
    passed = texts.count("wrong") == 0 and worst <= tol
    checked = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    reference = [f"texts vs {against}"] if texts else []
    reference += [f"NLL vs {nll_against}"] if nll_rel else []
    return Verdict(passed, family, dtype, detail, items, checked, ", ".join(reference))


# --------------------------------------------------------------------------- HF


class _Recorder:
    """The tokenizer, keeping the token ids behind every text it decodes (the fast path's
    tokens, without a change to :mod:`ckptsel.measure.passes`)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok, self.tokens = tokenizer, {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> str:
        text = self._tok.decode(ids, *args, **kwargs)
        self.tokens[text] = list(ids)
        return text


def unpadded_nll(model: Any, prompt: list[int], answer: list[int], device: Any) -> float:
    """NLL of ``answer`` after ``prompt`` from one unpadded forward (log-softmax in float64)."""
    import torch

    seq = torch.tensor([prompt + answer], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=seq).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(answer)]
        target = torch.tensor(answer, dtype=torch.long, device=logits.device)
        return float(-logits.double().log_softmax(-1).gather(-1, target[:, None]).sum())


def _reference(
    model: Any, prompt: list[int], answer: list[int], cfg: Any, device: Any
) -> tuple[list[int], list[Step], float]:
    """Unbatched greedy ``generate`` on one unpadded prompt (tokens, per-step scores) and the
    NLL of ``answer`` from one unpadded forward, each as a freshly loaded model gives them
    (dynamic RoPE keeps the frequencies of the longest call so far: reset first)."""
    import torch

    x = torch.tensor([prompt], dtype=torch.long, device=device)
    with torch.inference_mode():
        fresh_rope(model, device)
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=cfg)
        fresh_rope(model, device)
    new = out.sequences[0, len(prompt) :].tolist()
    eps = EPS.get(dtype_name(model.dtype), EPS["bfloat16"])
    steps = []
    for row, chosen in zip(out.logits, new, strict=False):
        row = row[0].float().cpu()
        margin = TIE_ULPS * eps * max(1.0, abs(float(row[chosen])))
        steps.append(Step(lambda t, r=row: float(r[t]), chosen, margin))
    return new, steps, unpadded_nll(model, prompt, answer, device)


def check_hf(model: Any, tokenizer: Any, items: Sequence[Any], max_new_tokens: int,
             device: Any = None, fmt: Any = None) -> Verdict:  # fmt: skip
    """The HF fast path against the reference on ``items`` (module doc), their prompts in the
    prompt format ``fmt`` (default: alpaca)."""
    from transformers import GenerationConfig

    device = device if device is not None else next(model.parameters()).device
    fmt = fmt if fmt is not None else PromptFormat()
    prompts = [it.instruction for it in items]
    responses = [it.response for it in items]
    rec = _Recorder(tokenizer)
    texts, scored = measure_items(
        model, rec, prompts, responses, windows=(0,), batch_size=len(prompts),
        max_new_tokens=max_new_tokens, device=device, fmt=fmt, items=items,
    )  # fmt: skip
    stops = stop_token_ids(model, tokenizer)
    cfg = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad_id(tokenizer),
        eos_token_id=stops, output_logits=True, return_dict_in_generate=True,
    )  # fmt: skip
    results, rels = [], []
    ids, answers = fmt.encode(tokenizer, prompts, responses, items)
    for k in range(len(items)):
        ref, steps, nll = _reference(model, ids[k], answers[k], cfg, device)
        results.append(text_agrees(ref, steps, rec.tokens[texts[k]], stops))
        rels.append(_rel(scored[k][0].nll_sum, nll))
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return summarize(
        len(items),
        type(inner).__name__,
        dtype_name(inner.dtype),
        results,
        rels,
        "unbatched generate",
    )


# --------------------------------------------------------------------------- vLLM


def _vllm_steps(logprobs: list[dict[int, float]], tokens: list[int], dtype: str) -> list[Step]:
    margin = TIE_ULPS * EPS.get(dtype, EPS["bfloat16"]) * VLLM_LOGIT_SCALE
    return [Step(step.get, tok, margin) for step, tok in zip(logprobs, tokens, strict=False)]


def check_vllm(
    engine: Any, ckpt: Any, tokenizer: Any, items: Sequence[Any], config: MeasureConfig,
    stops: Sequence[int], hf_model: Any = None,
) -> Verdict:  # fmt: skip
    """vLLM in one batch against vLLM one request at a time (texts; the NLL when vLLM scores
    it) and, when ``hf_model`` is given, its NLL against an HF unpadded forward (module doc)."""
    fmt = config.format_for(tokenizer)
    prompts, answers = fmt.encode(
        tokenizer, [it.instruction for it in items], [it.response for it in items], items
    )
    dtype, new = engine.dtype, config.max_new_tokens
    results, rels = [], []
    if config.backend == "vllm":
        batched = engine.greedy(ckpt, prompts, stops, new)
        for p, (fast, _) in zip(prompts, batched, strict=True):
            ((ref, lps),) = engine.greedy(ckpt, [p], stops, new)
            steps = _vllm_steps(lps, ref, dtype)
            results.append(text_agrees(ref, steps, cut_at_stop(fast, stops), stops))
    if config.nll_backend == "vllm":
        scored = engine.score(ckpt, prompts, answers, (0,))
        for k, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            alone = engine.score(ckpt, [p], [a], (0,))[0][0].nll_sum
            rels.append(_rel(scored[k][0].nll_sum, alone))
            if hf_model is not None:
                ref = unpadded_nll(hf_model, p, a, next(hf_model.parameters()).device)
                rels.append(_rel(scored[k][0].nll_sum, ref))
    family = str(engine.architecture(ckpt))
    one = "vLLM one request at a time"
    nll_against = one if hf_model is None else f"{one} and an HF unpadded forward"
    return summarize(len(items), family, dtype, results, rels, one, nll_against)


class Conformance:
    """A run's verdicts (per family: checked once, or read from the cache) and their stamps;
    ``seconds`` and ``checks`` count what checking cost here."""

    def __init__(self, config: MeasureConfig) -> None:
        self.config = config
        self.stamps: dict[str, str] = {}
        self.seconds, self.checks = 0.0, 0

    def verdict(self, key: dict[str, Any], check: Callable[[], Verdict]) -> str:
        """The stamp of ``key``'s family (``check()`` run when no verdict is known), or
        :class:`CkptselError` with the one line of a refusal."""
        if not self.config.conformance_check:
            return SKIPPED
        name = key_string(key)
        if name not in self.stamps:
            verdict = cached_verdict(name)
            if verdict is None:
                t0 = time.perf_counter()
                verdict = check()
                self.seconds += time.perf_counter() - t0
                self.checks += 1
                STATS["checks"] += 1
                save_verdict(name, verdict)
            else:
                STATS["cached"] += 1
            if not verdict.passed:
                raise CkptselError(verdict.refusal())
            self.stamps[name] = verdict.stamp()
        return self.stamps[name]

    def hf(self, model: Any, tokenizer: Any, items: Sequence[Any], device: Any = None) -> str:
        """:meth:`verdict` of an HF model, checked on :func:`pick_items` of ``items``."""
        if not self.config.conformance_check:
            return SKIPPED
        device = device if device is not None else next(model.parameters()).device
        fmt = self.config.format_for(tokenizer)
        key = hf_key(model, device)
        if fmt.identity != "alpaca":  # alpaca keeps the keys it always had
            key["prompt_format"] = fmt.identity
        return self.verdict(
            key,
            lambda: check_hf(
                model, tokenizer, pick_items(items), self.config.max_new_tokens, device, fmt
            ),
        )

    def vllm(
        self, engine: Any, ckpt: Any, tokenizer: Any, items: Sequence[Any], stops: Sequence[int],
        hf_model: Callable[[], Any] | None = None,
    ) -> str:  # fmt: skip
        """:meth:`verdict` of the vLLM engine on ``ckpt``'s model (:func:`check_vllm`);
        ``hf_model()`` gives the run's HF model when it has one (called only to check)."""
        if not self.config.conformance_check:
            return SKIPPED
        key = vllm_key(str(engine.architecture(ckpt)), engine.provenance(), ckpt.kind == "adapter")
        key["checks"] = [k for k in ("backend", "nll_backend") if getattr(self.config, k) == "vllm"]
        if self.config.nll_backend == "vllm" and hf_model is not None:
            key["nll_against"] = "hf"
        if self.config.format_identity != "alpaca":
            key["prompt_format"] = self.config.format_identity
        picked = pick_items(items)
        return self.verdict(
            key,
            lambda: check_vllm(
                engine, ckpt, tokenizer, picked, self.config, stops,
                hf_model() if hf_model is not None and self.config.nll_backend == "vllm" else None,
            ),
        )  # fmt: skip


def check_conformance(
    model: Any, tokenizer: Any, items: Sequence[Any], config: MeasureConfig, *, device: Any = None
) -> str:
    """The conformance verdict of a model already in memory (the Trainer callback): the value
    for its provenance's ``conformance`` field (:data:`SKIPPED` when
    ``config.conformance_check`` is off), or :class:`CkptselError` with one line when ckptsel's
    fast path is wrong for the model's family. ``items`` are the items about to be measured
    (a few are picked); the verdict is cached per family (module doc)."""
    return Conformance(config).hf(model, tokenizer, items, device)
