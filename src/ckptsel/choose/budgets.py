"""The validation items behind every budget, as lists another harness can run.

Every rule chooses on the same subsets of a trajectory's eligible validation pool
(:class:`ckptsel.choose.choices.PoolSubsets`): for the nested scheme, permutation ``p``'s first
``b`` items for each finite budget ``b``; for the one-variant sensitivity, one variant of each of
the first ``b`` groups in permutation ``p``'s group order (its ``full`` budget: one variant of
every group). Those subsets depend only on the pool's item ids, their groups and the settings
(seed, permutations, budgets), so they can be listed before anything is chosen and run
elsewhere (an lm-eval or inspect task filtered to the listed ids): a rule run on permutation
``p``'s items at budget ``b`` picks what ``ckptsel`` picked there.

:func:`budget_items` gives every pool's permutations as one long table (:data:`COLUMNS`) and an
index (the settings, the pools, their budgets); :func:`subset` one budget of one permutation as
JSON, with its digest (:func:`subset_digest`: SHA-256 of the sorted item ids, one per line, so it
names the set whatever its order).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel._util.io import write_parquet, write_text
from ckptsel._util.locations import Location, as_location
from ckptsel.choose import core
from ckptsel.choose.choices import one_variant_orders, pool_key, pools_of
from ckptsel.choose.settings import FULL, ChoiceSettings, budget_labels_for_pool
from ckptsel.errors import CkptselError
from ckptsel.records.load import ValidationData

COLUMNS = ("pool", "scheme", "permutation", "rank", "item_id")
SCHEMES = ("nested", "one_variant")
ITEMS_FILE = "budget_items.parquet"  # in a results folder's choices/, and `ckptsel budgets --out`
INDEX_FILE = "budget_items.json"


def pool_id(v: ValidationData) -> str:
    """A short name of a trajectory's validation pool (the first 12 hex digits of its key)."""
    return pool_key(v).hex()[:12]


def subset_digest(item_ids: Sequence[str]) -> str:
    """SHA-256 of the item ids, sorted, one per line (the digest of the set, whatever its order)."""
    return hashlib.sha256("\n".join(sorted(map(str, item_ids))).encode("utf-8")).hexdigest()


def _orders(orders: np.ndarray) -> dict[str, np.ndarray]:
    """The long columns of ``orders`` ``(P, m)`` (item indices; row ``p`` is permutation ``p``)."""
    n_orders, m = orders.shape
    return {
        "permutation": np.repeat(np.arange(n_orders, dtype=np.int32), m),
        "rank": np.tile(np.arange(m, dtype=np.int32), n_orders),
        "item": orders.ravel(),
    }


def _pool(v: ValidationData, settings: ChoiceSettings) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """``v``'s pool: its entry of :func:`budget_items`' index (less the trajectories) and its rows:
    the pool's ids once (scheme ``pool``), the nested permutations up to the largest finite
    budget, the one-variant orders whole."""
    ids = np.asarray(v.item_ids).astype(str).astype(object)
    keys = core.string_keys(ids)
    pool, n = pool_id(v), len(ids)
    finite, labels = budget_labels_for_pool(n, settings.budgets)
    nested = core.permutations(keys, settings.seed, settings.permutations)[:, : max(finite, default=0)]
    ov = one_variant_orders(keys, v.groups, settings)  # (P, G): the subsets' own orders
    n_groups = ov.shape[1]
    ov_finite, ov_labels = budget_labels_for_pool(n_groups, settings.one_variant_budgets)
    entry = {
        "pool": pool,
        "items": int(n),
        "groups": int(n_groups),
        "digest": subset_digest(ids),
        "budgets": {
            "nested": dict(zip(labels, map(int, [*finite, n]), strict=True)),
            "one_variant": dict(zip(ov_labels, map(int, [*ov_finite, n_groups]), strict=True)),
        },
    }
    whole = np.arange(n)[None, :]  # the pool itself, once: every permutation's "full"
    return entry, {"pool": _orders(whole), "nested": _orders(nested), "one_variant": _orders(ov)}


