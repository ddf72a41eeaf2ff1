"""One forward pass per batch of items on a Hugging Face model: the prompt and the reference
response go through the model once, and greedy decoding continues from that pass's KV cache.

Why one pass: the prompt is the longer half of most items, and both measurements need its
keys and values. Recomputing them (a full forward over prompt + response for the NLL, another
prefill inside ``generate``) cost a third of measurement time. A causal LM computes position
``j`` from tokens ``< j`` only, so one forward over ``prompt + response`` gives the response's
teacher-forced NLL *and*, at the prompt's last position, the first generated token; the
prompt's cached keys and values are exactly what the rest of the generation conditions on.
Values agree with a single unpadded forward and with ``generate`` to float rounding (tests
check both against such references).

Shapes: a batch is ``B`` items; row ``r`` feeds ``prompt_r + response_r[:-1]`` (``n_p`` +
``n_r - 1`` tokens; without NLL, just the prompt), right-padded to width ``W``; the vocabulary
has ``V`` tokens.

* forward: ``B × W`` tokens, no attention mask (right padding cannot reach a real token under
  causal attention, and the mask-free path is the fast one) → logits for positions
  ``n_p - 1 .. n_p + n_r - 2`` (response tokens ``0..n_r-1``; only the suffix of positions the
  batch needs is projected onto the vocabulary) and the KV cache;
* score: per row, log-softmax (float32 or wider) at those positions, the response token's NLL,
  summed in float64 in token order, per window (SPEC §3);
* decode: greedy, one token per step for every row until each row has emitted a stop token or
  ``max_new_tokens`` are done. The cache is cut to the longest prompt; row ``r`` attends to
  its prompt (``< n_p``) and to its new tokens, never to its response or padding, and its new
  tokens take positions ``n_p, n_p + 1, …``: what it would see alone.

Continuous batching (full-attention caches whose layers are plain ``DynamicLayer`` s:
:class:`_Rows`): a row leaves the batch at its stop (its cache rows are dropped, and the
columns no remaining row sees), and once a quarter of the rows are free the next waiting items
run their forward (NLL + prompt cache, as above) and join: both caches padded to the wider,
the padding masked, the new rows' columns appended below the running ones. Each row still
sees only its own columns at its own positions, so its tokens do not depend on its
neighbours (float32: identical to ``generate``, tested with stops spread over the window).
Other caches, and ``continuous=False``, decode fixed batches, finished rows fed the pad token
until the batch's longest ends (as ``generate`` does). Batch sizes: :func:`batch_plan`
(``auto``: from free GPU memory).

Items are sorted by fed length (little padding; the longest batch first, so memory problems
show at once).

Caches that are not plain full-attention layers. A sliding-window layer (transformers'
``DynamicSlidingWindowLayer``: Mistral, Mixtral, Phi-3 with ``sliding_window``, Qwen2 with
``use_sliding_window``, Gemma-2/3, ...) keeps only its last ``window - 1`` columns and counts
the window in cache *columns*, not in a row's own positions: cropping it once the window is
full raises, and in the layout above (each row's prompt at columns ``0..n_p-1``, then columns
no row sees) a shorter row's window would slide over those dead columns and drop its own
prompt tokens early — wrong texts, silently. So each batch takes one of three modes
(:func:`cache_layout`, :meth:`CacheLayout.mode`):

* ``single`` — every cached layer is full attention (or has no cache), or every column a
  sliding layer will ever hold stays inside the smallest window (``max(W, max n_p +
  max_new_tokens - 1) < window``; real models with windows of thousands of tokens): the one
  pass above;
* ``split`` — sliding layers that the batch outgrows: the NLL forward runs without a cache
  (same logits: the model applies the window from positions), and generation starts from
  its own prompt-only prefill, LEFT-padded with an attention mask and positions counted from
  each row's first real token (what ``generate`` does), so each row's tokens are contiguous
  columns ending at the current one and a window over columns is a window over its tokens;
* ``rowwise`` — cache layers of any other kind (chunked attention, linear/recurrent states,
  types this module does not know): ``split`` with one row per prefill/decode batch, no
  padding at all.

``seconds`` then also gets a ``prefill`` key (generation's own prompt forward).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ckptsel.data.prompts import PromptFormat, cached_ids
from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.errors import CkptselError
from ckptsel.measure.paged import paged_refusal, paged_texts
from ckptsel.measure.tokens import ResponseNll, cut_at_stop, encode_prompts, encode_responses, pad_id, stop_token_ids, window_sums
from ckptsel.records.schema import COMPLETE_WINDOW, MATCHED_WINDOW


def measure_items(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    responses: Sequence[str] | None = None,
    *,
    generate: bool = True,
    windows: Sequence[int] = (MATCHED_WINDOW, COMPLETE_WINDOW),
    batch_size: int | str = BATCH_SIZE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    device: Any = None,
    on_batch: Callable[[int], None] | None = None,
    seconds: dict[str, float] | None = None,
    token_cache: dict[tuple[str, str], list[int]] | None = None,
    continuous: bool = True,
    fmt: PromptFormat | None = None,
    items: Sequence[Any] | None = None,
    decoder: str = "ckptsel",
) -> tuple[list[str] | None, list[dict[int, ResponseNll]] | None]:
    """Greedy texts (if ``generate``) and response NLLs (if ``responses`` is given), input order.

    Texts exclude the prompt and the stop token (any of :func:`stop_token_ids`). NLLs are
    ``{window: ResponseNll}`` per item: the response tokens (and EOS) that remain once prompt +
    response is cut to ``window`` tokens (``0``: the complete response). ``on_batch(n)`` is
    called after each batch with its size; ``seconds`` (if given) accumulates the time spent in
    ``forward``, ``nll``, ``prefill`` (generation's own prompt forward, sliding-window caches
    only) and ``decode``. ``token_cache`` (a dict the caller keeps for one
    tokenizer, e.g. over the checkpoints of a run) saves tokenizing the same texts again.
    ``batch_size``: rows decoded together, or ``auto`` (:func:`batch_plan`); ``continuous``
    (the default) lets rows leave and join where the cache allows (module doc); with it,
    ``on_batch(n)`` is called with the ``n`` items each decode step finished.
    ``fmt`` (a :class:`ckptsel.data.PromptFormat`): ``prompts`` are the items' prompts before
    formatting, wrapped and tokenized by it (``items``: their other fields, for a template
    file; :meth:`~ckptsel.data.prompts.PromptFormat.encode`); ``None``: ``prompts`` are final
    texts, tokenized with the tokenizer's special tokens and responses scored with EOS.
    ``decoder``: ``ckptsel`` (this module's loop) or ``transformers`` (the texts from
    transformers' continuous batching, :mod:`ckptsel.measure.paged`; the NLL from this module's
    forward, its batches not counted by ``on_batch``, which then counts finished texts).
    """
    import torch

    if batch_size != "auto" and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError("batch_size must be >= 1 or 'auto'")
    if responses is not None and len(responses) != len(prompts):
        raise ValueError("prompts and responses differ in length")
    if not generate and responses is None:
        return None, None
    device = device if device is not None else next(model.parameters()).device
    if fmt is not None:
        encoded, answers = fmt.encode(tokenizer, prompts, responses, items, cache=token_cache)
    else:
        encoded = cached_ids(lambda t: encode_prompts(tokenizer, t), prompts, token_cache, "prompt")
        answers = None
        if responses is not None:
            answers = cached_ids(lambda r: encode_responses(tokenizer, r), responses, token_cache, "response")
    if any(not p for p in encoded):
        raise ValueError("empty prompt: nothing conditions the first token")
    fed = [p + a[:-1] for p, a in zip(encoded, answers, strict=True)] if answers else encoded
    stops, pad = stop_token_ids(model, tokenizer), pad_id(tokenizer)
    order = sorted(range(len(fed)), key=lambda i: (-len(fed[i]), i))
    texts: list[str] | None = [""] * len(fed) if generate else None
    scored: list[dict[int, ResponseNll]] | None = [{} for _ in fed] if answers else None
    clock = _Clock(seconds)
    paged = generate and decoder == "transformers"
    feed, limits = (fed, encoded, answers), (stops, pad, max_new_tokens)
    lists = (None if paged else texts, scored, windows)  # paged: this loop scores the NLL only
    model.eval()
    with torch.inference_mode():
        layout = _checked_layout(model)
        if paged:
            _refuse_paged(model, layout)
        alone = set(_reference_items(model, layout, encoded, answers, generate, max_new_tokens))
        stateful = layout.kind == "stateful"
        layout = layout if generate and not paged else None
        fast = [i for i in order if i not in alone]
        rows, nll_tokens = batch_plan(model, batch_size, fed, max_new_tokens if generate else 0)
        counted = None if paged else on_batch
        if continuous and layout is not None and layout.movable and fast:
            _continuous(model, fast, feed, limits, lists, (rows, nll_tokens), device, clock, tokenizer, counted)
            fast = []
        for idx in _chunks(fast, fed, rows, nll_tokens) if answers or not paged else []:
            _measure_batch(model, idx, feed, layout, limits, lists, device, clock, tokenizer)
            if counted is not None:
                counted(len(idx))
        if paged and texts is not None and fast:
            planned = None if batch_size == "auto" and torch.device(device).type == "cuda" else rows  # auto: transformers sizes it
            with clock("decode"):
                toks = paged_texts(model, [encoded[i] for i in fast], stops, pad, max_new_tokens, planned, on_batch)
            for i, row in zip(fast, toks, strict=True):
                texts[i] = tokenizer.decode(cut_at_stop(row, stops), skip_special_tokens=True)
        for i in (i for i in order if i in alone):
            answer = answers[i] if answers else None
            toks, nll = _measure_alone(model, encoded[i], answer, (generate, stateful), limits, windows, clock)
            if texts is not None:
                texts[i] = tokenizer.decode(cut_at_stop(toks, stops), skip_special_tokens=True)
            if scored is not None:
                scored[i] = nll
            if on_batch is not None:
                on_batch(1)
    return texts, scored


def _refuse_paged(model: Any, layout: CacheLayout) -> None:
    """``--decoder transformers`` on a model it cannot decode: refused in one line."""
    why = paged_refusal(model, layout.kind, length_rope(model))
    if why is not None:
        raise CkptselError(f"--decoder transformers: {why}; use --decoder ckptsel")


def _measure_batch(
    model: Any,
    idx: list[int],
    tokens: tuple[Any, Any, Any],
    layout: CacheLayout | None,
    decoding: tuple[list[int], int, int],
    out: tuple[Any, Any, Sequence[int]],
    device: Any,
    clock: _Clock,
    tokenizer: Any,
) -> None:
    """One batch of the fast path (module doc): items ``idx``; ``tokens`` = (fed, prompts,
    answers or None); fills ``out`` = (texts or None, scored or None, windows) in place."""
    fed, encoded, answers = tokens
    texts, scored, windows = out
    stops, pad, max_new_tokens = decoding
    batch = _Batch([fed[i] for i in idx], [len(encoded[i]) for i in idx], pad, device)
    mode = layout.mode(batch.width, max(batch.n_prompt), max_new_tokens) if layout else ""
    logits = cache = None
    if answers is not None or mode == "single":
        with clock("forward"):
            logits, cache = _forward(model, batch, keep_cache=mode == "single")
    if answers is not None:
        with clock("nll"):
            for row, i in enumerate(idx):
                cums = _response_nll(logits, batch, row, answers[i])
                scored[i] = window_sums(cums, batch.n_prompt[row], windows)
    if mode == "single":
        with clock("decode"):
            toks = _decode(model, cache, logits, batch, stops, pad, max_new_tokens)
    elif texts is not None:
        logits = cache = None  # the NLL forward's logits go before the prefill
        rows = 1 if mode == "rowwise" else len(idx)
        prompts = [encoded[i] for i in idx]
        toks = _decode_left_padded(model, prompts, rows, device, decoding, clock)
    if texts is not None:
        for i, row in zip(idx, toks, strict=True):
            texts[i] = tokenizer.decode(cut_at_stop(row, stops), skip_special_tokens=True)


REFILL_SHARE = 4  # waiting items join once a quarter of the rows (or all that wait) are free
AUTO_KV_SHARE = 0.5  # --batch-size auto: the rows' KV caches take at most this share of free memory
AUTO_LOGITS_SHARE = 0.2  # ... and one NLL forward's logits at most this share
AUTO_MAX_ROWS = 256  # ... and at most this many rows decode together
NO_LIMIT = 1 << 62


def batch_plan(model: Any, batch_size: int | str, fed: Sequence[list[int]], max_new_tokens: int) -> tuple[int, int]:
    """``(rows, nll_tokens)``: how many items decode together and how many fed positions one
    forward may project onto the vocabulary. An int ``batch_size`` is the rows, positions
    unbounded (what ckptsel always did). ``auto`` on the CPU: :data:`BATCH_SIZE`; on a GPU,
    sized from the memory free with the model loaded (``torch.cuda.mem_get_info``), as
    lm-eval's ``auto`` sizes its batch, but computed rather than found by trying: rows whose
    KV caches at the longest item (fed tokens + ``max_new_tokens``) fill
    :data:`AUTO_KV_SHARE` of it (at most :data:`AUTO_MAX_ROWS`, at most the items), positions
    whose logits (the model's dtype, plus float32 log-softmax) fill :data:`AUTO_LOGITS_SHARE`;
    the plan is logged (``ckptsel.measure``, INFO)."""
    import torch

    if batch_size != "auto":
        return int(batch_size), NO_LIMIT
    device = next(model.parameters()).device
    if device.type != "cuda" or not fed:
        return BATCH_SIZE, NO_LIMIT
    free, _ = torch.cuda.mem_get_info(device)
    elem = next(model.parameters()).element_size()
    longest = max(map(len, fed)) + max_new_tokens
    rows, nll_tokens = auto_plan(_text_config(model), elem, free, longest, len(fed))
    logging.getLogger("ckptsel.measure").info(
        "--batch-size auto: %d rows, %d NLL positions per forward (%.1f GiB free on %s, longest item %d tokens)",
        rows,
        nll_tokens,
        free / 2**30,
        device,
        longest,
    )
    return rows, nll_tokens


def auto_plan(cfg: Any, elem: int, free: int, longest: int, n_items: int) -> tuple[int, int]:
    """``(rows, nll_tokens)`` for ``--batch-size auto`` (:func:`batch_plan`) from the text
    config ``cfg``, bytes per value ``elem``, ``free`` bytes, the ``longest`` item's tokens
    (fed + new) and the number of items."""
    heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    per_token = 2 * int(cfg.num_hidden_layers) * heads * head_dim * elem
    rows = int(free * AUTO_KV_SHARE // (per_token * longest))
    rows = max(1, min(rows, AUTO_MAX_ROWS, n_items))
    nll_tokens = max(longest, int(free * AUTO_LOGITS_SHARE // (int(cfg.vocab_size) * (elem + 8))))
    return rows, nll_tokens


def _chunks(idx: list[int], fed: Sequence[list[int]], rows: int, nll_tokens: int) -> list[list[int]]:
    """``idx`` (longest first) cut into batches of at most ``rows`` items whose padded width
    times their count stays within ``nll_tokens`` (one item at least)."""
    out: list[list[int]] = []
    for i in idx:
        if out and len(out[-1]) < rows and len(fed[out[-1][0]]) * (len(out[-1]) + 1) <= nll_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _continuous(
    model: Any,
    fast: list[int],
    tokens: tuple[Any, Any, Any],
    decoding: tuple[list[int], int, int],
    out: tuple[Any, Any, Sequence[int]],
    sizes: tuple[int, int],
    device: Any,
    clock: _Clock,
    tokenizer: Any,
    on_batch: Callable[[int], None] | None,
) -> None:
    """Continuous batching over every item of ``fast`` (the ``single`` mode of the module doc,
    full-attention caches): at most ``rows`` (``sizes`` = (rows, nll_tokens)) decode together;
    a row leaves the batch (and its cache rows go) at its stop token or ``max_new_tokens``,
    and waiting items join once a quarter of the rows are free: their forward (NLL + prompt
    cache, as one batch of the fast path) gives their first token, and their cache rows are
    appended to the running ones (:class:`_Rows`). A row sees only its own columns, so it
    decodes what it would in any batch; fills ``out`` = (texts, scored or None, windows)."""
    import torch

    texts, scored, windows = out
    fed, encoded, answers = tokens
    rows, nll_tokens = sizes
    stop = torch.tensor(decoding[0] or [-1], dtype=torch.long, device=device)
    pending, live = list(fast), None
    how = (cache_name(model), _takes(model, "cache_position"))
    while pending or live is not None:
        free = rows - (live.n if live is not None else 0)
        if pending and free >= min(len(pending), max(1, rows // REFILL_SHARE)):
            for part in _chunks(pending[:free], fed, free, nll_tokens):
                batch = _Batch([fed[i] for i in part], [len(encoded[i]) for i in part], decoding[1], device)
                with clock("forward"):
                    logits, cache = _forward(model, batch, keep_cache=True)
                if answers is not None:
                    with clock("nll"):
                        for row, i in enumerate(part):
                            cums = _response_nll(logits, batch, row, answers[i])
                            scored[i] = window_sums(cums, batch.n_prompt[row], windows)
                new, logits = _Rows.start(part, cache, logits, batch), None
                live = new if live is None else live.join(new)
            pending = pending[free:]
        with clock("decode"):
            finished = live.step(model, stop, decoding[2], how)
        for i, toks in finished:
            texts[i] = tokenizer.decode(cut_at_stop(toks, decoding[0]), skip_special_tokens=True)
        if on_batch is not None and finished:
            on_batch(len(finished))
        if live.n == 0:
            live = None


class _Rows:
    """The rows decoding now: their items, tokens so far, KV cache (a ``DynamicCache`` of
    ``DynamicLayer`` s: keys/values ``n × H × C × D``), the columns each row sees (``mask``
    ``n × C``), the position of each row's next token (``pos``, ``n``) and the logits that
    give it (``last``, ``n × V``). Columns no row sees are dropped when rows leave."""

    def __init__(self, items: list[int], cache: Any, mask: Any, pos: Any, last: Any) -> None:
        self.items, self.cache, self.mask, self.pos, self.last = items, cache, mask, pos, last
        self.made: list[list[int]] = [[] for _ in items]

    @property
    def n(self) -> int:
        return len(self.items)

    @classmethod
    def start(cls, items: list[int], cache: Any, logits: Any, batch: _Batch) -> _Rows:
        """Rows from one fast-path forward (:func:`_forward`: logits from position ``first``,
        the cache), cut to the longest prompt as :func:`_decode` does."""
        import torch

        device = batch.ids.device
        n_p = torch.tensor(batch.n_prompt, dtype=torch.long, device=device)
        width = max(batch.n_prompt)
        if width < batch.width:
            cache.crop(width - batch.width)
        mask = (torch.arange(width, device=device)[None, :] < n_p[:, None]).long()
        last = logits[torch.arange(len(items), device=device), n_p - 1 - batch.first]
        return cls(items, cache, mask, n_p, last)

    def join(self, other: _Rows) -> _Rows:
        """``other``'s rows appended to these (both caches padded to the wider, the padding
        masked)."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        cols = max(self.mask.shape[1], other.mask.shape[1])
        wide = lambda t: F.pad(t, (0, 0, 0, cols - t.shape[-2]))  # noqa: E731
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat([wide(mine.keys), wide(theirs.keys)])
            mine.values = torch.cat([wide(mine.values), wide(theirs.values)])
        masks = [F.pad(m, (0, cols - m.shape[1])) for m in (self.mask, other.mask)]
        self.mask = torch.cat(masks)
        self.pos = torch.cat([self.pos, other.pos])
        self.last = torch.cat([self.last, other.last])
        self.items += other.items
        self.made += other.made
        return self

    def step(self, model: Any, stop: Any, max_new_tokens: int, how: tuple[str, bool]) -> list[tuple[int, list[int]]]:
        """Each row's next token; the rows that end with it leave (``(item, tokens)`` of
        each, returned); the rest take one forward step (``how``: the cache's keyword,
        :func:`cache_name`, and whether the model takes ``cache_position``)."""
        import torch

        nxt = self.last.argmax(-1)
        pairs = torch.stack([nxt, torch.isin(nxt, stop).long()]).tolist()
        keep, finished = [], []
        for r, (tok, ends) in enumerate(zip(*pairs, strict=True)):
            self.made[r].append(tok)
            if ends or len(self.made[r]) >= max_new_tokens:
                finished.append((self.items[r], self.made[r]))
            else:
                keep.append(r)
        if len(keep) < self.n:
            self._select(keep)
            if not keep:
                return finished
            nxt = nxt[torch.tensor(keep, device=nxt.device)]
        extra = {how[0]: self.cache}
        if how[1]:  # transformers 4.x
            extra["cache_position"] = torch.tensor([self.mask.shape[1]], device=nxt.device)
        ones = torch.ones((self.n, 1), dtype=self.mask.dtype, device=nxt.device)
        self.mask = torch.cat([self.mask, ones], 1)
        res = model(input_ids=nxt[:, None], position_ids=self.pos[:, None], attention_mask=self.mask, use_cache=True, **extra)
        self.last, self.cache, self.pos = res.logits[:, -1, :], _cache_of(model, res), self.pos + 1
        return finished

    def _select(self, keep: list[int]) -> None:
        """Only rows ``keep`` stay; then only the columns one of them sees."""
        import torch

        self.items = [self.items[r] for r in keep]
        self.made = [self.made[r] for r in keep]
        if not keep:
            return
        rows = torch.tensor(keep, device=self.mask.device)
        self.mask, self.pos, self.last = self.mask[rows], self.pos[rows], self.last[rows]
        seen = self.mask.any(0)
        cols = None if bool(seen.all()) else seen.nonzero()[:, 0]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[rows], layer.values[rows]
            if cols is not None:
                layer.keys, layer.values = layer.keys[:, :, cols], layer.values[:, :, cols]
        if cols is not None:
            self.mask = self.mask[:, cols]


