#!/usr/bin/env python3
"""Writes the tokenizer goldens (tests/data/tokenizer/) from the real Hugging Face tokenizer.

Reference: SmolLM2-135M-Instruct's tokenizer as transformers builds it from the GGUF
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`), with ONE correction: transformers'
GGUF converter gives it a plain `ByteLevel` pre-tokenizer, but the GGUF says
`tokenizer.ggml.pre = "smollm"`, which llama.cpp tokenizes by first splitting every Unicode
digit into its own piece and then applying the GPT-2 byte-level regex -- exactly what the
original SmolLM2 tokenizer.json does with `Sequence[Digits(individual_digits=true), ByteLevel]`.
The two differ whenever whitespace runs precede a digit ("a  1": [a, ĠĠ, 1] vs [a, Ġ, Ġ, 1])
or a space precedes a non-ASCII numeric char (" ½"). We therefore install the original
pre-tokenizer on the transformers tokenizer (vocab, merges and added tokens unchanged) and
record in the header how many items the unpatched converter tokenizes differently.

Outputs (both small, committed):
  smollm2_goldens.bin   little-endian sections, in the order listed in the JSON header; each
                        section: uint32 n, uint32 offsets[n + 1] (token offsets, offsets[0] = 0),
                        uint16 ids[offsets[n]] (vocab is 49152 < 65536).
  smollm2_goldens.json  versions, sources, the exact definition of an item, section order and
                        totals, plus the chat-template cases (messages, rendered text, ids).

Items:
  wikitext: wiki.test.raw read as bytes and split on b"\\n" (Python bytes.split), so there are
            count(b"\\n") + 1 items; each keeps its trailing b"\\r" (the file has CRLF line ends)
            and the last item is whatever follows the final b"\\n" (empty here). Each item is
            decoded as UTF-8 and encoded without special tokens.
  gsm8k:    the "question" string of the first 200 lines of gsm8k/test.jsonl, encoded without
            special tokens.

Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_tokenizer_goldens.py
           [--gguf PATH] [--shared-data DIR] [--out DIR] [--save-tokenizer DIR]
"""

import argparse
import json
import os
import struct
import sys
import tempfile
from pathlib import Path

import tokenizers
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]