def budget_items(validation: list[ValidationData], settings: ChoiceSettings) -> tuple[pd.DataFrame, dict]:
    """Every subset the rules choose on: ``(table, index)``.

    ``table`` (:data:`COLUMNS`) holds each pool's permutations once (the trajectories that
    share a pool share its subsets), pools in :func:`~ckptsel.choose.choices.pools_of`'s order,
    then scheme, permutation and rank: budget ``b``'s subset in permutation ``p`` is the rows of
    ``p`` with ``rank < b`` (the index's ``budgets`` give each label's size in that pool); the
    nested scheme's ``full`` is the whole pool in every permutation: the rows of scheme ``pool``
    (permutation 0). ``index`` (JSON) holds the
    settings and each pool's trajectories, items, groups, budgets and the digest of its ids."""
    pools, parts, ids = [], [], []
    for members in pools_of(validation):
        v = validation[members[0]]
        entry, rows = _pool(v, settings)
        pools.append({**entry, "trajectories": sorted(validation[j].trajectory for j in members)})
        parts.append(rows)
        ids.append(np.asarray(v.item_ids).astype(str).astype(object))
    index = {
        "settings": {"permutations": settings.permutations, "seed": settings.seed, "budgets": list(settings.budgets)},  # not the rules
        "subset": "budget b of permutation p: the rows of p with rank < b",
        "digest": "SHA-256 of the item ids, sorted, one per line",
        "pools": pools,
    }
    return _table([p["pool"] for p in pools], parts, ids), index


def _table(names: list[str], parts: list[dict], ids: list[np.ndarray]) -> pd.DataFrame:
    """The long table of every pool's orders (``parts[k][scheme]``: columns with item indices
    into ``ids[k]``), its string columns categorical (one dictionary each, written once)."""
    items = np.unique(np.concatenate(ids)) if ids else np.array([], dtype=object)
    schemes = ["pool", *SCHEMES]
    cols: dict[str, list[np.ndarray]] = {"pool": [], "scheme": [], "permutation": [], "rank": [], "item_id": []}
    for k, (part, pool_ids) in enumerate(zip(parts, ids, strict=True)):
        codes = np.searchsorted(items, pool_ids)  # the pool's items in the one dictionary
        for s, scheme in enumerate(schemes):
            rows = part[scheme]
            cols["pool"].append(np.full(len(rows["item"]), k, dtype=np.int32))
            cols["scheme"].append(np.full(len(rows["item"]), s, dtype=np.int32))
            cols["permutation"].append(rows["permutation"])
            cols["rank"].append(rows["rank"])
            cols["item_id"].append(codes[rows["item"]])
    flat = {c: np.concatenate(v) if v else np.array([], dtype=np.int32) for c, v in cols.items()}
    return pd.DataFrame(
        {
            "pool": pd.Categorical.from_codes(flat["pool"], categories=names),
            "scheme": pd.Categorical.from_codes(flat["scheme"], categories=schemes),
            "permutation": flat["permutation"].astype(np.int32),
            "rank": flat["rank"].astype(np.int32),
            "item_id": pd.Categorical.from_codes(flat["item_id"], categories=items),
        }
    )


def subset(table: pd.DataFrame, index: dict, budget: str, permutation: int, pool: str | None, scheme: str) -> dict:
    """One subset of :func:`budget_items`' table as JSON (its item ids in permutation order and
    their digest), or one error naming what is not there."""
    pools = {p["pool"]: p for p in index["pools"]}
    if pool is None:
        if len(pools) != 1:
            raise CkptselError(f"the records have {len(pools)} validation pools: name one with --pool ({', '.join(pools)})")
        pool = next(iter(pools))
    if pool not in pools:
        raise CkptselError(f"no validation pool {pool!r} (the pools: {', '.join(pools) or 'none'})")
    sizes = pools[pool]["budgets"].get(scheme)
    if sizes is None:
        raise CkptselError(f"unknown scheme {scheme!r} (one of {', '.join(SCHEMES)})")
    if budget not in sizes:
        raise CkptselError(f"pool {pool} has no {scheme} budget {budget!r} (its budgets: {', '.join(sizes)})")
    n_perm = int(index["settings"]["permutations"])
    if not isinstance(permutation, int) or not 0 <= permutation < n_perm:
        raise CkptselError(f"--permutation must be 0 to {n_perm - 1} (got {permutation!r})")
    whole = scheme == "nested" and budget == FULL
    rows = table[
        (table["pool"] == pool)
        & (table["scheme"] == ("pool" if whole else scheme))
        & (table["permutation"] == (0 if whole else permutation))
    ]
    ids = rows.sort_values("rank")["item_id"].to_numpy()[: sizes[budget]].tolist()
    return {
        "pool": pool,
        "trajectories": pools[pool]["trajectories"],
        "scheme": scheme,
        "budget": budget,
        "permutation": permutation,
        "items": len(ids),
        "digest": subset_digest(ids),
        "item_ids": ids,
    }