def generate_texts(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    batch_size: int = BATCH_SIZE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    device: Any = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Greedy continuation of every prompt, in input order (see :func:`measure_items`)."""
    texts, _ = measure_items(
        model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens, device=device, on_batch=on_batch
    )
    return texts


def response_nll(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    responses: Sequence[str],
    *,
    windows: Sequence[int] = (MATCHED_WINDOW, COMPLETE_WINDOW),
    batch_size: int = BATCH_SIZE,
    device: Any = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[dict[int, ResponseNll]]:
    """Per item, ``{window: ResponseNll}`` for each requested window (see :func:`measure_items`)."""
    _, scored = measure_items(
        model, tokenizer, prompts, responses, generate=False, windows=windows, batch_size=batch_size, device=device, on_batch=on_batch
    )
    return scored


# --------------------------------------------------------------------------- the three steps


class _Batch:
    """Right-padded fed tokens (``ids`` ``B × W``), each row's prompt length ``n_p``, and
    ``first``: the first position whose logits the batch needs (``min n_p - 1``)."""

    def __init__(self, seqs: list[list[int]], n_prompt: list[int], pad: int, device: Any) -> None:
        import torch

        self.width = max(map(len, seqs))
        ids = torch.full((len(seqs), self.width), pad, dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        self.ids, self.n_prompt = ids.to(device), n_prompt
        self.first = min(n_prompt) - 1


def _forward(model: Any, batch: _Batch, *, keep_cache: bool) -> tuple[Any, Any]:
    """(logits for positions ``first .. W-1``: ``B × (W - first) × V``, the KV cache or None)."""
    extra = {"logits_to_keep": batch.width - batch.first} if _keeps_logits(model) else {}
    out = model(input_ids=batch.ids, use_cache=keep_cache, **extra)
    logits = out.logits
    if logits.shape[1] != batch.width - batch.first:  # the model projected every position
        logits = logits[:, batch.first :]
    return logits, (_cache_of(model, out) if keep_cache else None)


def _response_nll(logits: Any, batch: _Batch, row: int, answer: list[int]) -> Any:
    """Cumulative NLL (float64, CPU) of ``answer``'s tokens under ``row``'s logits, in order."""
    import torch

    start = batch.n_prompt[row] - 1 - batch.first  # the prompt's last position predicts token 0
    lg = logits[row, start : start + len(answer)]
    if lg.dtype not in (torch.float32, torch.float64):
        lg = lg.float()
    target = torch.tensor(answer, dtype=torch.long, device=lg.device)
    tok_nll = -lg.log_softmax(-1).gather(-1, target[:, None])[:, 0]
    return torch.cumsum(tok_nll.double().cpu(), 0)


def _decode(model: Any, cache: Any, logits: Any, batch: _Batch, stops: list[int], pad: int, max_new_tokens: int) -> list[list[int]]:
    """Greedy tokens per row (``B × steps``; a finished row continues with ``pad``)."""
    import torch

    device = batch.ids.device
    b = len(batch.n_prompt)
    n_p = torch.tensor(batch.n_prompt, dtype=torch.long, device=device)
    # each row sees its prompt only; the columns past the longest prompt (responses, padding)
    # are seen by no row, so they are dropped; new tokens are appended after the rest
    width = max(batch.n_prompt)
    if width < batch.width:
        cache.crop(width - batch.width)  # negative: drop that many (transformers 4.x and 5.x)
    mask = (torch.arange(width, device=device)[None, :] < n_p[:, None]).long()
    last = logits[torch.arange(b, device=device), n_p - 1 - batch.first]
    return _greedy(model, cache, (last, mask, width), n_p, stops, pad, max_new_tokens)


def _decode_left_padded(
    model: Any, prompts: list[list[int]], rows: int, device: Any, decoding: tuple[list[int], int, int], clock: _Clock
) -> list[list[int]]:
    """Greedy tokens per prompt from their own prompt-only prefill, ``rows`` prompts at a
    time (``split``: the whole batch; ``rowwise``: 1); ``decoding`` = (stops, pad,
    max_new_tokens)."""
    stops, pad, max_new_tokens = decoding
    out: list[list[int]] = []
    for k in range(0, len(prompts), rows):
        with clock("prefill"):
            cache, last, mask, n_p = _prefill(model, prompts[k : k + rows], pad, device)
        with clock("decode"):
            cols = max(len(p) for p in prompts[k : k + rows])
            out += _greedy(model, cache, (last, mask, cols), n_p, stops, pad, max_new_tokens)
        del cache
    return out


def _prefill(model: Any, prompts: list[list[int]], pad: int, device: Any) -> tuple[Any, Any, Any, Any]:
    """Prompt-only forward, LEFT-padded as ``generate`` pads: (cache, the last position's
    logits ``B × V``, attention mask ``B × P`` or None when no row is padded, prompt lengths).
    Positions count from each row's first real token, so a row sees the positions it would
    see alone, and its tokens are the last columns of the cache."""
    import torch

    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    extra = {"logits_to_keep": 1} if _keeps_logits(model) else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra)
    n_p = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    cache = _cache_of(model, out)
    if cache is None:
        raise CkptselError(f"{_model_type(model)}: the model returned no cache to decode from")
    # no padding (one row, or equal prompts): decode unmasked, as generate does for the
    # state-space families (a [B, cols] mask would broadcast into their [B, 1] step)
    return cache, out.logits[:, -1, :], (None if bool(mask.all()) else mask), n_p


def _greedy(
    model: Any, cache: Any, start: tuple[Any, Any, int], n_p: Any, stops: list[int], pad: int, max_new_tokens: int
) -> list[list[int]]:
    """Greedy decoding from a filled ``cache``; ``start`` = (``last``: the logits that give
    each row's first new token, ``mask``: the columns each row sees, None when every row sees
    every column, ``cols``: the cache's columns); ``n_p`` are the prompt lengths (row ``r``'s
    new tokens take positions ``n_p[r], n_p[r] + 1, …``). A finished row continues with
    ``pad``. The cache goes in by the name the model's ``forward`` takes (:func:`cache_name`)."""
    import torch

    last, mask, cols = start
    device = last.device
    b = last.shape[0]
    stop = torch.tensor(stops or [-1], dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    name, with_position = cache_name(model), _takes(model, "cache_position")
    out = []
    for step in range(max_new_tokens):
        nxt = torch.where(done, pad, last.argmax(-1))
        out.append(nxt)
        done = done | torch.isin(nxt, stop)
        if step + 1 == max_new_tokens or bool(done.all()):
            break
        extra = {name: cache}
        if mask is not None:
            mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=device)], 1)
            extra["attention_mask"] = mask
        if with_position:  # transformers 4.x (Mamba there needs it to tell a step from a prefill)
            extra["cache_position"] = torch.tensor([cols + step], device=device)
        res = model(input_ids=nxt[:, None], position_ids=(n_p + step)[:, None], use_cache=True, **extra)
        last, cache = res.logits[:, -1, :], _cache_of(model, res)
    return torch.stack(out, 1).tolist() if out else [[] for _ in range(b)]


