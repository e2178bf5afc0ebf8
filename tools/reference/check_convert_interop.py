#!/usr/bin/env python3
"""Checks that `kvq convert` output loads in transformers exactly like the GGUF itself does.

    /root/.cache/kvq/refvenv/bin/python tools/reference/check_convert_interop.py \
        [--gguf ~/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf] [--model-dir DIR | --kvq build/kvq]

Loads the converted directory (AutoModelForCausalLM, AutoTokenizer) and the GGUF through
transformers' own GGUF loader (from_pretrained(dir, gguf_file=...), which dequantizes with gguf-py
and reverses llama.cpp's q/k row permutation), runs 3 fixed prompts and asserts:
  - identical token ids from our tokenizer (AutoTokenizer and the tokenizers library reading our
    tokenizer.json) and from llama.cpp's smollm pre-tokenization (re-implemented below) with the
    GGUF's BPE; agreement with transformers' GGUF tokenizer is recorded (it drops the digit
    split, see below),
  - logits max |diff| <= 1e-4 (fp32 on CPU; the weights should be bit-identical, so any
    difference comes only from kernel scheduling),
  - the converted model's config matches the GGUF-derived transformers config on every field
    that affects the forward pass.
Writes the measured numbers and package versions to tests/data/convert/interop.json and exits
non-zero on failure.
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

import numpy as np
import regex
import torch
import tokenizers
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]
HOME = pathlib.Path(os.environ.get("KVQ_HOME", pathlib.Path.home() / ".cache" / "kvq"))
OUT = REPO / "tests" / "data" / "convert" / "interop.json"
TOLERANCE = 1e-4

PROMPTS = [
    "The capital of France is",
    # digits next to spaces and letters: the smollm pre-tokenizer splits every digit on its own
    "In 2024, 3 cats ate 12 fish at 10:45pm; 1+1=2 and x2y3 costs $19.99.",
    # non-ASCII letters, Unicode digits (superscript, Arabic-Indic, mathematical), tabs, newlines
    "Héllo wörld — naïve café ½ ² ٣٤ 𝟘𝟙!\n\tdef f(x):\n\t\treturn x**2  # ok",
]

# llama.cpp's pre-tokenizer for tokenizer.ggml.pre = "smollm" (LLAMA_VOCAB_PRE_TYPE_SMOLLM in
# llama-vocab.cpp): first every \p{N} character is its own piece, then the GPT-2 regex.
LLAMA_CPP_SMOLLM_REGEXES = [
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
]


def llama_cpp_pretokenize(text):
    """Splits like llama.cpp's unicode_regex_split: each regex cuts every piece further; the text
    between matches stays a piece of its own."""
    pieces = [text]
    for pattern in LLAMA_CPP_SMOLLM_REGEXES:
        out = []
        for piece in pieces:
            pos = 0
            for m in regex.finditer(pattern, piece):
                if m.start() > pos:
                    out.append(piece[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    return pieces


def llama_cpp_semantics_ids(ref_tok, text):
    """Token ids with llama.cpp's smollm pre-tokenization and the GGUF's own BPE (transformers'
    GGUF tokenizer applied to each pre-token: its byte-level regex leaves a GPT-2 piece whole)."""
    ids = []
    for piece in llama_cpp_pretokenize(text):
        ids += ref_tok(piece, add_special_tokens=False)["input_ids"]
    return ids


FORWARD_FIELDS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps",
                  "tie_word_embeddings", "max_position_embeddings", "hidden_act"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=str(HOME / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--model-dir", help="a directory written by kvq convert")
    ap.add_argument("--kvq", default=str(REPO / "build" / "kvq"),
                    help="kvq binary used to convert when --model-dir is not given")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    tmp = None
    model_dir = args.model_dir
    if model_dir is None:
        tmp = tempfile.TemporaryDirectory()
        model_dir = os.path.join(tmp.name, "converted")
        subprocess.run([args.kvq, "convert", args.gguf, model_dir], check=True)

    gguf_path = pathlib.Path(args.gguf).resolve()
    ours_tok = AutoTokenizer.from_pretrained(model_dir)
    ours_raw = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    ref_tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    ours = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                               dtype=torch.float32).eval()

    failures = []
    config_diffs = {}
    for f in FORWARD_FIELDS:
        a, b = getattr(ours.config, f, None), getattr(ref.config, f, None)
        if isinstance(a, float) and isinstance(b, float):
            same = np.float32(a) == np.float32(b)  # both are cast to fp32 in the forward pass
        else:
            same = a == b
        if not same:
            config_diffs[f] = {"ours": a, "transformers_gguf": b}
    rope_ours = ours.config.rope_parameters.get("rope_theta")
    rope_ref = ref.config.rope_parameters.get("rope_theta")
    if float(rope_ours) != float(rope_ref):
        config_diffs["rope_theta"] = {"ours": rope_ours, "transformers_gguf": rope_ref}
    if config_diffs:
        failures.append(f"config differs: {config_diffs}")

    # Weights: every tensor bit-identical (both sides dequantize with the same fp32 math).
    ref_state = ref.state_dict()
    weight_max_diff = 0.0
    for name, t in ours.state_dict().items():
        d = (t - ref_state[name]).abs().max().item()
        weight_max_diff = max(weight_max_diff, d)

    results = []
    for prompt in PROMPTS:
        ids_ours = ours_tok(prompt, add_special_tokens=True)["input_ids"]
        ids_raw = ours_raw.encode(prompt).ids
        ids_ref = ref_tok(prompt, add_special_tokens=True)["input_ids"]
        ids_llama = llama_cpp_semantics_ids(ref_tok, prompt)
        with torch.no_grad():
            x = torch.tensor([ids_ours])
            lo = ours(x).logits[0]
            lr = ref(x).logits[0]
        diff = (lo - lr).abs().max().item()
        # The authority is llama.cpp's tokenization of the GGUF. transformers' GGUF tokenizer
        # converter drops the smollm digit split (plain ByteLevel), so it differs where a
        # non-ASCII \p{N} character (½, ², ٣) follows a space; that is recorded, not a failure.
        ok = ids_ours == ids_raw == ids_llama and diff <= TOLERANCE
        results.append({"prompt": prompt, "num_tokens": len(ids_ours), "ids": ids_ours,
                        "ids_equal_llama_cpp_semantics": ids_ours == ids_llama,
                        "ids_equal_transformers_gguf": ids_ours == ids_ref,
                        "transformers_gguf_ids": None if ids_ours == ids_ref else ids_ref,
                        "ids_equal_tokenizers_library": ids_ours == ids_raw,
                        "logits_max_abs_diff": diff, "pass": ok})
        if not ok:
            failures.append(f"prompt {prompt!r}: ids ours={ids_ours} llama.cpp={ids_llama} "
                            f"gguf={ids_ref} raw={ids_raw} "
                            f"logits max diff {diff}")
        print(f"{len(ids_ours):3d} tokens, ids = llama.cpp: {ids_ours == ids_llama}, "
              f"= tokenizers: {ids_ours == ids_raw}, = transformers-gguf: {ids_ours == ids_ref}, "
              f"logits max |diff| {diff:.3e}  {prompt[:40]!r}")

    # Decoding round-trips and the chat template is carried over.
    for prompt in PROMPTS:
        dec = ours_tok.decode(ours_tok(prompt)["input_ids"])
        if dec != prompt:
            failures.append(f"decode mismatch: {dec!r} != {prompt!r}")
    chat = [{"role": "user", "content": "What is 2+2?"}]
    chat_ours = ours_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    chat_ref = ref_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    if chat_ours != chat_ref:
        failures.append(f"chat template differs: {chat_ours!r} vs {chat_ref!r}")
    special = {"eos_token": ours_tok.eos_token, "bos_token": ours_tok.bos_token,
               "pad_token": ours_tok.pad_token, "unk_token": ours_tok.unk_token}
    if ours_tok.eos_token != "<|im_end|>":
        failures.append(f"eos token {ours_tok.eos_token!r}, expected '<|im_end|>' (GGUF id 2)")

    report = {
        "generator": "tools/reference/check_convert_interop.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "gguf": gguf_path.name,
        "tolerance": TOLERANCE,
        "weights_max_abs_diff": weight_max_diff,
        "config_differences": config_diffs,
        "special_tokens": special,
        "chat_template_equal": chat_ours == chat_ref,
        "prompts": results,
        "pass": not failures,
        "failures": failures,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(f"weights max |diff| {weight_max_diff}; wrote {out}; {'PASS' if not failures else 'FAIL'}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