def write_budget_items(out_dir: Path | Location, validation: list[ValidationData], settings: ChoiceSettings) -> None:
    """:func:`budget_items` of ``validation`` as :data:`ITEMS_FILE` and :data:`INDEX_FILE` in
    ``out_dir`` (a results folder's ``choices/``, or ``ckptsel budgets --out``)."""
    write_lists(out_dir, *budget_items(validation, settings))


def write_lists(out_dir: Path | Location, table: pd.DataFrame, index: dict) -> None:
    """:func:`budget_items`' ``table`` and ``index`` as :data:`ITEMS_FILE` and :data:`INDEX_FILE`."""
    write_parquet(out_dir / ITEMS_FILE, table)
    write_text(out_dir / INDEX_FILE, json.dumps(index, indent=1, sort_keys=True) + "\n")


def read_budget_items(folder: Path | Location) -> tuple[pd.DataFrame, dict]:
    """The table and index :func:`write_budget_items` wrote in ``folder`` (a local folder or a
    URL; one error naming the file when either is missing or unreadable)."""
    folder = as_location(folder)
    items, index = folder / ITEMS_FILE, folder / INDEX_FILE
    try:
        blob = json.loads(index.read_text(encoding="utf-8"))
        table = pd.read_parquet(io.BytesIO(items.read_bytes()), columns=list(COLUMNS))
    except (OSError, ValueError, KeyError, CkptselError) as err:
        raise CkptselError(f"{folder}: no readable {ITEMS_FILE} and {INDEX_FILE} ({err})") from None
    _check_index(blob, index)
    unknown = set(map(str, table["pool"].unique())) - {p["pool"] for p in blob["pools"]}
    if unknown:
        raise CkptselError(f"{items}: pool {sorted(unknown)[0]!r} is not in {index.name}")
    return table, blob


def _check_index(blob, path: Path) -> None:
    """One error naming ``path`` and the key, unless ``blob`` is an index :func:`budget_items`
    makes (the settings, and per pool its name, trajectories, sizes and budgets)."""

    def fail(key: str, what: str):
        raise CkptselError(f"{path}: {key}: {what}")

    def whole(value, key: str, low: int = 0) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            fail(key, f"expected a whole number >= {low}, got {value!r}")

    if not isinstance(blob, dict) or not isinstance(blob.get("settings"), dict) or not isinstance(blob.get("pools"), list):
        fail("index", "not a budget index (it needs 'settings' and 'pools')")
    whole(blob["settings"].get("permutations"), "settings.permutations", 1)
    for k, pool in enumerate(blob["pools"]):
        at = f"pools[{k}]"
        if not isinstance(pool, dict) or not isinstance(pool.get("pool"), str):
            fail(at, "expected an object with a 'pool' name")
        trajectories = pool.get("trajectories")
        if not isinstance(trajectories, list) or not all(isinstance(t, str) for t in trajectories):
            fail(f"{at}.trajectories", "expected a list of names")
        whole(pool.get("items"), f"{at}.items")
        budgets = pool.get("budgets")
        if not isinstance(budgets, dict) or set(budgets) != set(SCHEMES):
            fail(f"{at}.budgets", f"expected one object per scheme ({', '.join(SCHEMES)})")
        for scheme, sizes in budgets.items():
            if not isinstance(sizes, dict):
                fail(f"{at}.budgets.{scheme}", "expected an object of budget sizes")
            for label, size in sizes.items():
                whole(size, f"{at}.budgets.{scheme}.{label}")