# --------------------------------------------------------------------------- one item alone


def _reference_items(
    model: Any, layout: CacheLayout, encoded: list[list[int]], answers: Any, generate: bool, max_new_tokens: int
) -> list[int]:
    """The items measured one at a time by :func:`_measure_alone`: every item of a model that
    keeps its recurrent state to itself (its forward returns no cache: RecurrentGemma), and,
    under length-dependent RoPE (:func:`length_rope`), each item one of whose calls reaches
    the boundary (its NLL sequence or its prompt plus ``max_new_tokens``): there the batch's
    width would choose the frequencies, and generation rebuilds its cache on the way."""
    if layout.kind == "stateful":
        return list(range(len(encoded)))
    rope = length_rope(model)
    if rope is None:
        return []
    bound = rope[1]
    return [
        i
        for i, p in enumerate(encoded)
        if (answers is not None and len(p) + len(answers[i]) >= bound) or (generate and len(p) + max_new_tokens >= bound)
    ]


def _measure_alone(
    model: Any,
    prompt: list[int],
    answer: list[int] | None,
    what: tuple[bool, bool],
    decoding: tuple[list[int], int, int],
    windows: Sequence[int],
    clock: _Clock,
) -> tuple[list[int], dict[int, ResponseNll] | None]:
    """One item, unbatched, as the references define it: each window's NLL from one unpadded
    forward over its own cut of ``prompt + answer`` (the frequencies of that length), and the
    generated tokens from ``model.generate`` on the one prompt (greedy, ``stops``; Phi-3's
    LongRoPE rebuilds its cache when the boundary is crossed, in ``generate``). ``what`` =
    (generate, stateful): a stateful model scores with ``use_cache`` on, as its generation's
    prefill runs (RecurrentGemma on transformers 4.x computes otherwise without it)."""
    import torch

    generate, stateful = what

    device = next(model.parameters()).device
    nll: dict[int, ResponseNll] | None = None
    if answer is not None:
        nll, by_len = {}, {}
        with clock("forward"):
            for w in windows:
                seq = (prompt + answer)[:w] if w else prompt + answer
                if len(seq) not in by_len:
                    by_len[len(seq)] = _unpadded_nll(model, seq, len(prompt), stateful)
                nll[w] = window_sums(by_len[len(seq)], len(prompt), (w,))[w]
    toks: list[int] = []
    if generate:
        from transformers import GenerationConfig

        stops, pad, max_new_tokens = decoding
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, eos_token_id=stops, pad_token_id=pad)
        fresh_rope(model, device)
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        with clock("decode"):
            res = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        toks = res[0, len(prompt) :].tolist()
    return toks, nll


