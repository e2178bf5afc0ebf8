#!/usr/bin/env python3
"""Inference-engine goldens for the real default model (SmolLM2-135M-Instruct, Q4_1 GGUF).

Reference: transformers loading the GGUF directly (it dequantizes every tensor and un-permutes
the q/k rows), LlamaForCausalLM with attn_implementation="eager", fp32, CPU, one thread.

Writes (atomically):
  tests/data/engine/smollm2_golden.safetensors   see TENSOR_DOC / PPL_DEFINITION below; the
                                                 metadata repeats both, plus versions, prompts
                                                 and the pitfall checks
  tests/data/engine/named_modules.json           [name, class, MRO up to torch.nn.Module] for
                                                 every entry of model.named_modules()

Run (from the repository root; ~5-10 CPU minutes):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_engine_goldens.py \
      [--model-dir /root/.cache/kvq] [--gguf SmolLM2-135M-Instruct.Q4_1.gguf] \
      [--wikitext /work/shared/data/wikitext-2-raw/wiki.test.raw]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "data" / "engine"

PACKAGES = ["torch", "transformers", "gguf", "tokenizers", "safetensors", "numpy"]

PROMPTS = ["Hello my name is", "The capital of France is"]
CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
DECODE_STEPS = 32
NUM_SEL = 64
SEL_SEED = 20240601
KV_LAYERS = (0, 15, 29)
WINDOW = 2048
NUM_WINDOWS = 8

TENSOR_DOC = {
    "prompt{p}.input_ids": "int32 [S_p]: token ids of prompt p (p = 0, 1: the plain prompts, "
    "tokenized without special tokens -- the GGUF has add_bos_token=false; p = 2: the chat "
    "prompt rendered by apply_chat_template(add_generation_prompt=True), then tokenized the same way)",
    "prompt{p}.prefill_last_logits": "fp32 [vocab]: logits of the last position of one forward of "
    "the whole prompt (fresh cache, positions 0..S-1)",
    "prompt{p}.decode_tokens": "int32 [32]: greedy tokens, EOS not treated specially; "
    "decode_tokens[0] = argmax(prefill_last_logits); decode step i feeds decode_tokens[i] at "
    "position S+i with the KV cache of everything before and yields logits D_i; "
    "decode_tokens[i+1] = argmax(D_i)",
    "prompt{p}.decode_argmax": "int32 [32]: argmax(D_i) (so decode_argmax[i] = decode_tokens[i+1]; "
    "the last entry is the 33rd greedy token)",
    "prompt{p}.decode_sel_logits": "fp32 [32, 64]: D_i[sel_ids]",
    "prompt{p}.decode_max_logit": "fp32 [32]: max(D_i)",
    "prompt{p}.decode_chosen_logit": "fp32 [32]: D_i[decode_argmax[i]] (equal to max(D_i): greedy)",
    "prompt{p}.decode_second_logit": "fp32 [32]: second largest value of D_i (max - second = the "
    "argmax margin; a test may only insist on the same greedy token where this margin exceeds "
    "its logit tolerance)",
    "sel_ids": "int32 [64]: fixed vocab ids, sorted, torch.randperm(vocab, "
    f"generator=torch.Generator().manual_seed({SEL_SEED}))[:64]",
    "prompt0.layer{l}.key": "fp32 [1, 3, S_0, 64]: post-RoPE keys of layer l (l = 0, 15, 29) in the "
    "DynamicCache after the prefill of prompt 0 (before GQA repetition)",
    "prompt0.layer{l}.value": "fp32 [1, 3, S_0, 64]: values of layer l in the DynamicCache after "
    "the prefill of prompt 0",
    "ppl.window_ids": "int32 [8, 2048]: the evaluated token windows (see ppl_definition)",
    "ppl.window_nll_sum": "fp64 [8]: sum over the 2047 predicted tokens of the window of "
    "-log_softmax(logits[t])[ids[t+1]], t = 0..2046, computed in fp64 from the fp32 logits",
    "ppl.token_nll": "fp32 [8, 2047]: the per-token NLL terms (for locating a divergence)",
    "ppl.ppl": "fp64 [1]: exp(sum(window_nll_sum) / (8 * 2047))",
}

PPL_DEFINITION = (
    "wiki.test.raw is read whole as UTF-8 text exactly as stored (CRLF line ends kept, no "
    "stripping, no joining), tokenized ONCE with no BOS/EOS or other special tokens; "
    "window i (i = 0..7) is tokens[i*2048:(i+1)*2048]; each window is evaluated independently "
    "(fresh cache, positions 0..2047, no BOS prepended); its NLL is the sum over t = 0..2046 of "
    "-log p(tokens[t+1] | tokens[..t]) (2047 predicted tokens; the first token of a window is "
    "never predicted); PPL = exp(total NLL / total predicted tokens) = exp(sum / 16376)."
)


def versions() -> dict[str, str]:
    return {p: importlib.metadata.version(p) for p in PACKAGES}


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)  # mkstemp creates 0600
    os.replace(tmp, path)


def atomic_save_safetensors(path: Path, tensors: dict, metadata: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
    os.chmod(tmp, 0o644)  # mkstemp creates 0600
    os.replace(tmp, path)


def mro_names(cls: type) -> list[str]:
    names = []
    for c in cls.__mro__:
        names.append(c.__name__)
        if c is torch.nn.Module:
            break
    return names


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def smollm_tokenizer(hf_tok) -> Tokenizer:
    """The GGUF tokenizer as llama.cpp's "smollm" pre-tokenizer (and the original SmolLM2
    tokenizer.json) defines it: split every digit first, then the GPT-2 byte-level regex.
    transformers' GGUF converter installs a plain ByteLevel pre-tokenizer instead."""
    t = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return t


