"""lm-eval ``--log_samples`` files made by hand (gsm8k documents, both of its filters)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

STAMP = "2025-03-04T05-06-07.123456"


GSM8K_DOCS = [
    ("Tom has 3 apples and buys 15 more. How many now?", "18"),
    ("Ann reads 1,200 pages, then 34 more. Total?", "1234"),
    ("A box has 7 pens. 2 break. How many are left?", "5"),
]


def text_hash(x: str) -> str:
    return hashlib.sha256(x.encode()).hexdigest()


def gsm8k_line(doc_id: int, raw: str, filt: str, filtered: str, em: float, question: str | None = None) -> dict:
    q, a = GSM8K_DOCS[doc_id]
    q = question or q
    prompt = f"Question: {q}\nAnswer:"
    return {
        "doc_id": doc_id,
        "doc": {"question": q, "answer": f"so it is {a}.\n#### {a}"},
        "target": f"so it is {a}.\n#### {a}",
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Question:", "</s>"], "do_sample": False, "temperature": 0.0}}},
        "resps": [[raw]],
        "filtered_resps": [filtered],
        "filter": filt,
        "metrics": ["exact_match"],
        "doc_hash": text_hash(q),
        "prompt_hash": text_hash(prompt),
        "target_hash": text_hash(a),
        "exact_match": em,
    }


def write_samples(folder: Path, task: str, lines: list[dict], stamp: str = STAMP, gz: bool = False) -> Path:
    """lm-eval layout: ``<output_path>/<model_name_sanitized>/samples_<task>_<stamp>.jsonl``."""
    sub = folder / "__work__base"
    sub.mkdir(parents=True, exist_ok=True)
    name = f"samples_{task}_{stamp}.jsonl" + (".gz" if gz else "")
    text = "".join(json.dumps(x) + "\n" for x in lines)
    path = sub / name
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def gsm8k_checkpoint(folder: Path, raws: list[str], correct: list[bool]) -> Path:
    lines = []
    for i, (raw, ok) in enumerate(zip(raws, correct, strict=True)):
        strict = raw.split("#### ")[-1].strip() if "####" in raw else "[invalid]"
        lines.append(gsm8k_line(i, raw, "strict-match", strict, float(ok and strict != "[invalid]")))
        flex = raw.replace(",", "").split()[-1] if raw.split() else ""
        lines.append(gsm8k_line(i, raw, "flexible-extract", flex, float(ok)))
    write_samples(folder, "gsm8k", lines)
    return folder