def _unpadded_nll(model: Any, seq: list[int], n_prompt: int, cached: bool) -> Any:
    """Cumulative NLL (float64) of ``seq[n_prompt:]`` from one forward over ``seq`` alone."""
    import torch

    if len(seq) <= n_prompt:
        return torch.zeros(0, dtype=torch.float64)
    device = next(model.parameters()).device
    fresh_rope(model, device)
    ids = torch.tensor([seq], dtype=torch.long, device=device)
    lg = model(input_ids=ids, use_cache=cached).logits[0, n_prompt - 1 : len(seq) - 1].float()
    target = ids[0, n_prompt:]
    tok_nll = -lg.log_softmax(-1).gather(-1, target[:, None])[:, 0]
    return torch.cumsum(tok_nll.double().cpu(), 0)


def fresh_rope(model: Any, device: Any) -> None:
    """Dynamic RoPE keeps the frequencies of the longest call so far until a call shorter than
    its boundary resets them (transformers' ``dynamic_frequency_update``): a one-token forward
    first, so that a call sees what it would see on a freshly loaded model."""
    import torch

    rope = length_rope(model)
    if rope is not None and rope[0] == "dynamic":
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=False)


# --------------------------------------------------------------------------- cache layouts

SLIDING_TYPES = ("sliding_attention",)  # a window over cache columns
FULL_TYPES = ("full_attention", "dummy")  # a croppable cache, or a layer that caches nothing