def check_qk_unpermute(model, gguf_path: Path) -> dict:
    """Checks that transformers undid llama.cpp's q/k row permutation: the loaded q_proj/k_proj
    of layer 0 must equal the reverse-permuted dequantized GGUF tensors, and differ from the
    raw ones."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    by_name = {t.name: t for t in reader.tensors}
    cfg = model.config
    res = {}
    for gname, hname, n_head in [
        ("blk.0.attn_q.weight", "q_proj", cfg.num_attention_heads),
        ("blk.0.attn_k.weight", "k_proj", cfg.num_key_value_heads),
    ]:
        t = by_name[gname]
        raw = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)  # [out, in]
        dim = raw.shape[0] // n_head // 2
        unperm = raw.reshape(n_head, dim, 2, raw.shape[1]).swapaxes(1, 2).reshape(raw.shape)
        w = getattr(model.model.layers[0].self_attn, hname).weight.detach().numpy()
        d_unperm = float(np.abs(w - unperm).max())
        d_raw = float(np.abs(w - raw).max())
        assert d_unperm == 0.0 and d_raw > 0.01, (gname, d_unperm, d_raw)
        res[hname] = {
            "gguf_type": t.tensor_type.name,
            "maxdiff_vs_unpermuted_gguf": d_unperm,
            "maxdiff_vs_raw_gguf": d_raw,
        }
    return res


@torch.no_grad()
def run_prompt(model, ids: list[int], sel_ids: torch.Tensor, want_kv: bool):
    x = torch.tensor([ids])
    S = len(ids)
    out = model(input_ids=x, use_cache=True)
    cache = out.past_key_values
    res = {"prefill_last_logits": out.logits[0, -1].float().clone()}
    if want_kv:
        for l in KV_LAYERS:
            k = cache.layers[l].keys
            v = cache.layers[l].values
            assert k.shape == (1, model.config.num_key_value_heads, S, model.config.head_dim), k.shape
            res[f"layer{l}.key"] = k.float().clone()
            res[f"layer{l}.value"] = v.float().clone()
    tok = int(out.logits[0, -1].argmax())
    toks, argm, sel, mx, chosen, second = [], [], [], [], [], []
    for i in range(DECODE_STEPS):
        toks.append(tok)
        o = model(
            input_ids=torch.tensor([[tok]]),
            past_key_values=cache,
            use_cache=True,
            position_ids=torch.tensor([[S + i]]),
        )
        cache = o.past_key_values
        d = o.logits[0, -1].float()
        top2 = d.topk(2)
        a = int(top2.indices[0])
        argm.append(a)
        sel.append(d[sel_ids].clone())
        mx.append(top2.values[0])
        chosen.append(d[a])
        second.append(top2.values[1])
        tok = a
    res["decode_tokens"] = torch.tensor(toks, dtype=torch.int32)
    res["decode_argmax"] = torch.tensor(argm, dtype=torch.int32)
    res["decode_sel_logits"] = torch.stack(sel)
    res["decode_max_logit"] = torch.stack(mx)
    res["decode_chosen_logit"] = torch.stack(chosen)
    res["decode_second_logit"] = torch.stack(second)
    # Cross-check the cached decode against one full forward of prompt + greedy tokens.
    full = torch.tensor([ids + toks])
    ref = model(input_ids=full, use_cache=False).logits[0, S - 1 :].float()  # [33, vocab]
    diff_prefill = float((ref[0] - res["prefill_last_logits"]).abs().max())
    diff_decode = float((ref[1:, sel_ids] - res["decode_sel_logits"]).abs().max())
    checks = {
        "full_forward_vs_prefill_maxdiff": diff_prefill,
        "full_forward_vs_cached_decode_sel_maxdiff": diff_decode,
        "min_decode_margin": float((res["decode_max_logit"] - res["decode_second_logit"]).min()),
    }
    return res, checks


@torch.no_grad()
def window_nll(model, ids: torch.Tensor) -> torch.Tensor:
    """Per-token NLL (fp64) of the 2047 predicted tokens of one window."""
    logits = model(input_ids=ids.view(1, -1).long(), use_cache=False).logits[0]  # [2048, vocab] fp32
    nll = torch.empty(ids.numel() - 1, dtype=torch.float64)
    for s in range(0, ids.numel() - 1, 256):  # fp64 log-softmax in row chunks (memory)
        e = min(s + 256, ids.numel() - 1)
        lp = torch.log_softmax(logits[s:e].double(), dim=-1)
        nll[s:e] = -lp.gather(1, ids[s + 1 : e + 1].long().view(-1, 1)).view(-1)
    return nll


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="/root/.cache/kvq")
    ap.add_argument("--gguf", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--wikitext", default="/work/shared/data/wikitext-2-raw/wiki.test.raw")
    ap.add_argument("--out", default=str(OUT_DIR))
    args = ap.parse_args()
    out_dir = Path(args.out)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    log("loading tokenizer and model from the GGUF")
    tok = AutoTokenizer.from_pretrained(args.model_dir, gguf_file=args.gguf)
    model = AutoModelForCausalLM.from_pretrained(
        args.model_dir, gguf_file=args.gguf, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    cfg = model.config
    rope_theta = cfg.rope_parameters["rope_theta"]
    assert rope_theta == 100000.0, rope_theta
    assert cfg.num_hidden_layers == 30 and cfg.num_key_value_heads == 3 and cfg.head_dim == 64
    assert cfg.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    checks: dict = {
        "rope_parameters": cfg.rope_parameters,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attn_implementation": cfg._attn_implementation,
        "qk_unpermute": check_qk_unpermute(model, Path(args.model_dir) / args.gguf),
    }

    # named_modules.json
    nm = [[n, type(m).__name__, mro_names(type(m))] for n, m in model.named_modules()]
    atomic_write_bytes(
        out_dir / "named_modules.json",
        ("[\n" + ",\n".join(json.dumps(e) for e in nm) + "\n]\n").encode(),
    )
    log(f"named_modules.json: {len(nm)} modules")

    # Tokenizer: the digit pre-tokenizer pitfall.
    smol = smollm_tokenizer(tok)
    probe = "In 2024, 12345 apples"
    checks["tokenizer_probe"] = {
        "text": probe,
        "transformers_gguf": tok.tokenize(probe),
        "smollm_digits_then_bytelevel": smol.encode(probe, add_special_tokens=False).tokens,
        "transformers_gguf_pre_tokenizer": json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"],
    }

    prompts = list(PROMPTS)
    chat_text = tok.apply_chat_template(CHAT_MESSAGES, add_generation_prompt=True, tokenize=False)
    prompts.append(chat_text)
    vocab = cfg.vocab_size
    sel_ids = torch.randperm(vocab, generator=torch.Generator().manual_seed(SEL_SEED))[:NUM_SEL].sort().values
    golden: dict[str, torch.Tensor] = {"sel_ids": sel_ids.to(torch.int32)}
    prompt_meta = []
    for p, text in enumerate(prompts):
        ids = tok(text, add_special_tokens=False).input_ids
        ids_smol = smol.encode(text, add_special_tokens=False).ids
        assert ids == ids_smol, (text, ids, ids_smol)
        res, c = run_prompt(model, ids, sel_ids, want_kv=(p == 0))
        golden[f"prompt{p}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        for k, v in res.items():
            golden[f"prompt{p}.{k}"] = v
        checks[f"prompt{p}"] = c
        gen_text = tok.decode(res["decode_tokens"].tolist())
        prompt_meta.append({"text": text, "ids": ids, "greedy_text": gen_text})
        log(f"prompt {p}: S={len(ids)} checks={c} greedy={gen_text!r}")

    # Perplexity.
    with open(args.wikitext, encoding="utf-8", newline="") as f:
        text = f.read()
    assert "\r\n" in text
    all_ids = smol.encode(text, add_special_tokens=False).ids
    all_ids_hf = tok(text, add_special_tokens=False).input_ids
    n_eval = WINDOW * NUM_WINDOWS
    assert all_ids[:n_eval] == all_ids_hf[:n_eval], "tokenizers disagree inside the evaluated windows"
    first_diff = next((i for i, (a, b) in enumerate(zip(all_ids, all_ids_hf)) if a != b), None)
    checks["wikitext_tokens"] = {
        "chars": len(text),
        "smollm_tokenizer": len(all_ids),
        "transformers_gguf_tokenizer": len(all_ids_hf),
        "first_difference_at": first_diff,
        "windows_identical_for_both": True,
    }
    windows = torch.tensor(all_ids[:n_eval], dtype=torch.int32).view(NUM_WINDOWS, WINDOW)
    nll_sums = torch.empty(NUM_WINDOWS, dtype=torch.float64)
    token_nll = torch.empty(NUM_WINDOWS, WINDOW - 1, dtype=torch.float32)
    for i in range(NUM_WINDOWS):
        t0 = time.time()
        nll = window_nll(model, windows[i])
        nll_sums[i] = nll.sum()
        token_nll[i] = nll.float()
        log(f"window {i}: nll_sum={nll_sums[i].item():.6f} ppl={math.exp(nll_sums[i].item() / (WINDOW - 1)):.4f} ({time.time() - t0:.1f}s)")
    ppl = math.exp(nll_sums.sum().item() / (NUM_WINDOWS * (WINDOW - 1)))
    log(f"PPL over {NUM_WINDOWS} windows of {WINDOW}: {ppl:.6f}")
    golden["ppl.window_ids"] = windows
    golden["ppl.window_nll_sum"] = nll_sums
    golden["ppl.token_nll"] = token_nll
    golden["ppl.ppl"] = torch.tensor([ppl], dtype=torch.float64)

    metadata = {
        "generator": "tools/reference/make_engine_goldens.py",
        "model": args.gguf,
        "reference": "transformers AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., "
        "dtype=float32, attn_implementation='eager'); tokenizer AutoTokenizer.from_pretrained(dir, "
        "gguf_file=...) with the smollm digit pre-tokenizer installed (identical ids for every "
        "text in this golden, checked); CPU, torch.set_num_threads(1)",
        "versions": json.dumps(versions(), sort_keys=True),
        "prompts": json.dumps(prompt_meta, ensure_ascii=False),
        "chat_messages": json.dumps(CHAT_MESSAGES),
        "tensors": json.dumps(TENSOR_DOC, indent=1),
        "ppl_definition": PPL_DEFINITION,
        "ppl": f"{ppl:.6f}",
        "wikitext": "wikitext-2-raw-v1 wiki.test.raw (" + str(os.path.getsize(args.wikitext)) + " bytes)",
        "checks": json.dumps(checks, ensure_ascii=False, default=str),
    }
    path = out_dir / "smollm2_golden.safetensors"
    atomic_save_safetensors(path, golden, metadata)
    log(f"wrote {path} ({path.stat().st_size} bytes)")
    print(json.dumps(checks, indent=1, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
