#!/usr/bin/env python3
"""Can vLLM load this checkpoint's KV-cache / attention quantization? (stdlib only)

Reads a config.json (or a model directory), takes `quantization_config` (or
`compression_config`) and applies vLLM's compressed-tensors rules (spec §8):
  - kv_cache_scheme.type/num_bits: vLLM's validate_kv_cache_scheme rejects only when
    `type != "float" and num_bits != 8` (an `and`, a known vLLM bug: int8 passes the check but
    no int8 KV cache exists, so this tool reports it as not loadable with that reason);
  - strategy: "tensor" always; "attn_head" needs vLLM with PR #30141 and the FlashAttention
    backend (reported as loadable with that condition);
  - symmetric must be true;
  - dynamic kv schemes are not loadable (scales must come from the checkpoint);
  - attention config groups (targets ending in "Attention") are dropped by vLLM, which couples
    q quantization with the kv scheme; q scales [H,1,1] are reduced to one per KV head (max);
  - transform_config: offline transforms (weight_input / weight_output: SpinQuant R1, R2) are
    in the saved weights, so vLLM runs them without knowing; ONLINE ones (q_attn / k_cache:
    SpinQuant R3; input / output: R4) are not run by vLLM (compressed-tensors' attention
    transforms are an open vLLM PR, reference/peers_and_anchors.md), so their k/v scales —
    calibrated on rotated states — would quantize unrotated ones: reported as not loadable.
    (transformers 5.17 + compressed-tensors 0.19 do not register R3 on load either; measured,
    see docs/status.md.)
Prints one line per finding; exit code 0 when loadable, 1 when not, 2 on a bad input file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def check(qc: dict) -> tuple[bool, list[str]]:
    notes: list[str] = []
    ok = True
    kv = qc.get("kv_cache_scheme")
    groups = qc.get("config_groups") or {}
    attn_groups = [
        name for name, g in groups.items()
        if isinstance(g, dict) and len(g.get("targets") or []) == 1
        and str(g["targets"][0]).endswith("Attention")
    ]
    if kv is None:
        if attn_groups:
            return False, ["attention config group without kv_cache_scheme: vLLM drops attention "
                           "groups and needs kv_cache_scheme to quantize the cache"]
        return False, ["no kv_cache_scheme: nothing for vLLM's KV cache to load"]
    typ = kv.get("type", "int")
    bits = kv.get("num_bits", 8)
    strategy = kv.get("strategy") or ("tensor" if kv.get("group_size") is None else "group")
    if typ != "float" and bits != 8:
        ok = False
        notes.append(f"NOT loadable: Currently supported kv cache quantization is num_bits=8, "
                     f"type=float (got num_bits={bits}, type={typ})")
    elif typ != "float" or bits != 8:
        ok = False
        notes.append(f"NOT loadable: {typ}{bits} passes vLLM's (buggy `and`) check but vLLM has no "
                     f"{typ}{bits} KV cache; only FP8 (num_bits=8, type=float) works")
    if strategy == "tensor":
        notes.append("strategy tensor: per-tensor k/v scales, supported by every vLLM backend")
    elif strategy == "attn_head":
        notes.append("strategy attn_head: per-head k/v scales, needs vLLM with PR #30141 and the "
                     "FlashAttention backend (older vLLM: 'Only support per-tensor scaling factor')")
    else:
        ok = False
        notes.append(f"NOT loadable: Invalid strategy for compressed-tensors KV cache "
                     f"(expected tensor or attn_head, found {strategy})")
    if not kv.get("symmetric", True):
        ok = False
        notes.append("NOT loadable: Only support symmetric scaling factor for compressed-tensors "
                     "KV cache")
    if kv.get("dynamic", False) not in (False, "false"):
        ok = False
        notes.append("NOT loadable: dynamic kv_cache_scheme (vLLM loads static scales)")
    for name in attn_groups:
        notes.append(f"config group {name}: dropped by vLLM (attention quant is coupled with "
                     f"KV-cache quantization); q_scale still loaded"
                     + (", reduced to one scale per KV head (max)" if strategy == "attn_head" else ""))
    online = sorted({
        f"{name}: {a.get('location')}"
        for name, scheme in ((qc.get("transform_config") or {}).get("config_groups") or {}).items()
        for a in (scheme.get("apply") or [])
        if a.get("location") not in ("weight_input", "weight_output")
    })
    if online:
        ok = False
        notes.append("NOT loadable: online transforms vLLM does not run (" + ", ".join(online)
                     + "); their k/v scales were calibrated on rotated states")
    elif qc.get("transform_config"):
        notes.append("transform_config: offline transforms only (fused in the weights); fine")
    notes.append("run vLLM with kv_cache_dtype='fp8'")
    return ok, notes


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_kv_check.py CONFIG_JSON_OR_MODEL_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    qc = cfg.get("quantization_config") or cfg.get("compression_config")
    if qc is None and "kv_cache_scheme" in cfg:
        qc = cfg
    if not isinstance(qc, dict):
        print(f"{path}: NOT loadable: no quantization_config")
        return 1
    ok, notes = check(qc)
    for n in notes:
        print(f"{path}: {n}")
    print(f"{path}: {'loadable by vLLM' if ok else 'NOT loadable by vLLM'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
