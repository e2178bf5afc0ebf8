"""The reference PR's compress.py flow (llm-compressor's KV-cache example) on kvq's engine:
oneshot with a per-head FP8 kv_cache_scheme (strategy attn_head), a sample generation, save.

    pip install .            # or: PYTHONPATH=build/python after the release build
    python examples/python/compress.py [MODEL_DIR] [DATASET] [SAVE_DIR]

Defaults: the default model (scripts/fetch-model.sh), GSM8K train from ../shared/data, and
MODEL_DIR-FP8-KV-Head beside the working directory. The checkpoint loads in transformers /
vLLM (compressed-tensors format) and in kvq (`kvq generate --model SAVE_DIR`).
"""

import os
import pathlib
import sys

import kvq

home = pathlib.Path(os.environ.get("KVQ_HOME", pathlib.Path.home() / ".cache" / "kvq"))
MODEL_ID = sys.argv[1] if len(sys.argv) > 1 else str(home / "SmolLM2-135M-Instruct")
DATASET = sys.argv[2] if len(sys.argv) > 2 else "../shared/data/gsm8k/train.jsonl"
SAVE_DIR = sys.argv[3] if len(sys.argv) > 3 else pathlib.Path(MODEL_ID).name + "-FP8-KV-Head"

NUM_CALIBRATION_SAMPLES = 64
MAX_SEQUENCE_LENGTH = 512

# Load the model (its named_modules() are transformers' names and classes).
model = kvq.load_model(MODEL_ID)

# The recipe, as in llm-compressor: quantize the KV cache to FP8 with one static scale per head.
recipe = """
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      kv_cache_scheme:
        num_bits: 8
        type: float
        strategy: attn_head
        dynamic: false
        symmetric: true
"""

# Calibrate (GSM8K rendered with the model's chat template, as the reference's preprocessing
# does) and apply.
kvq.oneshot(
    model=model,
    recipe=recipe,
    dataset=DATASET,
    num_calibration_samples=NUM_CALIBRATION_SAMPLES,
    max_seq_length=MAX_SEQUENCE_LENGTH,
)
attn = model.get_submodule("model.layers.0.self_attn")
print(f"layer 0 k_scale per head: {attn.k_scale.reshape(-1)}")

# Confirm generations of the quantized model look sane (its packed FP8 KV cache).
print("\n\n========== SAMPLE GENERATION ==============")
out = model.generate("Hello my name is", max_new_tokens=100)
print("Hello my name is" + out["text"])
print(f"(KV cache {out['kv_cache']}: {out['kv_bytes_per_token']} bytes/token)")
print("==========================================\n\n")

# Save to disk in compressed-tensors format.
model.save_pretrained(SAVE_DIR, overwrite=True)
print(f"saved {SAVE_DIR}")
