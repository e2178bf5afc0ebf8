#!/usr/bin/env python3
"""Writes tests/data/io/reference.safetensors with the real `safetensors` package.

Run with the reference venv:
    /root/.cache/kvq/refvenv/bin/python tools/reference/make_safetensors_goldens.py

The file holds one small tensor per dtype kvq supports (plus a 0-dim and an empty tensor).
tests/data/io/reference.json records, for each tensor, dtype, shape and the raw little-endian
bytes as hex taken from torch (independent of the safetensors encoder), so the C++ test checks
our reader against torch's own bytes.

With --check FILE it instead loads FILE (written by kvq) with safetensors and prints every
tensor, to confirm that the reference reads what kvq writes.
"""
import argparse
import json
import pathlib
import sys

import numpy
import safetensors
import torch
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "io"


def tensors():
    g = torch.Generator().manual_seed(1234)
    base = torch.randn(2, 3, generator=g) * 3
    return {
        "f32": base.clone(),
        "f16": base.to(torch.float16),
        "bf16": base.to(torch.bfloat16),
        "f64": base.to(torch.float64).reshape(3, 2),
        "f8_e4m3": base.clamp(-448, 448).to(torch.float8_e4m3fn),
        "f8_e5m2": base.to(torch.float8_e5m2),
        "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 128, 255], dtype=torch.uint8),
        "i16": torch.tensor([[-32768, 7], [300, 32767]], dtype=torch.int16),
        "i32": torch.tensor([-(2**31), -5, 0, 2**31 - 1], dtype=torch.int32),
        "i64": torch.tensor([-(2**63), 42, 2**63 - 1], dtype=torch.int64),
        "bool": torch.tensor([True, False, True], dtype=torch.bool),
        "scalar": torch.tensor(2.5, dtype=torch.float32),  # 0-dim
        "empty": torch.zeros(0, 4, dtype=torch.bfloat16),
        "model.layers.0.self_attn.k_scale": torch.tensor([0.0125], dtype=torch.float32),
    }


def raw_hex(t: torch.Tensor) -> str:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex() if t.numel() else ""


def generate():
    OUT.mkdir(parents=True, exist_ok=True)
    versions = (f"safetensors {safetensors.__version__}, torch {torch.__version__}, "
                f"numpy {numpy.__version__}")
    ts = tensors()
    path = OUT / "reference.safetensors"
    # One metadata key: the Rust writer serialises __metadata__ from a hash map, so with several
    # keys their order (and the file's bytes) would not be reproducible.
    save_file(ts, str(path), metadata={"generator": versions})
    expected = {
        "generator": versions,
        "tensors": {
            name: {
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "hex": raw_hex(t),
            }
            for name, t in ts.items()
        },
    }
    (OUT / "reference.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    back = load_file(str(path))
    assert all(raw_hex(back[k]) == raw_hex(ts[k]) and back[k].shape == ts[k].shape for k in ts)
    print(f"wrote {path} ({path.stat().st_size} bytes) with {versions}")


def check(path: str):
    with safetensors.safe_open(path, framework="pt") as f:
        print("metadata:", f.metadata())
        for k in f.keys():
            t = f.get_tensor(k)
            print(k, t.dtype, tuple(t.shape), t.flatten()[:6].tolist())
    print(f"OK: safetensors {safetensors.__version__} read {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", help="a .safetensors file written by kvq to load")
    args = parser.parse_args()
    if args.check:
        check(args.check)
    else:
        generate()
    sys.exit(0)
