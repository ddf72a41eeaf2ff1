"""Overlap audit between fine-tuning, validation and test questions (SPEC §9).

A checkpoint chosen on validation items that also sit in the training set, or scored on test
items the model trained on, measures memorisation. The audit checks every pair of pools
(train–validation, train–test, validation–test) with four checks:

``exact``
    identical question strings.
``normalized``
    identical after :func:`normalize`: Unicode NFKC, case folding, every punctuation
    character (Unicode category P*) replaced by a space, whitespace collapsed.
``char13``
    Jaccard similarity of the *sets* of character 13-grams of the normalized texts
    ``>= threshold`` (default 0.8). A normalized text shorter than 13 characters is its own
    single gram; an empty one has none and never matches.
``word5``
    the pair shares at least one word 5-gram (normalized text split on whitespace; texts
    under 5 words have none), ignoring *template* 5-grams that occur in at least 5% (and
    at least 20) of the questions of either pool: prompt boilerplate such as the commonsense
    files' "please answer the following question with true or false" would otherwise pair
    every question with every other (no GSM8K 5-gram reaches 5%; BoolQ has 15 such grams). This is deliberately sensitive: common phrasing
    ("calculate the total number of") is shared by unrelated questions, so read its counts
    with the histogram of shared 5-grams per flagged pair that the report gives. Pairs are
    enumerated for the rarest grams first up to a budget (20M); past it the report says the
    pair list is incomplete (the item counts stay exact).

``char13`` is exact and fast: candidates come from an inverted index over *prefixes* (the
AllPairs prefix filter, :class:`JaccardIndex`). Under any global order of grams, two sets with
Jaccard >= t share a gram among the first ``|x| - ceil(t|x|) + 1`` grams of each. The order
puts grams the second pool lacks first (no pair can share them) and the second pool's grams
rarest first, so most prefixes hold no shareable gram and candidates are few (2 for GSM8K
train × test before planting). Every candidate passes a size filter and an exact integer
Jaccard test (the threshold is read as a decimal fraction, 0.8 = 4/5), so nothing at or above
the threshold is missed and nothing below it is reported; :func:`brute_force_jaccard_pairs`
is the all-pairs reference the tests compare against. The first pool of each pair (the
fine-tuning set) is streamed: memory grows with the validation/test pools, time linearly
with the training set.

Planted positive control: for every pair (A, B) the audit copies questions of A into B —
verbatim (``exact``), with changed case and punctuation (``case_punct``) and with one word
replaced (``one_word``) — and checks that the checks meant to find each planted pair find it
(exact: all four; case_punct: normalized, char13, word5; one_word: char13, word5). A
``one_word`` plant is only made from a question long enough that the edited copy still has
char-13 Jaccard >= threshold (computed directly); if A has none, that plant is reported as
skipped. Planted items sit after B's real items and every pair touching them is removed from
the real findings, so the reported overlaps are those of the real pools.

The package, in the order its modules build on each other: :mod:`~.grams` (normalized text,
n-grams, Jaccard), :mod:`~.indexes` (:class:`JaccardIndex`, :class:`SharedGramIndex`),
:mod:`~.findings` (the result types, JSON and Markdown), :mod:`~.plant` (the positive
control's copies), :mod:`~.run` (:func:`audit_pools`), :mod:`~.files` (:func:`audit_files`,
:func:`read_questions`, :func:`write_audit`).
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
