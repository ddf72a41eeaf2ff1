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
(transformers or vLLM), torch's version, the device kind, a digest of the fast path's own
source (so a fixed ``passes.py`` is checked again, and a refused family stays refused only
while the code that was wrong is the code that runs), and two digests of what changes the
function within a class: ``config``, the model's config (every field but where it
was loaded from and the library's version) and the adapter's (every field but its base's path),
and ``settings``, the measurement settings that change what the fast path computes
(:meth:`~ckptsel.measure.config.MeasureConfig.conformance_settings`: the prompt format, the
batch size, the generation length). A Llama-4 with ``attn_temperature_tuning`` is not a plain
Llama-4, and a check at batch 6 says nothing of batch 8.

**The check (HF).** ``max(CHECK_ITEMS, batch size)`` of the items being measured (as many as
there are, if fewer), picked by length (the longest, the shortest and evenly between, so the
batches have padding), go through the fast path in batches of the run's batch size (the real
``measure_items``, same ``max_new_tokens``), and through the reference,
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
verdict). An entry holds numbers, never text: the counts of equal, near-tie and wrong texts,
the largest NLL difference, which references were compared (from a fixed list), when, and an
HMAC-SHA256 over its key and fields under the user's secret key (:mod:`ckptsel._util.keys`,
outside the cache folder: a digest anyone can recompute would let one edited file forge a
pass). It is read back only when every field is there with its type, its counts agree with its
``passed`` and its HMAC holds; anything else (a forged "passed", its plain digest recomputed
or not, an entry of an older format, another user's, a hand edit) is checked again and
replaced, and the units say ``re-checked in this run``. ``ckptsel verify --conformance``
checks every entry under the key (:func:`check_cached_verdicts`). Refusals are cached
too: a refused family is refused at once every time, until something in its key changes (or
the file is deleted). A cache folder that cannot be written costs a check per process,
nothing else. Every unit measured records the verdict in its provenance (``conformance``),
rebuilt from the entry's fields, never copied from the file: ``passed (6 items at batch size 4:
texts vs unbatched generate, NLL vs an unpadded forward; checked in this run, entry
hmac-sha256:<7 hex>)`` or ``...; read from the cache (keyed): checked <UTC time>, entry
hmac-sha256:<7 hex>)``,
or :data:`SKIPPED`; ``MeasureConfig(conformance_check=False)`` (``--no-conformance-check``)
skips the check and says so there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.keys import mac, mac_holds
from ckptsel._util.nodecache import CACHE_ENV, cache_root, local_ref
from ckptsel.data.prompts import PromptFormat
from ckptsel.defaults import BATCH_SIZE
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import device_kind, dtype_name
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.passes import cache_layout, fresh_rope, length_rope, measure_items
from ckptsel.measure.tokens import cut_at_stop, pad_id, stop_token_ids

CHECK_VERSION = 2  # bump when what the check compares changes (2: per-class keys and entries)
CHECK_ITEMS = 6
CACHE_FILE = "conformance.json"
CACHE_FORMAT = 2
SKIPPED = "skipped by --no-conformance-check"
TIE_ULPS = 8
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
NLL_REL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 1e-2}
VLLM_LOGIT_SCALE = 32.0
STATS = {"checks": 0, "cached": 0}  # this process's counts (tests, benchmarks)
_SOURCES = ("passes.py", "tokens.py", "conformance.py", "backends/vllm.py")
UNBATCHED = "unbatched generate"
UNPADDED = "an unpadded forward"
ONE_REQUEST = "vLLM one request at a time"
TEXT_REFERENCES = ("", UNBATCHED, ONE_REQUEST)  # what texts may be compared against
NLL_REFERENCES = ("", UNPADDED, ONE_REQUEST, f"{ONE_REQUEST} and an HF unpadded forward")
_CHECKED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ")
_FAMILY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
_NOT_CONFIG = (
    "_name_or_path",
    "name_or_path",
    "transformers_version",
    "_commit_hash",
    "torch_dtype",
    "dtype",
    "base_model_name_or_path",
    "revision",
)


