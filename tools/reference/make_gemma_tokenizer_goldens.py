#!/usr/bin/env python3
"""Writes tests/data/tokenizer/gemma3_goldens.json: the token ids llama.cpp's tokenizer gives for
gemma-3-270m (base, Q4_K_M GGUF from scripts/fetch-model.sh --gemma).

Reference: llama.cpp's own `llama-tokenize` (its SPM tokenizer, llm_tokenizer_spm, for a GGUF
with tokenizer.ggml.model = "llama"), run as
    llama-tokenize -m GGUF --stdin --ids --no-bos --no-escape --log-disable
on the exact bytes of each text: no BOS, no escape processing, special tokens written in the text
parsed (llama-tokenize's default; kvq always recognises them). Needs only that binary and the
standard library (no venv).

Sections:
  strings:  hand-picked texts (English, numbers, whitespace runs, newlines, tabs, unicode, emoji
            and other byte fallback, the empty string, leading spaces, control tokens); ids in
            full.
  wikitext: wiki.test.raw read as bytes and split on b"\\n" (each item without its newline);
            per item its number of ids and the FNV-1a 32-bit hash of the ids as little-endian
            int32 bytes; the first items' ids in full ("head").
  wikitext_whole: the whole of wiki.test.raw as one text (one item).
  gsm8k:    the "question" string of every line of gsm8k/test.jsonl, as wikitext.
Items of a section are tokenized in one llama-tokenize call, joined by the control token
SEPARATOR: llama.cpp cuts special tokens out of the text first and tokenizes the text between
them independently (Gemma's add_space_prefix is false), so splitting the ids at the separator's
id gives each item's ids exactly (the script checks that no item contains the separator and
cross-checks the first items one call each).

Usage: python3 tools/reference/make_gemma_tokenizer_goldens.py
           [--gguf PATH] [--llama-tokenize PATH] [--shared-data DIR] [--out FILE]
"""

import argparse
import json
import os
import struct
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KVQ_HOME = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache" / "kvq"))
HEAD_ITEMS = 8
SEPARATOR, SEPARATOR_ID = "<unused0>", 6  # a control token of the Gemma 3 vocabulary

STRINGS = [
    "The capital of France is",
    "Hello world",
    "",
    " ",
    "  leading spaces",
    " leading space",
    "trailing spaces   ",
    "multiple   spaces    between",
    "line one\nline two\n\nline four\n\n\n",
    "\n",
    "tabs\tand\t\tmore\ttabs",
    "\t\tindented",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1,000,000 2026-12-05",
    "Crème brûlée, naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 한국어, العربية",
    "Emoji: 😀🎉👍🏽 🇫🇷 and a rare CJK 𠜎𠜱",
    "control bytes \x01\x02\x7f and a BOM \ufeff",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after a literal bos",
    "code: def f(x):\n    return x ** 2  # square\n",
    "<table><tr><td>cell</td></tr></table>",
    "▁already▁escaped",
    " = Robert Boulter = \n",
    "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning.",
]


def fnv1a32(ids):
    h = 0x811C9DC5
    for b in struct.pack(f"<{len(ids)}i", *ids):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def tokenize(binary: Path, gguf: Path, text: str):
    out = subprocess.run(
        [str(binary), "-m", str(gguf), "--stdin", "--ids", "--no-bos", "--no-escape",
         "--log-disable"],
        input=text.encode("utf-8"), capture_output=True, check=True)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def tokenize_items(binary: Path, gguf: Path, items):
    for i, text in enumerate(items):
        if SEPARATOR in text:
            raise SystemExit(f"item {i} contains the separator {SEPARATOR}")
    ids = tokenize(binary, gguf, SEPARATOR.join(items))
    out, cur = [], []
    for t in ids:
        if t == SEPARATOR_ID:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    out.append(cur)
    if len(out) != len(items):
        raise SystemExit(f"{len(out)} id lists for {len(items)} items")
    for i in range(min(3, len(items))):  # the batching changes nothing
        if tokenize(binary, gguf, items[i]) != out[i]:
            raise SystemExit(f"item {i}: batched ids differ from a call of its own")
    return out


def section(name, source, items, ids):
    return {
        "name": name,
        "source": source,
        "items": len(items),
        "tokens": sum(len(x) for x in ids),
        "lengths": [len(x) for x in ids],
        "fnv1a32": [fnv1a32(x) for x in ids],
        "head": ids[:HEAD_ITEMS],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=KVQ_HOME / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--llama-tokenize", type=Path,
                    default=KVQ_HOME / "llama.cpp" / "build-0.3.36" / "bin" / "llama-tokenize")
    ap.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests" / "data" / "tokenizer" / "gemma3_goldens.json")
    args = ap.parse_args()
    tok = (args.llama_tokenize, args.gguf)

    raw = (args.shared_data / "wikitext-2-raw" / "wiki.test.raw").read_bytes()
    wiki = [b.decode("utf-8") for b in raw.split(b"\n")]
    with open(args.shared_data / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        gsm = [json.loads(line)["question"] for line in f if line.strip()]

    strings = [{"text": s, "ids": tokenize(*tok, s)} for s in STRINGS]
    whole = [tokenize(*tok, raw.decode("utf-8"))]
    sections = [
        section("wikitext", "wikitext-2-raw/wiki.test.raw", wiki, tokenize_items(*tok, wiki)),
        section("wikitext_whole", "wikitext-2-raw/wiki.test.raw", [raw], whole),
        section("gsm8k", "gsm8k/test.jsonl", gsm, tokenize_items(*tok, gsm)),
    ]
    sections[1]["head"] = [whole[0][:64]]
    version = subprocess.run([str(args.llama_tokenize), "--version"], capture_output=True,
                             text=True).stderr.strip().splitlines()
    out = {
        "generator": "tools/reference/make_gemma_tokenizer_goldens.py",
        "llama.cpp": version[0] if version else "?",
        "reference": "llama-tokenize -m gemma-3-270m-q4_k_m.gguf --stdin --ids --no-bos "
                     "--no-escape (special tokens in the text parsed)",
        "hash": "FNV-1a 32 over the ids as little-endian int32",
        "strings": strings,
        "sections": sections,
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, separators=(",", ":"), ensure_ascii=False) + "\n",
                   encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); "
          + ", ".join(f"{s['name']}: {s['items']} items, {s['tokens']} tokens" for s in sections))


if __name__ == "__main__":
    main()