CHATS = [
    {
        "name": "user_only_with_generation_prompt",
        "messages": [{"role": "user", "content": "What is 12 + 30? Answer briefly."}],
        "add_generation_prompt": True,
    },
    {
        "name": "system_and_user",
        "messages": [
            {"role": "system", "content": "You are a terse math tutor.\nUse digits: 1234."},
            {"role": "user", "content": "Natalia sold clips to 48 of her friends in April."},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "multi_turn_no_generation_prompt",
        "messages": [
            {"role": "user", "content": "Hi! Café au lait costs €3.50 — ok?"},
            {"role": "assistant", "content": "Yes,  that's  fine.\n\n  Anything else?"},
            {"role": "user", "content": "No thanks <3  "},
        ],
        "add_generation_prompt": False,
    },
]


def write_sections(path: Path, sections):
    with open(path, "wb") as f:
        for ids_list in sections:
            f.write(struct.pack("<I", len(ids_list)))
            offsets = [0]
            for ids in ids_list:
                offsets.append(offsets[-1] + len(ids))
            f.write(struct.pack(f"<{len(offsets)}I", *offsets))
            flat = [i for ids in ids_list for i in ids]
            assert all(0 <= i < 65536 for i in flat)
            f.write(struct.pack(f"<{len(flat)}H", *flat))


def bytes_to_unicode():
    """GPT-2's byte -> printable char table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tiny_tokenizer(pre_tokenizer, post_processor=None, added_tokens=(), ignore_merges=False):
    """A hand-written byte-level BPE: the 256 byte tokens (id = byte value) and a few merges."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("Ġ", "t"), ("Ġt", "he"), ("he", "ll"), ("hell", "o"),
              ("Ġ", "Ġ"), ("1", "2"), ("Ġ", "1"), ("ĠĠ", "Ġ"), ("a", "a"), ("Ã", "©")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["worldwide"] = len(vocab)  # reachable only through ignore_merges
    added = []
    for i, tok in enumerate(added_tokens):
        added.append(dict({"id": len(vocab) + i, "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": False, "special": True}, **tok))
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


TINY_TEXTS = [
    "", "hello the world", "hello  the   12 123  4\n\n5", " the\tthe\r\n", "héllo é",
    "aaaaa aaa", "it's 'll 've x'd", "worldwide worldwidex", "½ ²³ ٣٤", "<s>hi</s> <s>",
    "a <pad>  b <pad>c", "x\u3000 y\u00a0z", "🙂 emoji 🙂🙂", "trailing   ",
    "\x00\x01\x7f\u0085 ctrl",
]


def write_tiny_goldens(out: Path):
    """Tiny hand-written tokenizers (committed) and the reference ids for TINY_TEXTS."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    specials = [{"content": "<s>"}, {"content": "</s>"},
                {"content": "<pad>", "lstrip": True, "rstrip": True, "special": False}]
    bos = {"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                    {"Sequence": {"id": "B", "type_id": 1}}],
           "special_tokens": {"<s>": {"id": "<s>", "ids": [269], "tokens": ["<s>"]}}}
    variants = {
        "tiny_bytelevel.json": tiny_tokenizer(byte_level, added_tokens=specials),
        "tiny_digits.json": tiny_tokenizer(
            {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True}, byte_level]},
            post_processor=bos, added_tokens=specials, ignore_merges=True),
        "tiny_split.json": tiny_tokenizer(
            {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithPrevious",
                 "invert": False},
                {"type": "Split", "pattern": {"String": "l"}, "behavior": "Removed",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
            post_processor={"type": "ByteLevel", "add_prefix_space": False,
                            "trim_offsets": True, "use_regex": True}),
        "tiny_digit_groups.json": tiny_tokenizer(
            {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": False},
                {"type": "Split", "pattern": {"Regex": "[ae]"}, "behavior": "MergedWithNext",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "o+"}, "behavior": "Contiguous",
                 "invert": True},
                byte_level]}),
    }
    assert variants["tiny_digits.json"]["added_tokens"][0]["id"] == 269
    cases = {}
    for name, spec in variants.items():
        text = json.dumps(spec, indent=1, ensure_ascii=False) + "\n"
        (out / name).write_text(text, encoding="utf-8")
        t = tokenizers.Tokenizer.from_str(text)
        rows = []
        for s in TINY_TEXTS:
            for add in (False, True):
                ids = t.encode(s, add_special_tokens=add).ids
                rows.append({"text": s, "add_special_tokens": add, "ids": ids,
                             "decoded_skip_special": t.decode(ids, skip_special_tokens=True)})
        cases[name] = rows
    (out / "tiny_goldens.json").write_text(json.dumps(
        {"generator": "tools/reference/make_tokenizer_goldens.py",
         "versions": {"tokenizers": tokenizers.__version__}, "cases": cases},
        indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser(
        "~/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--shared-data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "tokenizer"))
    ap.add_argument("--save-tokenizer", default=None,
                    help="also save the corrected tokenizer (tokenizer.json etc.) here")
    args = ap.parse_args()

    gguf = Path(args.gguf).resolve()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    unpatched = tok.backend_tokenizer
    patched = tokenizers.Tokenizer.from_str(unpatched.to_str())
    converter_pre = json.loads(unpatched.to_str())["pre_tokenizer"]
    patched.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    if args.save_tokenizer:
        tok._tokenizer = patched  # save_pretrained writes the backend's tokenizer.json
        tok.save_pretrained(args.save_tokenizer)
        patched.save(str(Path(args.save_tokenizer) / "tokenizer.json"))

    data = Path(args.shared_data)
    wiki_items = (data / "wikitext-2-raw" / "wiki.test.raw").read_bytes().split(b"\n")
    wiki_text = [b.decode("utf-8") for b in wiki_items]
    gsm_text = []
    with open(data / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        for line in f:
            gsm_text.append(json.loads(line)["question"])
            if len(gsm_text) == 200:
                break

    def encode_all(t, texts):
        return [e.ids for e in t.encode_batch(texts, add_special_tokens=False)]

    wiki_ids = encode_all(patched, wiki_text)
    gsm_ids = encode_all(patched, gsm_text)
    wiki_diff = sum(a != b for a, b in zip(wiki_ids, encode_all(unpatched, wiki_text)))
    gsm_diff = sum(a != b for a, b in zip(gsm_ids, encode_all(unpatched, gsm_text)))
    for texts, ids_list in ((wiki_text, wiki_ids), (gsm_text, gsm_ids)):
        for text, ids in zip(texts, ids_list):
            assert patched.decode(ids, skip_special_tokens=False) == text

    chats = []
    for chat in CHATS:
        rendered = tok.apply_chat_template(chat["messages"], tokenize=False,
                                           add_generation_prompt=chat["add_generation_prompt"])
        chats.append(dict(chat, rendered=rendered,
                          ids=patched.encode(rendered, add_special_tokens=False).ids))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_sections(out / "smollm2_goldens.bin", [wiki_ids, gsm_ids])
    header = {
        "generator": "tools/reference/make_tokenizer_goldens.py",
        "versions": {"transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "reference": "AutoTokenizer.from_pretrained(gguf dir, gguf_file=" + gguf.name +
                     ") with pre_tokenizer replaced by Sequence[Digits(individual_digits=true), "
                     "ByteLevel(add_prefix_space=false, use_regex=true)] (= original SmolLM2 "
                     "tokenizer.json = llama.cpp 'smollm' pre-tokenizer)",
        "converter_pre_tokenizer": converter_pre,
        "binary": "smollm2_goldens.bin: per section uint32 n, uint32 offsets[n+1], "
                  "uint16 ids[offsets[n]], little-endian",
        "sections": [
            {"name": "wikitext", "source": "wikitext-2-raw/wiki.test.raw",
             "items": "file bytes split on b'\\n' (count('\\n')+1 items, '\\r' kept, last item "
                      "is what follows the final '\\n'), each decoded as UTF-8",
             "num_items": len(wiki_ids), "num_tokens": sum(map(len, wiki_ids)),
             "items_differing_with_converter_pre_tokenizer": wiki_diff},
            {"name": "gsm8k", "source": "gsm8k/test.jsonl",
             "items": "the 'question' string of the first 200 lines",
             "num_items": len(gsm_ids), "num_tokens": sum(map(len, gsm_ids)),
             "items_differing_with_converter_pre_tokenizer": gsm_diff},
        ],
        "bos_token_id_gguf": 1, "eos_token_id_gguf": 2,
        "chat_template": tok.chat_template,
        "chats": chats,
    }
    with tempfile.NamedTemporaryFile("w", dir=out, delete=False, encoding="utf-8") as f:
        json.dump(header, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.chmod(f.name, 0o644)
    os.replace(f.name, out / "smollm2_goldens.json")
    write_tiny_goldens(out)
    print(json.dumps(header["sections"], indent=1))


if __name__ == "__main__":
    main()
