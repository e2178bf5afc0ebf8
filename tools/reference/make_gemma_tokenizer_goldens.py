#!/usr/bin/env python3
"""Writes tests/data/tokenizer/gemma3_goldens.json: the token ids transformers gives for
gemma-3-270m (base, Q4_K_M GGUF from scripts/fetch-model.sh --gemma) on WikiText-2 test and
GSM8K test, as per-item lengths and hashes (the ids themselves would be megabytes).

Reference: the tokenizer transformers builds from the GGUF
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`: GGUFGemmaConverter, a Unigram model over
the GGUF's tokens and scores with byte fallback), encoding without special tokens.

Items (the same definition as make_tokenizer_goldens.py):
  wikitext: wiki.test.raw read as bytes and split on b"\\n"; each item keeps its trailing b"\\r";
            decoded as UTF-8.
  gsm8k:    the "question" string of every line of gsm8k/test.jsonl.
Per item: its number of ids and the FNV-1a 32-bit hash of the ids as little-endian int32 bytes.
The first items' ids are written out in full ("head") so a mismatch is readable.

It also loads the directory `kvq convert` wrote (--converted, optional) with
AutoTokenizer.from_pretrained and records how many items it encodes differently from the GGUF
tokenizer ("converted_dir_items_differing"; see docs/status.md for why it is not 0).

Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_gemma_tokenizer_goldens.py
           [--gguf PATH] [--converted DIR] [--shared-data DIR] [--out FILE]
"""

import argparse
import json
import os
import struct
import tempfile
from pathlib import Path

import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
KVQ_HOME = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache" / "kvq"))
HEAD_ITEMS = 8


def fnv1a32(ids):
    h = 0x811C9DC5
    for b in struct.pack(f"<{len(ids)}i", *ids):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def gguf_tokenizer(gguf: Path):
    with tempfile.TemporaryDirectory() as d:
        link = Path(d) / gguf.name
        link.symlink_to(gguf.resolve())
        return AutoTokenizer.from_pretrained(d, gguf_file=gguf.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=KVQ_HOME / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--converted", type=Path, default=KVQ_HOME / "gemma-3-270m")
    ap.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests" / "data" / "tokenizer" / "gemma3_goldens.json")
    args = ap.parse_args()

    wiki = [b.decode("utf-8") for b in
            (args.shared_data / "wikitext-2-raw" / "wiki.test.raw").read_bytes().split(b"\n")]
    with open(args.shared_data / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        gsm = [json.loads(line)["question"] for line in f if line.strip()]

    ref = gguf_tokenizer(args.gguf)
    conv = None
    if (args.converted / "tokenizer.json").exists():
        conv = AutoTokenizer.from_pretrained(args.converted)

    sections = []
    interop = {}
    for name, source, items in (("wikitext", "wikitext-2-raw/wiki.test.raw", wiki),
                                ("gsm8k", "gsm8k/test.jsonl", gsm)):
        ids = [ref(text, add_special_tokens=False).input_ids for text in items]
        sections.append({
            "name": name,
            "source": source,
            "items": len(items),
            "tokens": sum(len(x) for x in ids),
            "lengths": [len(x) for x in ids],
            "fnv1a32": [fnv1a32(x) for x in ids],
            "head": ids[:HEAD_ITEMS],
        })
        if conv is not None:
            interop[name] = sum(conv(text, add_special_tokens=False).input_ids != x
                                for text, x in zip(items, ids))
    out = {
        "generator": "tools/reference/make_gemma_tokenizer_goldens.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "reference": "AutoTokenizer.from_pretrained(dir, gguf_file=gemma-3-270m-q4_k_m.gguf), "
                     "add_special_tokens=False",
        "hash": "FNV-1a 32 over the ids as little-endian int32",
        "converted_dir_items_differing": interop if conv is not None else None,
        "sections": sections,
    }
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); "
          + ", ".join(f"{s['name']}: {s['items']} items, {s['tokens']} tokens" for s in sections)
          + f"; converted dir differs on {interop}")


if __name__ == "__main__":
    main()
