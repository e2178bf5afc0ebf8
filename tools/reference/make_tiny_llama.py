#!/usr/bin/env python3
"""Deterministic tiny random Llama checkpoints and their reference forward goldens.

Writes, for each variant in VARIANTS, the directory tests/data/tiny_llama/<variant>/ with
  config.json, model.safetensors    a complete Hugging Face LlamaForCausalLM checkpoint (fp32)
  golden.safetensors                reference activations (see GOLDEN_DOC below), metadata has
                                    the package versions and a description of every tensor
  named_modules.json                [name, class name, MRO class names up to torch.nn.Module]
                                    for every entry of model.named_modules()

Reference: transformers LlamaForCausalLM, attn_implementation="eager", fp32, CPU, one thread.

Run (from the repository root):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_tiny_llama.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

REPO = Path(__file__).resolve().parents[2]
OUT_ROOT = REPO / "tests" / "data" / "tiny_llama"

PACKAGES = ["torch", "transformers", "safetensors", "numpy"]

# Common architecture fields; rope is given in the classic (transformers 4.x / Hub) spelling
# `rope_theta` + `rope_scaling`, which is what real checkpoints carry; transformers 5 reads it
# into `rope_parameters` and writes both spellings back (see write_config).
VARIANTS = {
    "gqa": dict(
        seed=1234,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=256,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_theta=10000.0,
            rope_scaling=None,
        ),
    ),
    "llama3_tied": dict(
        seed=4321,
        config=dict(
            vocab_size=256,
            hidden_size=96,
            intermediate_size=128,  # not fixed by the brief; kept small (file size)
            num_hidden_layers=2,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=256,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
}

PROMPT_LENGTHS = (7, 13)
DECODE_STEPS = 8
BATCH_LEN = 7

# Standard deviations of the random init (chosen so attention is far from uniform and logits
# have a spread of a few units, without saturating anything).
STD_EMBED = 0.5
STD_QK = 0.12
STD_LINEAR = 0.08
STD_LM_HEAD = 0.15
STD_NORM = 0.1  # RMSNorm weights are 1 + STD_NORM * N(0, 1) so the norm weights matter

GOLDEN_DOC = {
    "prompt{p}.input_ids": "int32 [S_p]: random token ids of prompt p (p = 0, 1; S = 7, 13)",
    "prompt{p}.prefill_logits": "fp32 [S_p, vocab]: logits of every position of one forward "
    "of the whole prompt (fresh DynamicCache, position_ids 0..S-1)",
    "prompt{p}.decode_tokens": "int32 [8]: greedy tokens; token[0] = argmax(prefill_logits[-1]), "
    "token[i] = argmax(decode_logits[i-1])",
    "prompt{p}.decode_logits": "fp32 [8, vocab]: decode_logits[i] = logits after feeding "
    "decode_tokens[i] at position S+i with the KV cache of everything before",
    "prompt{p}.layer{l}.key": "fp32 [1, kv_heads, S_p, head_dim]: post-RoPE keys of layer l in the "
    "DynamicCache after the prefill of prompt p (before GQA repetition)",
    "prompt{p}.layer{l}.value": "fp32 [1, kv_heads, S_p, head_dim]: values of layer l in the "
    "DynamicCache after the prefill of prompt p",
    "prompt{p}.layer0.query": "fp32 [1, heads, S_p, head_dim]: post-RoPE queries of layer 0 during "
    "the prefill of prompt p, captured by wrapping modeling_llama.apply_rotary_pos_emb (its "
    "first output on the layer-0 call); checked against an independent recomputation "
    "rope(q_proj(input_layernorm(embed(ids)))) with the model's rotary_emb",
    "batch.input_ids": "int32 [2, 7]: both prompts truncated to their first 7 tokens",
    "batch.logits": "fp32 [2, 7, vocab]: logits of one batched forward of batch.input_ids (no padding, "
    "no attention mask, causal)",
}


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


def build_config(spec: dict) -> LlamaConfig:
    cfg = dict(spec)
    rope_theta = cfg.pop("rope_theta")
    rope_scaling = cfg.pop("rope_scaling")
    rope_parameters = {"rope_type": "default", "rope_theta": rope_theta}
    if rope_scaling is not None:
        rope_parameters = dict(rope_scaling, rope_theta=rope_theta)
    return LlamaConfig(
        **cfg,
        rope_parameters=rope_parameters,
        bos_token_id=1,
        eos_token_id=2,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        torch_dtype="float32",
    )


def init_weights(model: LlamaForCausalLM, seed: int) -> None:
    """Re-initializes every parameter from one seeded generator, in named_parameters() order,
    so the weights do not depend on transformers' own init order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head is not listed twice
            if name.endswith("norm.weight"):
                p.copy_(1.0 + STD_NORM * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                std = STD_LM_HEAD if model.config.tie_word_embeddings else STD_EMBED
                p.copy_(std * torch.randn(p.shape, generator=gen))
            elif "lm_head" in name:
                p.copy_(STD_LM_HEAD * torch.randn(p.shape, generator=gen))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(STD_QK * torch.randn(p.shape, generator=gen))
            elif name.endswith(".weight"):
                p.copy_(STD_LINEAR * torch.randn(p.shape, generator=gen))
            else:
                raise RuntimeError(f"unexpected parameter {name}")


def mro_names(cls: type) -> list[str]:
    names = []
    for c in cls.__mro__:
        names.append(c.__name__)
        if c is torch.nn.Module:
            break
    return names


def named_modules_list(model: torch.nn.Module) -> list:
    return [[n, type(m).__name__, mro_names(type(m))] for n, m in model.named_modules()]


def write_config(model: LlamaForCausalLM, spec: dict, out_dir: Path) -> None:
    cfg = model.config.to_dict()
    # Write the classic spellings too, so a loader written against Hub checkpoints (which carry
    # rope_theta / rope_scaling) and one written against transformers 5 (rope_parameters) agree.
    cfg["rope_theta"] = spec["rope_theta"]
    cfg["rope_scaling"] = spec["rope_scaling"]
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(out_dir / "config.json", text.encode())


def write_weights(model: LlamaForCausalLM, out_dir: Path) -> None:
    tensors = {}
    for name, p in model.state_dict().items():
        if model.config.tie_word_embeddings and name == "lm_head.weight":
            continue  # tied: stored once, as model.embed_tokens.weight (what save_pretrained does)
        tensors[name] = p.detach().to(torch.float32).clone()
    atomic_save_safetensors(out_dir / "model.safetensors", tensors, {"format": "pt"})


class QueryCapture:
    """Wraps modeling_llama.apply_rotary_pos_emb and records the post-RoPE q/k of each call."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.orig = modeling_llama.apply_rotary_pos_emb

    def __enter__(self):
        def wrapped(q, k, cos, sin, *args, **kwargs):
            qe, ke = self.orig(q, k, cos, sin, *args, **kwargs)
            self.calls.append((qe.detach().clone(), ke.detach().clone()))
            return qe, ke

        modeling_llama.apply_rotary_pos_emb = wrapped
        return self

    def __exit__(self, *exc):
        modeling_llama.apply_rotary_pos_emb = self.orig


def recompute_layer0_query(model: LlamaForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    m = model.model
    attn = m.layers[0].self_attn
    h = m.embed_tokens(ids)  # [1, S, hidden]
    x = m.layers[0].input_layernorm(h)
    S = ids.shape[1]
    q = attn.q_proj(x).view(1, S, -1, attn.head_dim).transpose(1, 2)  # [1, heads, S, head_dim]
    pos = torch.arange(S).unsqueeze(0)
    cos, sin = m.rotary_emb(h, pos)
    q_rot, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos, sin)
    return q_rot


def make_variant(name: str, spec: dict) -> None:
    torch.manual_seed(spec["seed"])
    config = build_config(spec["config"])
    model = LlamaForCausalLM(config)
    init_weights(model, spec["seed"])
    model.eval()
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    out_dir = OUT_ROOT / name
    write_config(model, spec["config"], out_dir)
    write_weights(model, out_dir)
    nm = "[\n" + ",\n".join(json.dumps(e) for e in named_modules_list(model)) + "\n]\n"
    atomic_write_bytes(out_dir / "named_modules.json", nm.encode())

    # Reload from disk and run the reference on the reloaded model, so the golden is exactly a
    # function of the files written (and the config round trip is exercised).
    model = LlamaForCausalLM.from_pretrained(out_dir, attn_implementation="eager", dtype=torch.float32)
    model.eval()

    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    V = config.vocab_size
    prompts = [torch.randint(3, V, (n,), generator=gen) for n in PROMPT_LENGTHS]

    golden: dict[str, torch.Tensor] = {}
    notes = {}
    with torch.no_grad():
        for p, ids in enumerate(prompts):
            ids2 = ids.unsqueeze(0)
            with QueryCapture() as cap:
                out = model(input_ids=ids2, use_cache=True)
            cache = out.past_key_values
            golden[f"prompt{p}.input_ids"] = ids.to(torch.int32)
            golden[f"prompt{p}.prefill_logits"] = out.logits[0].float()
            # post-RoPE K/V of every layer and Q of layer 0 (tiny, so for both prompts)
            L = config.num_hidden_layers
            assert len(cap.calls) == L
            for l in range(L):
                k = cache.layers[l].keys
                v = cache.layers[l].values
                assert k.shape == (1, config.num_key_value_heads, ids.numel(), config.head_dim)
                # the captured post-RoPE key of this layer must be what the cache holds
                assert torch.equal(cap.calls[l][1], k)
                golden[f"prompt{p}.layer{l}.key"] = k.float().clone()
                golden[f"prompt{p}.layer{l}.value"] = v.float().clone()
            q0 = cap.calls[0][0]
            q_re = recompute_layer0_query(model, ids2)
            diff = (q0 - q_re).abs().max().item()
            assert diff < 1e-5, diff
            notes[f"prompt{p}.query_recompute_maxdiff"] = f"{diff:.3e}"
            golden[f"prompt{p}.layer0.query"] = q0.float().clone()
            # greedy decode with the cache
            tok = out.logits[0, -1].argmax()
            toks, logits = [], []
            pos = ids.numel()
            for _ in range(DECODE_STEPS):
                toks.append(tok)
                o = model(
                    input_ids=tok.view(1, 1),
                    past_key_values=cache,
                    use_cache=True,
                    position_ids=torch.tensor([[pos]]),
                )
                cache = o.past_key_values
                logits.append(o.logits[0, -1].float())
                tok = o.logits[0, -1].argmax()
                pos += 1
            golden[f"prompt{p}.decode_tokens"] = torch.stack(toks).to(torch.int32)
            golden[f"prompt{p}.decode_logits"] = torch.stack(logits)
            # cross-check: decoding with the cache must match a fresh full forward
            full = torch.cat([ids, golden[f"prompt{p}.decode_tokens"]]).unsqueeze(0)
            ref = model(input_ids=full, use_cache=False).logits[0, ids.numel() :]
            d = (ref - golden[f"prompt{p}.decode_logits"]).abs().max().item()
            assert d < 1e-4, d
            notes[f"prompt{p}.decode_vs_full_forward_maxdiff"] = f"{d:.3e}"

        batch = torch.stack([ids[:BATCH_LEN] for ids in prompts])
        bl = model(input_ids=batch, use_cache=False).logits.float()
        golden["batch.input_ids"] = batch.to(torch.int32)
        golden["batch.logits"] = bl
        for p in range(2):
            d = (bl[p] - golden[f"prompt{p}.prefill_logits"][:BATCH_LEN]).abs().max().item()
            notes[f"batch_vs_single_prompt{p}_maxdiff"] = f"{d:.3e}"

    lg = golden["prompt1.prefill_logits"]
    notes["prompt1_logit_std"] = f"{lg.std().item():.4f}"
    notes["prompt1_logit_absmax"] = f"{lg.abs().max().item():.4f}"
    metadata = {
        "generator": "tools/reference/make_tiny_llama.py",
        "variant": name,
        "versions": json.dumps(versions(), sort_keys=True),
        "reference": "transformers LlamaForCausalLM, attn_implementation=eager, fp32, CPU; "
        "model reloaded with from_pretrained from this directory",
        "tensors": json.dumps(GOLDEN_DOC, indent=1),
        "checks": json.dumps(notes, sort_keys=True),
    }
    atomic_save_safetensors(out_dir / "golden.safetensors", golden, metadata)
    sizes = {f.name: f.stat().st_size for f in sorted(out_dir.iterdir())}
    print(f"{name}: {json.dumps(notes)}")
    print(f"{name}: sizes {sizes} total {sum(sizes.values())}")
    print(f"{name}: prompt1 decode tokens {golden['prompt1.decode_tokens'].tolist()}")


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name, spec in VARIANTS.items():
        make_variant(name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
