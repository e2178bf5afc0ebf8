#!/usr/bin/env python3
"""Deterministic tiny random models of every architecture kvq runs besides the tiny Llamas, and
their reference forward goldens (the same layout as tests/data/tiny_llama, see
make_tiny_llama.py's GOLDEN_DOC, so one parameterised test reads both).

Writes tests/data/tiny_arch/<variant>/ with config.json, model.safetensors, named_modules.json and
golden.safetensors for each variant in VARIANTS:
  llama_linear  LlamaForCausalLM with rope_scaling "linear" (factor 4)
  qwen2         Qwen2ForCausalLM: q/k/v biases; use_sliding_window with max_window_layers 1, so
                layer 0 attends to everything and layers 1-2 to a window of 5 (layer_types)
  qwen3         Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE; head_dim 32 is not
                hidden / heads (as in the real Qwen3)
  mistral       MistralForCausalLM: every layer attends to a sliding window of 24 tokens; its
                prompts (13 and 100 tokens) and decode run past the window
  gemma3        Gemma3ForCausalLM (gemma3_text): (1 + w) RMSNorms, sandwich norms, q/k norms,
                embeddings x sqrt(hidden), MQA, head_dim 32 != hidden / heads, attention scale
                query_pre_attn_scalar^-0.5 (24), gelu_pytorch_tanh, layers 0 and 1 sliding
                (window 6, rope_theta 1e4) and layer 2 global (rope_theta 1e6, linear scaling 4:
                sliding_window_pattern 3), final logit softcapping 10 (real Gemma 3 sets it
                null; set here so its code path is checked), prompts of 9 and 20 tokens
  phi3          Phi3ForCausalLM: fused self_attn.qkv_proj and mlp.gate_up_proj (kvq splits them
                at load), a sliding window of 12 tokens on every layer (Phi-3-mini-4k has 2047),
                intermediate 64; prompts of 9 tokens (its decode crosses the window) and 40
  phi3_longrope Phi3ForCausalLM with LongRoPE (Phi-3.5 / the 128k models): short and long
                factors per frequency, original_max_position_embeddings 16 of 64 (attention
                factor sqrt(1 + ln 4 / ln 16)), no window; prompt 0 (9 tokens) decodes across 16
                positions, so its last decode step runs the long factors over keys cached with
                the short ones (transformers picks the factors per forward, by its largest
                position); prompt 1 (40 tokens) is long throughout

Differences to tiny_llama's goldens: the per-layer keys are the post-RoPE (post-q/k-norm) keys as
attention computed them for every prompt token, captured by wrapping the modeling module's
apply_rotary_pos_emb (transformers' DynamicCache keeps only the last window of a sliding layer;
the script checks that the cache holds the tail of them). Prompt lengths are per variant.

Reference: transformers <Arch>ForCausalLM, attn_implementation="eager", fp32, CPU, one thread.

Run (from the repository root):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_tiny_archs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Qwen3ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
)
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.phi3 import modeling_phi3
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_llama import (  # noqa: E402
    atomic_save_safetensors,
    atomic_write_bytes,
    named_modules_list,
    versions,
)

REPO = Path(__file__).resolve().parents[2]
OUT_ROOT = REPO / "tests" / "data" / "tiny_arch"

COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
)

VARIANTS = {
    "llama_linear": dict(
        seed=2101,
        cls=(LlamaConfig, LlamaForCausalLM, modeling_llama),
        prompts=(7, 13),
        config=dict(
            COMMON,
            num_hidden_layers=2,
            head_dim=16,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            rope_parameters=dict(rope_type="linear", factor=4.0, rope_theta=10000.0),
        ),
    ),
    "qwen2": dict(
        seed=2202,
        cls=(Qwen2Config, Qwen2ForCausalLM, modeling_qwen2),
        prompts=(7, 13),
        config=dict(
            COMMON,
            num_hidden_layers=3,
            tie_word_embeddings=True,
            use_sliding_window=True,
            sliding_window=5,
            max_window_layers=1,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    "qwen3": dict(
        seed=2303,
        cls=(Qwen3Config, Qwen3ForCausalLM, modeling_qwen3),
        prompts=(7, 13),
        config=dict(
            COMMON,
            num_hidden_layers=2,
            head_dim=32,
            tie_word_embeddings=False,
            attention_bias=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    "mistral": dict(
        seed=2404,
        cls=(MistralConfig, MistralForCausalLM, modeling_mistral),
        prompts=(13, 100),
        config=dict(
            COMMON,
            num_hidden_layers=2,
            head_dim=16,
            tie_word_embeddings=False,
            sliding_window=24,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    "gemma3": dict(
        seed=2505,
        cls=(Gemma3TextConfig, Gemma3ForCausalLM, modeling_gemma3),
        prompts=(9, 20),
        norm_one=0.0,  # Gemma's norms compute (1 + w): weights are 0 + 0.1 N(0, 1)
        config=dict(
            {k: v for k, v in COMMON.items() if k != "hidden_act"},
            hidden_size=48,  # sqrt(48) is not a bf16 value: the normalizer's cast shows
            num_hidden_layers=3,
            intermediate_size=64,
            num_key_value_heads=1,
            head_dim=32,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=24,
            sliding_window=6,
            sliding_window_pattern=3,
            final_logit_softcapping=10.0,
            attn_logit_softcapping=None,
            tie_word_embeddings=True,
            pad_token_id=0,
            rope_parameters={
                "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1000000.0),
                "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            },
        ),
    ),
    "phi3": dict(
        seed=2606,
        cls=(Phi3Config, Phi3ForCausalLM, modeling_phi3),
        prompts=(9, 40),
        config=dict(
            COMMON,
            num_hidden_layers=2,
            intermediate_size=64,
            tie_word_embeddings=False,
            pad_token_id=None,  # Phi3Config's 32000 is past the tiny vocabulary
            sliding_window=12,
            original_max_position_embeddings=256,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    "phi3_longrope": dict(
        seed=2612,
        cls=(Phi3Config, Phi3ForCausalLM, modeling_phi3),
        prompts=(9, 40),
        # Decode and a full forward of the same tokens take different factors when the decode
        # crosses original_max_position_embeddings (transformers' own behaviour, not checked).
        decode_may_switch_rope=True,
        config=dict(
            COMMON,
            num_hidden_layers=2,
            intermediate_size=64,
            max_position_embeddings=64,
            tie_word_embeddings=False,
            pad_token_id=None,
            sliding_window=None,
            original_max_position_embeddings=16,
            rope_parameters=dict(
                rope_type="longrope",
                rope_theta=10000.0,
                original_max_position_embeddings=16,
                short_factor=[1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0],
                long_factor=[1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 20.0],
            ),
        ),
    ),
}

DECODE_STEPS = 8
BATCH_LEN = 7

STD_EMBED = 0.5
STD_QK = 0.12
STD_LINEAR = 0.08
STD_LM_HEAD = 0.15
STD_BIAS = 0.2
STD_NORM = 0.1  # norm weights are norm_one + STD_NORM * N(0, 1), norm_one 1 unless a variant says

GOLDEN_DOC = {
    "prompt{p}.input_ids": "int32 [S_p]: random token ids of prompt p (p = 0, 1)",
    "prompt{p}.prefill_logits": "fp32 [S_p, vocab]: logits of every position of one forward "
    "of the whole prompt (fresh DynamicCache, position_ids 0..S-1)",
    "prompt{p}.decode_tokens": "int32 [8]: greedy tokens; token[0] = argmax(prefill_logits[-1]), "
    "token[i] = argmax(decode_logits[i-1])",
    "prompt{p}.decode_logits": "fp32 [8, vocab]: decode_logits[i] = logits after feeding "
    "decode_tokens[i] at position S+i with the KV cache of everything before",
    "prompt{p}.layer{l}.key": "fp32 [1, kv_heads, S_p, head_dim]: post-q/k-norm, post-RoPE keys "
    "of layer l for every prompt token (captured at apply_rotary_pos_emb; the DynamicCache holds "
    "their tail on sliding layers, all of them otherwise)",
    "prompt{p}.layer{l}.value": "fp32 [1, kv_heads, S_p, head_dim]: values of layer l for every "
    "prompt token (v_proj's output, captured by a forward hook; the cache holds their tail)",
    "prompt{p}.layer0.query": "fp32 [1, heads, S_p, head_dim]: post-q-norm, post-RoPE queries of "
    "layer 0, captured at apply_rotary_pos_emb and checked against a recomputation",
    "batch.input_ids": "int32 [2, 7]: both prompts truncated to their first 7 tokens",
    "batch.logits": "fp32 [2, 7, vocab]: logits of one batched forward of batch.input_ids",
}


def init_weights(model: torch.nn.Module, seed: int, norm_one: float = 1.0) -> None:
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # layer norms and q_norm / k_norm
                p.copy_(norm_one + STD_NORM * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_((STD_LM_HEAD if tied else STD_EMBED) * torch.randn(p.shape, generator=gen))
            elif "lm_head" in name:
                p.copy_(STD_LM_HEAD * torch.randn(p.shape, generator=gen))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(STD_QK * torch.randn(p.shape, generator=gen))
            elif name.endswith("qkv_proj.weight"):  # Phi-3: q and k rows as q/k_proj, v as v_proj
                w = torch.randn(p.shape, generator=gen)
                v_rows = model.config.num_key_value_heads * (
                    model.config.hidden_size // model.config.num_attention_heads
                )
                w[:-v_rows] *= STD_QK
                w[-v_rows:] *= STD_LINEAR
                p.copy_(w)
            elif name.endswith(".bias"):
                p.copy_(STD_BIAS * torch.randn(p.shape, generator=gen))
            elif name.endswith(".weight"):
                p.copy_(STD_LINEAR * torch.randn(p.shape, generator=gen))
            else:
                raise RuntimeError(f"unexpected parameter {name}")


class RopeCapture:
    """Wraps <modeling>.apply_rotary_pos_emb; records the post-RoPE q and k of each call."""

    def __init__(self, modeling):
        self.modeling = modeling
        self.orig = modeling.apply_rotary_pos_emb
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __enter__(self):
        def wrapped(q, k, cos, sin, *args, **kwargs):
            qe, ke = self.orig(q, k, cos, sin, *args, **kwargs)
            self.calls.append((qe.detach().clone(), ke.detach().clone()))
            return qe, ke

        self.modeling.apply_rotary_pos_emb = wrapped
        return self

    def __exit__(self, *exc):
        self.modeling.apply_rotary_pos_emb = self.orig


def split_qkv(model, qkv: torch.Tensor):
    """Phi-3's fused qkv_proj output [..., (H + 2 Hkv) d] as (q, k, v), as Phi3Attention slices it."""
    c = model.config
    d = c.hidden_size // c.num_attention_heads
    q_rows, kv_rows = c.num_attention_heads * d, c.num_key_value_heads * d
    return qkv[..., :q_rows], qkv[..., q_rows : q_rows + kv_rows], qkv[..., q_rows + kv_rows :]