@dataclass(frozen=True)
class CacheLayout:
    """How a model's decoder layers cache: ``kind`` is ``full`` (every layer croppable),
    ``sliding`` (some layers keep a window; ``window`` = the smallest), ``other`` (layers
    this module cannot batch safely: chunked attention, linear/recurrent states, unknown) or
    ``stateful`` (the forward returns no cache at all: each item alone, through
    ``generate``)."""

    kind: str
    window: int | None = None
    movable: bool = field(default=False, compare=False)  # rows can leave and join (_Rows)

    def mode(self, width: int, longest_prompt: int, max_new_tokens: int) -> str:
        """``single``, ``split`` or ``rowwise`` for a batch fed ``width`` columns (module doc)."""
        if self.kind == "full":
            return "single"
        if self.kind == "sliding":
            # every column a sliding layer holds (the fed width; the longest prompt plus the
            # new tokens fed back) stays below its window: crop works, no window ever cuts
            last_col = max(width, longest_prompt + max_new_tokens - 1)
            return "single" if last_col < self.window else "split"
        return "alone" if self.kind == "stateful" else "rowwise"


def cache_layout(model: Any) -> CacheLayout:
    """The model's :class:`CacheLayout`, from the layer types and windows that transformers'
    ``DynamicCache(config=...)`` builds its layers from (``get_layer_types_and_kwargs``,
    transformers 5: one kwargs dict for all layers up to 5.2x — 5.17 on the GPU check —, a
    list of per-layer dicts later); on 4.x, the config's ``layer_types`` / ``sliding_window``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = inner.config
    cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs
    except ImportError:  # transformers 4.x
        win = getattr(cfg, "sliding_window", None)
        types = getattr(cfg, "layer_types", None) or ["sliding_attention" if win else "full_attention"] * int(cfg.num_hidden_layers)
        wins = [win] * len(types)
    else:
        types, kwargs = get_layer_types_and_kwargs(cfg)
        if isinstance(kwargs, dict):  # transformers 5.0-5.2x: one dict shared by every layer
            wins = [kwargs.get("sliding_window")] * len(types)
        else:  # later: one dict per layer
            wins = [kw.get("sliding_window") for kw in kwargs]
    if any(t not in FULL_TYPES + SLIDING_TYPES for t in types):
        return CacheLayout("other")
    sliding = [int(w) for t, w in zip(types, wins, strict=True) if t in SLIDING_TYPES and w]
    return CacheLayout("sliding", min(sliding)) if sliding else CacheLayout("full")


def length_rope(model: Any) -> tuple[str, int] | None:
    """``(kind, boundary)`` when the model's RoPE frequencies depend on the length of the
    forward call (transformers' ``dynamic_rope_update``): ``longrope`` (Phi-3: long factors
    once a call passes ``original_max_position_embeddings``) or ``dynamic`` (NTK scaling past
    ``max_position_embeddings``); None for static RoPE. Calls shorter than the boundary see
    the unscaled frequencies."""
    cfg = _text_config(model)
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return None
    nested = [v for v in params.values() if isinstance(v, dict)]
    for p in [params, *nested]:
        kind = str(p.get("rope_type", p.get("type", "")))
        orig = p.get("original_max_position_embeddings")
        if kind == "longrope":
            return "longrope", int(orig or cfg.original_max_position_embeddings)
        if "dynamic" in kind:
            bound = int(cfg.max_position_embeddings)
            return "dynamic", min(bound, int(orig)) if orig else bound
    return None


def cache_name(model: Any) -> str:
    """The keyword the model's ``forward`` takes its cache by: ``cache`` (transformers 5.x,
    every family; ``past_key_values`` and Mamba's ``cache_params`` are deprecated there,
    removal announced for 5.40), else ``cache_params`` (Mamba on 4.x), else
    ``past_key_values``. A name the model does not take would be dropped into its
    ``**kwargs``, and every decode step would run without its context."""
    for name in ("cache", "cache_params"):
        if _takes(model, name):
            return name
    return "past_key_values"


def _cache_of(model: Any, out: Any) -> Any:
    """The cache a forward returned (``out.cache`` on 5.x, read without the deprecated
    aliases), or None."""
    keys = out.keys() if hasattr(out, "keys") else ()
    for name in ("cache", "past_key_values", "cache_params"):
        if name in keys:
            return out[name]
    return None


def _checked_layout(model: Any) -> CacheLayout:
    """:func:`cache_layout`, checked against the cache a two-token forward returns (one token
    would be a decode step without a state for RecurrentGemma on 4.x): none at
    all (RecurrentGemma keeps its state inside the model; hybrids on transformers 4.x want
    their cache built for them) -> ``stateful`` (every item alone, :func:`_measure_alone`);
    a cache that is not a plain ``DynamicCache`` (transformers 4.x's Mamba and hybrid caches:
    no ``crop``) where the config promised one -> ``other`` (row by row)."""
    import torch

    layout = cache_layout(model)
    device = next(model.parameters()).device
    out = model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=device), use_cache=True)
    cache = _cache_of(model, out)
    if cache is None:
        return CacheLayout("stateful")
    if layout.kind != "other" and type(cache).__name__ != "DynamicCache":
        return CacheLayout("other")
    layers = getattr(cache, "layers", None)  # transformers 4.x before 4.56: key_cache lists
    movable = (
        layout.kind == "full"
        and bool(layers)
        and all(type(layer).__name__ == "DynamicLayer" and getattr(layer, "is_initialized", True) for layer in layers)
    )
    return replace(layout, movable=movable)


def _text_config(model: Any) -> Any:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = inner.config
    return cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg


def _model_type(model: Any) -> str:
    return str(getattr(_text_config(model), "model_type", type(model).__name__))


def _takes(model: Any, name: str) -> bool:
    """Whether the model's (the PEFT base model's) ``forward`` takes keyword ``name``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return name in inspect.signature(type(inner).forward).parameters
    except (TypeError, ValueError):
        return False


def _keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (recent transformers)."""
    return _takes(model, "logits_to_keep")


class _Clock:
    """``with clock(name):`` adds the block's wall time to ``seconds[name]`` (if given)."""

    def __init__(self, seconds: dict[str, float] | None) -> None:
        self.seconds = seconds
        self.name, self.t0 = "", 0.0

    def __call__(self, name: str) -> _Clock:
        self.name = name
        return self

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if self.seconds is not None:
            self.seconds[self.name] = self.seconds.get(self.name, 0.0) + (time.perf_counter() - self.t0)