@dataclass(frozen=True)
class Verdict:
    """One family's verdict: ``passed``, the ``family`` (model class) and ``dtype``, on how many
    ``items`` at which ``batch`` size (0: the engine batches), when (``checked``, UTC), and
    what was found: of ``texts`` compared against ``texts_against`` (one of
    :data:`TEXT_REFERENCES`), how many were ``equal``, differed only after a near-``ties`` or
    were ``wrong``; the largest NLL relative difference ``nll_worst`` against ``nll_against``
    (``None``: NLL not checked). Numbers and names from fixed lists only: every text said of
    a verdict is built from them (:attr:`detail`, :meth:`stamp`)."""

    passed: bool
    family: str
    dtype: str
    items: int
    batch: int
    checked: str
    texts: int
    equal: int
    ties: int
    wrong: int
    nll_worst: float | None
    texts_against: str
    nll_against: str

    @property
    def detail(self) -> str:
        """What was found, in words (counts and the largest NLL difference)."""
        if self.texts:
            detail = f"{self.equal} of {self.texts} texts equal {self.texts_against}"
            detail += f" ({self.ties} more differ only after a near-tie)" if self.ties else ""
        else:
            detail = "texts not checked"
        if self.nll_worst is not None:
            tol = NLL_REL.get(self.dtype, NLL_REL["bfloat16"])
            detail += f"; NLL max rel diff {self.nll_worst:.1e} vs {self.nll_against} (tolerance {tol:.0e})"
        return detail

    @property
    def reference(self) -> str:
        """Against what it was checked."""
        parts = [f"texts vs {self.texts_against}"] if self.texts else []
        parts += [f"NLL vs {self.nll_against}"] if self.nll_worst is not None else []
        return ", ".join(parts)

    def _shape(self) -> str:
        at = f" at batch size {self.batch}" if self.batch else ""
        return f"{self.items} items{at}"

    def stamp(self, digest: str, fresh: bool, rechecked: bool = False) -> str:
        """The provenance's ``conformance`` value of the units this verdict admits: what
        passed against what, and whether it was checked in this run (``fresh``; ``rechecked``:
        the cache held an entry for the family whose HMAC did not hold) or read from the cache
        (then the entry's time); ``digest``: the cache entry's HMAC."""
        where = "re-checked in this run (its cached entry did not hold under this user's key)" if rechecked else "checked in this run"
        if not fresh:
            where = f"read from the cache (keyed): checked {self.checked}"
        return f"passed ({self._shape()}: {self.reference}; {where}, entry {digest[:19]})"

    def refusal(self, fresh: bool) -> str:
        """The one line a refused family gets."""
        when = "run now" if fresh else f"of {self.checked}"
        return (
            f"{self.family} {self.dtype} ({self._shape()}): {self.detail} — ckptsel's fast path "
            f"is wrong for this family (conformance check {when}, cached in {cache_path()}); "
            "measure with --no-conformance-check at your own risk"
        )

    def consistent(self) -> bool:
        """Whether the fields hold together: names from the fixed lists, counts that add up,
        and ``passed`` exactly when no text is wrong and the NLL is within tolerance."""
        ints = (self.items, self.batch, self.texts, self.equal, self.ties, self.wrong)
        if not all(type(n) is int and 0 <= n <= 10**6 for n in ints):
            return False
        worst = self.nll_worst
        if worst is not None and (type(worst) is not float or not 0 <= worst < float("inf")):
            return False
        return (
            type(self.passed) is bool
            and self.dtype in EPS
            and isinstance(self.family, str)
            and bool(_FAMILY.fullmatch(self.family))
            and isinstance(self.checked, str)
            and bool(_CHECKED.fullmatch(self.checked))
            and self.texts_against in TEXT_REFERENCES
            and self.nll_against in NLL_REFERENCES
            and self.equal + self.ties + self.wrong == self.texts <= self.items
            and (self.texts == 0) == (self.texts_against == "")
            and (worst is None) == (self.nll_against == "")
            and self.passed == (self.wrong == 0 and (worst or 0.0) <= NLL_REL[self.dtype])
        )

    def digest(self, key: str) -> str:
        """``hmac-sha256:<hex>`` over ``key`` (:func:`key_string`) and every field, under the
        user's secret key (:mod:`ckptsel._util.keys`): an entry edited in the cache file, its
        digest recomputed by anyone without that key, does not hold."""
        return mac(self._blob(key))

    def _blob(self, key: str) -> bytes:
        return json.dumps([key, asdict(self)], sort_keys=True, separators=(",", ":")).encode("utf-8")

    def holds(self, key: str, digest: object) -> bool:
        """Whether ``digest`` is this verdict's :meth:`digest` of ``key``."""
        return mac_holds(digest, self._blob(key))


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