def value_module(model, layer):
    """The Linear whose output holds the values, and how to take them from it."""
    attn = layer.self_attn
    if hasattr(attn, "qkv_proj"):
        return attn.qkv_proj, lambda o: split_qkv(model, o)[2]
    return attn.v_proj, lambda o: o


def recompute_layer0(model, modeling, ids: torch.Tensor):
    """Layer 0's q, k, v from the modules, independently of the attention forward."""
    m = model.model
    attn = m.layers[0].self_attn
    h = m.embed_tokens(ids)
    x = m.layers[0].input_layernorm(h)
    S = ids.shape[1]
    if hasattr(attn, "qkv_proj"):  # Phi-3: q, k, v rows of one fused Linear
        q, k, v = split_qkv(model, attn.qkv_proj(x))
    else:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    q = q.view(1, S, -1, attn.head_dim)
    k = k.view(1, S, -1, attn.head_dim)
    v = v.view(1, S, -1, attn.head_dim).transpose(1, 2)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    layer_types = getattr(model.config, "layer_types", None)
    if isinstance(m.rotary_emb, modeling_gemma3.Gemma3RotaryEmbedding):  # one RoPE per layer type
        cos, sin = m.rotary_emb(h, torch.arange(S).unsqueeze(0), layer_types[0])
    else:
        cos, sin = m.rotary_emb(h, torch.arange(S).unsqueeze(0))
    q, k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    return q, k, v


