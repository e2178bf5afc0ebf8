#!/usr/bin/env python3
"""Goldens for kvq's quantization core (src/kvq/quant), from the real reference.

Runs compressed-tensors / llm-compressor (the versions installed in the reference venv) on
deterministic inputs and writes tests/data/quant/:
  config_goldens.json   preset dumps, seed kv scheme dumps, config.json dumps, error messages
  codec_goldens.json    E4M3 / E5M2 / E2M1 tables from torch (all codes, midpoints, edges)
  math_goldens.safetensors + math_goldens.json   qparams / fake-quant / observer cases
Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_quant_goldens.py
"""
import copy
import json
import os
import sys

import numpy as np
import torch

import compressed_tensors
import llmcompressor
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "quant")
VERSIONS = {
    "compressed_tensors": compressed_tensors.__version__,
    "llmcompressor": llmcompressor.__version__,
    "torch": torch.__version__,
    "python": sys.version.split()[0],
}


def error_text(fn):
    """The reference's own message (inside pydantic's wrapper) and the exception class."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        errs = getattr(e, "errors", None)
        if callable(errs):
            first = e.errors()[0]
            ctx = first.get("ctx", {})
            msg = str(ctx["error"]) if "error" in ctx else first["msg"]
            return {"kind": "validation", "type": first["type"], "loc": [str(x) for x in first["loc"]],
                    "msg": msg, "full": str(e)}
        return {"kind": type(e).__name__, "msg": str(e.args[0]) if e.args else str(e), "full": str(e)}
    return None


SEED_KV = {"num_bits": 8, "type": "float", "strategy": "attn_head", "dynamic": False,
           "symmetric": True, "observer": "static_minmax"}

INVALID_ARGS = [
    {"strategy": "token"},
    {"group_size": 0},
    {"group_size": -2},
    {"strategy": "group"},
    {"strategy": "tensor_group"},
    {"strategy": "group", "group_size": -1},
    {"group_size": 128, "strategy": "channel"},
    {"group_size": 128, "strategy": "attn_head"},
    {"strategy": "block"},
    {"block_structure": [128, 128]},
    {"block_structure": "128x128"},
    {"block_structure": [128]},
    {"block_structure": [0, 128]},
    {"block_structure": "axb", "strategy": "block"},
    {"strategy": "attn_head", "dynamic": True},
    {"strategy": "channel", "dynamic": True},
    {"strategy": "block", "block_structure": [2, 2], "dynamic": True},
    {"strategy": "tensor", "dynamic": "local"},
    {"dynamic": "global"},
    {"strategy": "per_head"},
    {"type": "complex"},
    {"type": "float", "num_bits": 16},
    {"type": "float", "num_bits": 4, "symmetric": False, "strategy": "tensor"},
    {"actorder": True},
    {"actorder": "group"},
    {"actorder": "dynamic"},
    {"foo": 1},
    {"observer_kwarg": {}},
    {"scale_dtype": "torch.notatype"},
    {"num_bits": "eight"},
]
INVALID_SCHEMES = [
    {"targets": ["Linear"], "input_activations": {"strategy": "channel"}},
    {"targets": ["Linear"], "input_activations": {"strategy": "block", "block_structure": [2, 2]}},
    {"targets": ["Linear"], "input_activations": {"actorder": "weight", "strategy": "group", "group_size": 8}},
    {"targets": ["Linear"], "output_activations": {"actorder": "weight", "strategy": "group", "group_size": 8}},
    {"targets": ["Linear"], "format": "mixed-precision"},
    {"targets": ["Linear"], "format": "not-a-format"},
    {"targets": ["Linear"], "kv_cache_scheme": {}},
    {"weights": {}},
]
VALID_ARGS = [
    {},
    SEED_KV,
    {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True},
    {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "attn_head"},
    {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "LOCAL"},
    {"num_bits": 8, "type": "INT", "strategy": "TOKEN", "dynamic": True, "observer": "minmax"},
    {"group_size": -1},
    {"group_size": 128},
    {"group_size": -1, "strategy": "tensor"},
    {"strategy": "block", "block_structure": "128x64"},
    {"actorder": "static", "strategy": "group", "group_size": 32},
    {"actorder": False},
    {"scale_dtype": "float8_e4m3fn", "zp_dtype": "torch.float8_e4m3fn", "num_bits": 4, "type": "float",
     "strategy": "tensor_group", "group_size": 16},
    {"num_bits": 16, "symmetric": False},
    {"num_bits": 32},
    {"observer": "mse", "observer_kwargs": {"maxshrink": 0.5, "grid": 50, "norm": 2.0}},
    {"symmetric": False, "type": "float", "num_bits": 8},
]


def config_goldens():
    presets = {}
    for name in PRESET_SCHEMES:
        presets[name] = json.dumps(preset_name_to_scheme(name, ["Linear"]).model_dump(mode="json"))
    valid = []
    for a in VALID_ARGS:
        valid.append({"input": a, "dump": json.dumps(QuantizationArgs(**copy.deepcopy(a)).model_dump(mode="json"))})
    invalid = [{"input": a, "error": error_text(lambda a=a: QuantizationArgs(**copy.deepcopy(a)))}
               for a in INVALID_ARGS]
    invalid_schemes = [{"input": s, "error": error_text(lambda s=s: QuantizationScheme(**copy.deepcopy(s)))}
                       for s in INVALID_SCHEMES]
    configs = []
    cfg_inputs = [
        {"config_groups": {}, "kv_cache_scheme": SEED_KV},
        {"config_groups": {"attention": {"targets": ["LlamaAttention"], "input_activations": {
            "num_bits": 8, "type": "float", "strategy": "attn_head", "symmetric": True,
            "observer": "static_minmax"}}}},
        {"config_groups": {"W8A8": ["Linear"], "fp8": {"targets": ["re:.*mlp.*"], "weights": {"type": "float"}}},
         "ignore": ["lm_head"], "format": "float-quantized", "quantization_status": "frozen",
         "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "observer": "minmax",
                             "strategy": "tensor", "symmetric": True, "type": "float"},
         "unknown_top_level_key": 3, "run_compressed": True},
        {"config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
                                                                          "strategy": "tensor_group", "group_size": 16,
                                                                          "scale_dtype": "torch.float8_e4m3fn"}}},
         "global_compression_ratio": 1.5, "ignore": None},
    ]
    for c in cfg_inputs:
        qc = QuantizationConfig(**copy.deepcopy(c))
        dump = qc.model_dump(mode="json")
        ckpt = {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors",
                "sparsity_config": {}, "transform_config": {}, **qc.model_dump(mode="json", exclude=["quant_method"])}
        configs.append({"input": c, "dump": json.dumps(dump),
                        "config_json": json.dumps({"quantization_config": ckpt}, indent=2, sort_keys=True)})
    invalid_configs = []
    for c in [{"config_groups": {"W9A9": ["Linear"]}}, {"kv_cache_scheme": SEED_KV},
              {"config_groups": {}, "quantization_status": "thawed"},
              {"config_groups": {}, "kv_cache_scheme": {"strategy": "token"}}]:
        invalid_configs.append({"input": c, "error": error_text(lambda c=c: QuantizationConfig(**copy.deepcopy(c)))})
    # llm-compressor recipes -> resolved QuantizationConfig
    from llmcompressor.recipe import Recipe
    recipes = []
    recipe_texts = [
        "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n"
        "      kv_cache_scheme: {num_bits: 8, type: float, strategy: attn_head, dynamic: false, symmetric: true,"
        " observer: static_minmax}\n",
        "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      config_groups:\n"
        "        attention:\n          targets: [LlamaAttention]\n          input_activations: {num_bits: 8,"
        " type: float, strategy: attn_head, symmetric: true, observer: static_minmax}\n",
        "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      ignore: [lm_head]\n"
        "      scheme: FP8_DYNAMIC\n      targets: Linear\n"
        "      kv_cache_scheme: {num_bits: 8, type: float, strategy: tensor, dynamic: false, symmetric: true}\n",
        json.dumps({"default_stage": {"default_modifiers": {"QuantizationModifier": {
            "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 128},
                                    "input_activations": {"num_bits": 8, "strategy": "tensor"}}},
            "kv_cache_scheme": {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "attn_head"}}}}}),
        "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: {W4A16: [Linear], FP8: [re:.*mlp.*]}\n"
        "      input_observer: mse\n",
    ]
    for text in recipe_texts:
        r = Recipe.create_instance(text)
        mod = r.modifiers[0]
        recipes.append({"text": text, "resolved": json.dumps(mod.resolved_config.model_dump(mode="json"))})
    bad_recipes = []
    for text in ["quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      kv_cache_schema: {num_bits: 8}\n",
                 "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: W9A9\n",
                 "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: FP8\n"
                 "      config_groups: {g: {targets: [Linear], weights: {num_bits: 8}}}\n"]:
        def run(text=text):
            Recipe.create_instance(text).modifiers[0].resolved_config
        bad_recipes.append({"text": text, "error": error_text(run)})
    return {"versions": VERSIONS, "presets": presets, "valid_args": valid, "invalid_args": invalid,
            "invalid_schemes": invalid_schemes, "configs": configs, "invalid_configs": invalid_configs,
            "recipes": recipes, "bad_recipes": bad_recipes}


def main():
    os.makedirs(OUT, exist_ok=True)
    parts = sys.argv[1:] or ["config", "math"]  # "codec": not written yet
    if "config" in parts:
        with open(os.path.join(OUT, "config_goldens.json"), "w") as f:
            json.dump(config_goldens(), f, indent=1)
    if "codec" in parts:
        import make_quant_goldens_codec as codec  # noqa: E402
        codec.write(OUT, VERSIONS)
    if "math" in parts:
        import make_quant_goldens_math as math_goldens  # noqa: E402
        math_goldens.write(OUT, VERSIONS)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