def _entry_verdict(key: str, entry: Any) -> tuple[Verdict, str] | None:
    """An entry's verdict and digest, when it is well formed, consistent, of ``key``'s family
    and its digest holds (module doc); else ``None``."""
    names = {f.name for f in fields(Verdict)}
    if not isinstance(entry, dict) or set(entry) != names | {"digest"}:
        return None
    try:
        verdict = Verdict(**{k: entry[k] for k in names})
        model = str(json.loads(key).get("model", ""))
    except (TypeError, ValueError, AttributeError):
        return None
    if not verdict.consistent() or model.rsplit(".", 1)[-1] != verdict.family:
        return None
    return (verdict, entry["digest"]) if verdict.holds(key, entry["digest"]) else None


def check_cached_verdicts() -> tuple[Path, list[str], list[str]]:
    """``ckptsel verify --conformance``: every entry of the verdict cache checked as a measure
    would read it (well formed, consistent, its HMAC holding under the user's key). Returns
    (the cache file, a line per entry that holds, a line per entry that does not: the next
    measure of that family checks it again and replaces it). Lines are built from checked
    fields and fixed words only, never from the file's text."""
    held, failed = [], []
    for key, entry in sorted(_read_cache().items()):
        try:
            parsed = json.loads(key)
            model = str(parsed.get("model", "")).rsplit(".", 1)[-1]
            engine, dtype = str(parsed.get("engine", "")), str(parsed.get("dtype", ""))
        except (TypeError, ValueError, AttributeError):
            model = engine = dtype = ""
        ok = _FAMILY.fullmatch(model) and engine in ("hf", "vllm") and dtype in EPS
        label = f"{model} {dtype} ({engine})" if ok else "an entry of an unknown family"
        got = _entry_verdict(key, entry)
        if got is None:
            failed.append(
                f"{label}: its entry does not hold under this user's key (edited, "
                "damaged, of an older format or another user's): checked again at "
                "its next measure"
            )
            continue
        verdict, digest = got
        what = "passed" if verdict.passed else "refused"
        held.append(f"{label}: {what} ({verdict.detail}), checked {verdict.checked}, entry {digest[:19]} holds under this user's key")
    return cache_path(), held, failed


def cached_verdict(key: str) -> tuple[Verdict, str] | None:
    """The cached verdict of ``key`` (:func:`key_string`) and its entry's digest, if there is a
    trustworthy one (:func:`_entry_verdict`)."""
    return _entry_verdict(key, _read_cache().get(key))


def cached_entry(key: str) -> tuple[tuple[Verdict, str] | None, bool]:
    """(:func:`cached_verdict` of ``key``, whether the cache holds an entry for it at all)."""
    entry = _read_cache().get(key)
    return _entry_verdict(key, entry), entry is not None


def save_verdict(key: str, verdict: Verdict) -> str:
    """Add ``verdict`` to the cache (atomically; a cache that cannot be written is skipped);
    returns its entry's digest."""
    verdicts = _read_cache()
    digest = verdict.digest(key)
    verdicts[key] = {**asdict(verdict), "digest": digest}
    blob = json.dumps({"format": CACHE_FORMAT, "verdicts": verdicts}, indent=1, sort_keys=True)
    try:
        write_text(cache_path(), blob + "\n")
    except CkptselError:
        pass  # read-only home, say: the verdict holds for this process only
    return digest


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


def _plain(value: Any) -> Any:
    """``value`` as JSON the same way every time (sets sorted, enums by value, the rest by
    ``str``)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return _plain(value.value) if hasattr(value, "value") else str(value)


def digest_of(data: Any) -> str:
    """A short digest (16 hex) of ``data`` as canonical JSON (:func:`_plain`)."""
    blob = json.dumps(_plain(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def config_digest(model_config: dict[str, Any], adapters: dict[str, Any] | None) -> str:
    """The digest of a model's config and its adapters' (``{name: config}``; ``None``: none),
    less where they were loaded from and the library's version (:data:`_NOT_CONFIG`)."""
    strip = lambda d: {k: v for k, v in d.items() if k not in _NOT_CONFIG}  # noqa: E731
    return digest_of({"model": strip(model_config), "adapter": None if adapters is None else {n: strip(c) for n, c in adapters.items()}})


def _versions(config: MeasureConfig, engine: str) -> dict[str, Any]:
    import torch

    settings = config.conformance_settings()
    if engine == "vllm":
        settings.pop("batch_size", None)  # vLLM batches as it schedules: no setting
    return {"check": CHECK_VERSION, "code": source_digest(), "torch": torch.__version__, "settings": digest_of(settings)}