def make_variant(name: str, spec: dict) -> None:
    config_cls, model_cls, modeling = spec["cls"]
    torch.manual_seed(spec["seed"])
    config = config_cls(**spec["config"], dtype="float32")
    model = model_cls(config)
    init_weights(model, spec["seed"], spec.get("norm_one", 1.0))
    model.eval()

    out_dir = OUT_ROOT / name
    cfg = model.config.to_dict()
    cfg["architectures"] = [model_cls.__name__]
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    atomic_write_bytes(out_dir / "config.json", (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode())
    tensors = {}
    for n, p in model.state_dict().items():
        if config.tie_word_embeddings and n == "lm_head.weight":
            continue
        tensors[n] = p.detach().to(torch.float32).clone()
    atomic_save_safetensors(out_dir / "model.safetensors", tensors, {"format": "pt"})
    nm = "[\n" + ",\n".join(json.dumps(e) for e in named_modules_list(model)) + "\n]\n"
    atomic_write_bytes(out_dir / "named_modules.json", nm.encode())

    model = model_cls.from_pretrained(out_dir, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    layer_types = getattr(model.config, "layer_types", None)
    windows = [
        model.model.layers[l].self_attn.sliding_window
        if hasattr(model.model.layers[l].self_attn, "sliding_window")
        else getattr(model.config, "sliding_window", None)
        for l in range(model.config.num_hidden_layers)
    ]

    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    V = config.vocab_size
    prompts = [torch.randint(3, V, (n,), generator=gen) for n in spec["prompts"]]
    golden: dict[str, torch.Tensor] = {}
    notes = {"layer_types": json.dumps(layer_types), "windows": json.dumps(windows)}
    L = config.num_hidden_layers
    hd = model.model.layers[0].self_attn.head_dim
    with torch.no_grad():
        for p, ids in enumerate(prompts):
            ids2 = ids.unsqueeze(0)
            S = ids.numel()
            vcap: list[torch.Tensor] = []
            handles = []
            for layer in model.model.layers:
                module, take = value_module(model, layer)
                handles.append(
                    module.register_forward_hook(
                        lambda m, i, o, take=take: vcap.append(take(o).detach().clone())
                    )
                )
            with RopeCapture(modeling) as cap:
                out = model(input_ids=ids2, use_cache=True)
            for h in handles:
                h.remove()
            cache = out.past_key_values
            golden[f"prompt{p}.input_ids"] = ids.to(torch.int32)
            golden[f"prompt{p}.prefill_logits"] = out.logits[0].float()
            assert len(cap.calls) == L
            for l in range(L):
                ck, cv = cache.layers[l].keys, cache.layers[l].values
                k = cap.calls[l][1]
                assert k.shape == (1, config.num_key_value_heads, S, hd), k.shape
                n = ck.shape[2]
                assert n == S or (windows[l] is not None and n < S), (l, n, S)
                assert torch.equal(k[:, :, S - n :], ck)
                golden[f"prompt{p}.layer{l}.key"] = k.float().clone()
                v = vcap[l].view(1, S, -1, hd).transpose(1, 2)
                assert torch.equal(v[:, :, S - n :], cv)
                golden[f"prompt{p}.layer{l}.value"] = v.float().clone()
            q_re, k_re, v_re = recompute_layer0(model, modeling, ids2)
            dq = (cap.calls[0][0] - q_re).abs().max().item()
            dk = (cap.calls[0][1] - k_re).abs().max().item()
            dv = (golden[f"prompt{p}.layer0.value"] - v_re).abs().max().item()
            assert max(dq, dk, dv) < 1e-5, (dq, dk, dv)
            notes[f"prompt{p}.layer0_recompute_maxdiff"] = f"q {dq:.3e} k {dk:.3e} v {dv:.3e}"
            golden[f"prompt{p}.layer0.query"] = cap.calls[0][0].float().clone()
            tok = out.logits[0, -1].argmax()
            toks, logits = [], []
            pos = S
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
            full = torch.cat([ids, golden[f"prompt{p}.decode_tokens"]]).unsqueeze(0)
            ref = model(input_ids=full, use_cache=False).logits[0, S:]
            d = (ref - golden[f"prompt{p}.decode_logits"]).abs().max().item()
            assert d < 1e-4 or spec.get("decode_may_switch_rope"), d
            notes[f"prompt{p}.decode_vs_full_forward_maxdiff"] = f"{d:.3e}"
            margins = [
                (lambda s: (s[0] - s[1]).item())(torch.topk(x, 2).values) for x in logits[:-1]
            ]
            notes[f"prompt{p}.min_greedy_margin"] = f"{min(margins):.4f}"

        batch = torch.stack([ids[:BATCH_LEN] for ids in prompts])
        bl = model(input_ids=batch, use_cache=False).logits.float()
        golden["batch.input_ids"] = batch.to(torch.int32)
        golden["batch.logits"] = bl

        # What the window changes: the longest prompt without it (so a forward ignoring the
        # window cannot pass the test).
        if any(w is not None for w in windows):
            full_cfg = model_cls.config_class.from_pretrained(out_dir)
            if model_cls is Gemma3ForCausalLM:
                # Gemma builds a sliding mask whenever a layer is "sliding_attention" (and each
                # layer type has its own RoPE): the window made longer than any prompt instead.
                full_cfg.sliding_window = 1 << 20
            else:
                full_cfg.sliding_window = None
                if getattr(full_cfg, "layer_types", None) is not None:
                    full_cfg.layer_types = ["full_attention"] * L
            unwindowed = model_cls.from_pretrained(
                out_dir, config=full_cfg, attn_implementation="eager", dtype=torch.float32
            ).eval()
            ids = prompts[-1].unsqueeze(0)
            d = (unwindowed(input_ids=ids).logits[0] - golden[f"prompt{len(prompts) - 1}.prefill_logits"])
            notes["window_effect_maxdiff"] = f"{d.abs().max().item():.4f}"
            assert d.abs().max().item() > 0.05

    lg = golden["prompt1.prefill_logits"]
    notes["prompt1_logit_std"] = f"{lg.std().item():.4f}"
    metadata = {
        "generator": "tools/reference/make_tiny_archs.py",
        "variant": name,
        "versions": json.dumps(versions(), sort_keys=True),
        "reference": f"transformers {model_cls.__name__}, attn_implementation=eager, fp32, CPU; "
        "model reloaded with from_pretrained from this directory",
        "tensors": json.dumps(GOLDEN_DOC, indent=1),
        "checks": json.dumps(notes, sort_keys=True),
    }
    atomic_save_safetensors(out_dir / "golden.safetensors", golden, metadata)
    sizes = {f.name: f.stat().st_size for f in sorted(out_dir.iterdir())}
    print(f"{name}: {json.dumps(notes)}")
    print(f"{name}: sizes {sizes} total {sum(sizes.values())}")


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = sys.argv[1:] or list(VARIANTS)
    for name in names:
        make_variant(name, VARIANTS[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
