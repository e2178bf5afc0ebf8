"""Goldens for kvq's transform data model (tests/data/quant/transform_goldens.json).

compressed-tensors 0.19.0's TransformConfig / TransformScheme / TransformArgs dumps
(model_dump(), as ModelCompressor.update_config writes `transform_config`), and the
TransformConfig llm-compressor 0.14.0.1's SpinQuantModifier builds in on_initialize for a tiny
LlamaForCausalLM (head_dim 32). Run with the reference venv (make_venv.sh):
    $VENV/bin/python tools/reference/make_transform_goldens.py
"""
import json
import pathlib

import torch
from compressed_tensors.transform import TransformConfig
from llmcompressor.core import State
from llmcompressor.modifiers.transform import SpinQuantModifier
from pydantic import ValidationError
from transformers import LlamaConfig, LlamaForCausalLM

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/data/quant/transform_goldens.json"

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                     vocab_size=64))

modifiers = [
    {},
    {"rotations": ["R3"]},
    {"rotations": ["R2", "R3"]},
    {"rotations": ["r2", "r3"], "precision": "float32"},
    {"rotations": ["R1", "R2", "R3", "R4"], "transform_block_size": 32},
    {"rotations": ["R2"], "transform_type": "random-hadamard"},
    {"rotations": ["R3"], "transform_type": "random-matrix", "precision": "torch.bfloat16"},
]
spinquant = []
for args in modifiers:
    m = SpinQuantModifier(**args)
    m.on_initialize(State(model=model))
    spinquant.append({"modifier": args, "head_dim": 32,
                      "dump": json.dumps(m.transform_config.model_dump())})

configs_in = [
    {"config_groups": {"a": {"type": "hadamard", "apply": [
        {"targets": "Linear", "location": "input"},
        {"targets": ["Linear"], "location": "weight_input", "inverse": True, "ignore": "lm_head"}],
        "randomize": True}}},
    {"config_groups": {"R3": {"type": "hadamard", "head_dim": 64, "precision": "torch.float64",
                              "apply": [{"targets": ["re:.*self_attn$"], "location": "q_attn"},
                                        {"targets": ["re:.*self_attn$"], "location": "k_cache"}]}}},
    {"config_groups": {}},
]
configs = [{"input": c, "dump": json.dumps(TransformConfig.model_validate(c).model_dump())}
           for c in configs_in]

invalid_in = [
    {"config_groups": {"a": {"type": "hadamard", "bogus": 1}}},
    {"config_groups": {"a": {"type": "hadamard", "apply": [{"targets": ["x"],
                                                             "location": "v_cache"}]}}},
    {"config_groups": {"a": {"apply": []}}},
    {"config_groups": {"a": {"type": "hadamard", "apply": [{"location": "input"}]}}},
    {"config_groups": {"a": {"type": "hadamard", "precision": "torch.nonsense"}}},
    {"groups": {}},
]
invalid = []
for c in invalid_in:
    try:
        TransformConfig.model_validate(c)
    except ValidationError:
        invalid.append(c)
        continue
    raise SystemExit(f"reference accepted {c}")

OUT.write_text(json.dumps({"spinquant": spinquant, "configs": configs, "invalid": invalid},
                          indent=1) + "\n")
print(f"wrote {OUT}")