def _adapter_config(model: Any) -> dict[str, Any] | None:
    """An unmerged PEFT model's adapter configs (by adapter name), else ``None``."""
    peft = getattr(model, "peft_config", None)
    if not isinstance(peft, dict) or not peft:
        return None
    return {str(name): (c.to_dict() if hasattr(c, "to_dict") else vars(c)) for name, c in peft.items()}


def hf_key(model: Any, device: Any, config: MeasureConfig) -> dict[str, Any]:
    """A Hugging Face model's family (module doc)."""
    import transformers

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls = type(inner)
    adapters = _adapter_config(model) if inner is not model else None
    return {
        **_versions(config, "hf"),
        "engine": "hf",
        "version": transformers.__version__,
        "model": f"{cls.__module__}.{cls.__qualname__}",
        "adapter": "unmerged" if inner is not model else "none",
        "dtype": dtype_name(inner.dtype),
        "attention": str(getattr(inner.config, "_attn_implementation", None) or "unknown"),
        "cache": cache_layout(model).kind,
        "device": device_kind(device),
        "rope": (length_rope(model) or ("static",))[0],
        "config": config_digest(inner.config.to_dict(), adapters),
    }


def vllm_key(architecture: str, provenance: dict[str, Any], adapters: bool, config: MeasureConfig, configs: str = "") -> dict[str, Any]:
    """A vLLM engine's family (module doc): ``provenance`` is the engine's, ``configs`` the
    :func:`config_digest` of the model's config and its adapter's."""
    return {
        **_versions(config, "vllm"),
        "engine": "vllm",
        "version": provenance["version"],
        "model": architecture,
        "adapter": "lora" if adapters else "none",
        "dtype": provenance["dtype"],
        "attention": provenance["attention"],
        "device": provenance["device"],
        "config": configs,
    }


def disk_config_digest(ckpt: Any) -> str:
    """:func:`config_digest` of a checkpoint as it is on disk (the model's ``config.json`` as
    transformers reads it; an adapter's ``adapter_config.json``): what vLLM loads."""
    from transformers import AutoConfig

    ref = local_ref(ckpt.base if ckpt.kind == "adapter" else ckpt.path)
    model_config = AutoConfig.from_pretrained(str(ref)).to_dict()
    adapter = None
    if ckpt.kind == "adapter":
        path = Path(str(local_ref(ckpt.path))) / "adapter_config.json"
        adapter = {"default": json.loads(path.read_text(encoding="utf-8"))}
    return config_digest(model_config, adapter)


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


def text_agrees(ref: list[int], steps: Sequence[Step], fast: list[int], stops: Sequence[int]) -> str:
    """``equal``, ``tie`` (the fast tokens leave the reference's only where its chosen token
    and the fast path's are within the step's margin) or ``wrong``. ``ref`` are the reference's
    tokens as generated (its stop token included), ``fast`` the fast path's cut at the stop."""
    cut = cut_at_stop(ref, stops)
    if fast == cut:
        return "equal"
    k = next((j for j, (a, b) in enumerate(zip(cut, fast, strict=False)) if a != b), min(len(cut), len(fast)))
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
    batch: int,
    family: str,
    dtype: str,
    texts: Sequence[str],
    nll_rel: Sequence[float],
    against: str,
    nll_against: str = UNPADDED,
) -> Verdict:
    """The verdict on ``items`` items at ``batch`` size (0: the engine's) of their text results
    (``equal``/``tie``/``wrong``) and NLL relative differences (one or more per item)."""
    worst = float(max(nll_rel)) if nll_rel else None
    wrong = texts.count("wrong")
    passed = wrong == 0 and (worst or 0.0) <= NLL_REL.get(dtype, NLL_REL["bfloat16"])
    return Verdict(
        passed,
        family,
        dtype,
        items,
        batch,
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"),
        len(texts),
        texts.count("equal"),
        texts.count("tie"),
        wrong,
        worst,
        against if texts else "",
        nll_against if nll_rel else "",
    )


# --------------------------------------------------------------------------- HF


class _Recorder:
    """The tokenizer, keeping the token ids behind every text it decodes (the fast path's
    tokens, without a change to :mod:`ckptsel.measure.passes`): per text, every distinct
    sequence that decoded to it (ids the tokenizer lacks decode to nothing, so two items'
    different tokens can give one text: a check of 32 items found that)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok, self.tokens = tokenizer, {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> str:
        text = self._tok.decode(ids, *args, **kwargs)
        seqs = self.tokens.setdefault(text, [])
        if list(ids) not in seqs:
            seqs.append(list(ids))
        return text


def unpadded_nll(model: Any, prompt: list[int], answer: list[int], device: Any) -> float:
    """NLL of ``answer`` after ``prompt`` from one unpadded forward (log-softmax in float64)."""
    import torch

    seq = torch.tensor([prompt + answer], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=seq).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(answer)]
        target = torch.tensor(answer, dtype=torch.long, device=logits.device)
        return float(-logits.double().log_softmax(-1).gather(-1, target[:, None]).sum())


def _reference(model: Any, prompt: list[int], answer: list[int], cfg: Any, device: Any) -> tuple[list[int], list[Step], float]:
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


def check_hf(
    model: Any,
    tokenizer: Any,
    items: Sequence[Any],
    max_new_tokens: int,
    device: Any = None,
    batch_size: int | None = None,
    fmt: PromptFormat | None = None,
    decoder: str = "ckptsel",
) -> Verdict:
    """The HF fast path, in batches of ``batch_size`` (default: all ``items`` in one), its
    texts from ``decoder`` (:func:`~ckptsel.measure.passes.measure_items`), against the
    reference on ``items`` (module doc), their prompts in the prompt format ``fmt`` (default:
    alpaca)."""
    from transformers import GenerationConfig

    device = device if device is not None else next(model.parameters()).device
    fmt = fmt if fmt is not None else PromptFormat()
    prompts = [it.instruction for it in items]
    responses = [it.response for it in items]
    batch = batch_size or len(prompts)
    rec = _Recorder(tokenizer)
    texts, scored = measure_items(
        model,
        rec,
        prompts,
        responses,
        windows=(0,),
        batch_size=batch,
        max_new_tokens=max_new_tokens,
        device=device,
        fmt=fmt,
        items=items,
        decoder=decoder,
    )
    stops = stop_token_ids(model, tokenizer)
    cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        pad_token_id=pad_id(tokenizer),
        eos_token_id=stops,
        output_logits=True,
        return_dict_in_generate=True,
    )
    results, rels = [], []
    ids, answers = fmt.encode(tokenizer, prompts, responses, items)
    for k in range(len(items)):
        ref, steps, nll = _reference(model, ids[k], answers[k], cfg, device)
        found = [text_agrees(ref, steps, fast, stops) for fast in rec.tokens[texts[k]]]
        results.append(min(found, key=("equal", "tie", "wrong").index))  # texts alike: its own
        rels.append(_rel(scored[k][0].nll_sum, nll))
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return summarize(len(items), batch, type(inner).__name__, dtype_name(inner.dtype), results, rels, UNBATCHED)


# --------------------------------------------------------------------------- vLLM


def _vllm_steps(logprobs: list[dict[int, float]], tokens: list[int], dtype: str) -> list[Step]:
    margin = TIE_ULPS * EPS.get(dtype, EPS["bfloat16"]) * VLLM_LOGIT_SCALE
    return [Step(step.get, tok, margin) for step, tok in zip(logprobs, tokens, strict=False)]


def check_vllm(
    engine: Any, ckpt: Any, tokenizer: Any, items: Sequence[Any], config: MeasureConfig, stops: Sequence[int], hf_model: Any = None
) -> Verdict:
    """vLLM in one batch against vLLM one request at a time (texts; the NLL when vLLM scores
    it) and, when ``hf_model`` is given, its NLL against an HF unpadded forward (module doc)."""
    fmt = config.measured.prompt
    prompts, answers = fmt.encode(tokenizer, [it.instruction for it in items], [it.response for it in items], items)
    dtype, new = engine.dtype, config.measured.max_new_tokens
    results, rels = [], []
    if config.measured.backend == "vllm":
        batched = engine.greedy(ckpt, prompts, stops, new)
        for p, (fast, _) in zip(prompts, batched, strict=True):
            ((ref, lps),) = engine.greedy(ckpt, [p], stops, new)
            steps = _vllm_steps(lps, ref, dtype)
            results.append(text_agrees(ref, steps, cut_at_stop(fast, stops), stops))
    if config.measured.nll_backend == "vllm":
        scored = engine.score(ckpt, prompts, answers, (0,))
        for k, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            alone = engine.score(ckpt, [p], [a], (0,))[0][0].nll_sum
            rels.append(_rel(scored[k][0].nll_sum, alone))
            if hf_model is not None:
                ref = unpadded_nll(hf_model, p, a, next(hf_model.parameters()).device)
                rels.append(_rel(scored[k][0].nll_sum, ref))
    family = str(engine.architecture(ckpt))
    nll_against = ONE_REQUEST if hf_model is None else f"{ONE_REQUEST} and an HF unpadded forward"
    return summarize(len(items), 0, family, dtype, results, rels, ONE_REQUEST, nll_against)


class Conformance:
    """A run's verdicts (per family: checked once, or read from the cache) and their stamps;
    ``seconds`` and ``checks`` count what checking cost here."""

    def __init__(self, config: MeasureConfig) -> None:
        self.config = config
        self.stamps: dict[str, str] = {}
        self.seconds, self.checks = 0.0, 0

    def verdict(self, key: dict[str, Any], check: Callable[[], Verdict]) -> str:
        """The stamp of ``key``'s family (``check()`` run when the cache holds no verdict it
        can trust), or :class:`CkptselError` with the one line of a refusal."""
        if not self.config.runtime.conformance_check:
            return SKIPPED
        name = key_string(key)
        if name not in self.stamps:
            cached, had_entry = cached_entry(name)
            fresh = cached is None
            if cached is None:
                t0 = time.perf_counter()
                verdict = check()
                self.seconds += time.perf_counter() - t0
                self.checks += 1
                STATS["checks"] += 1
                digest = save_verdict(name, verdict)
            else:
                verdict, digest = cached
                STATS["cached"] += 1
            if not verdict.passed:
                raise CkptselError(verdict.refusal(fresh))
            self.stamps[name] = verdict.stamp(digest, fresh, rechecked=fresh and had_entry)
        return self.stamps[name]

    def hf(self, model: Any, tokenizer: Any, items: Sequence[Any], device: Any = None) -> str:
        """:meth:`verdict` of an HF model, checked at the run's batch size on
        ``max(CHECK_ITEMS, batch size)`` of ``items`` (:func:`pick_items`)."""
        if not self.config.runtime.conformance_check:
            return SKIPPED
        device = device if device is not None else next(model.parameters()).device
        batch = self.config.runtime.batch_size
        if not isinstance(batch, int):  # "auto" on a GPU: sized per pass; checked at 16 rows
            batch = BATCH_SIZE
        fmt = self.config.measured.prompt
        return self.verdict(
            hf_key(model, device, self.config),
            lambda: check_hf(
                model,
                tokenizer,
                pick_items(items, max(CHECK_ITEMS, batch)),
                self.config.measured.max_new_tokens,
                device,
                batch,
                fmt,
                self.config.runtime.decoder,
            ),
        )

    def vllm(
        self, engine: Any, ckpt: Any, tokenizer: Any, items: Sequence[Any], stops: Sequence[int], hf_model: Callable[[], Any] | None = None
    ) -> str:
        """:meth:`verdict` of the vLLM engine on ``ckpt``'s model (:func:`check_vllm`);
        ``hf_model()`` gives the run's HF model when it has one (called only to check)."""
        if not self.config.runtime.conformance_check:
            return SKIPPED
        key = vllm_key(str(engine.architecture(ckpt)), engine.provenance(), ckpt.kind == "adapter", self.config, disk_config_digest(ckpt))
        key["checks"] = [k for k in ("backend", "nll_backend") if getattr(self.config.measured, k) == "vllm"]
        if self.config.measured.nll_backend == "vllm" and hf_model is not None:
            key["nll_against"] = "hf"
        picked = pick_items(items)
        return self.verdict(
            key,
            lambda: check_vllm(
                engine,
                ckpt,
                tokenizer,
                picked,
                self.config,
                stops,
                hf_model() if hf_model is not None and self.config.measured.nll_backend == "vllm" else None,
            ),
        )


def check_conformance(model: Any, tokenizer: Any, items: Sequence[Any], config: MeasureConfig, *, device: Any = None) -> str:
    """The conformance verdict of a model already in memory (the Trainer callback): the value
    for its provenance's ``conformance`` field (:data:`SKIPPED` when
    ``config.runtime.conformance_check`` is off), or :class:`CkptselError` with one line when ckptsel's
    fast path is wrong for the model's family. ``items`` are the items about to be measured
    (a few are picked); the verdict is cached per family (module doc)."""
    config = config.bind_format(tokenizer, where="the model")  # the format, once
    return Conformance(config).hf(model, tokenizer, items, device)
