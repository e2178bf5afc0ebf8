#!/usr/bin/env python3
"""Writes the GGUF reader/dequantization goldens into tests/data/io_gguf/.

Run with the reference venv (gguf from PyPI):
    /root/.cache/kvq/refvenv/bin/python tools/reference/make_gguf_goldens.py

Outputs (small, committed):
  tiny.gguf                 a GGUF v3 file written by gguf.GGUFWriter holding
                            - metadata of every value type (u8..i64, f32, f64, bool, string,
                              arrays of ints / floats / bools / strings, nested arrays),
                            - for every dequantizable type T one tensor "bits.T" of random block
                              bytes (every bit pattern of the packed quants; scales set to finite
                              fp16 values) and, where gguf-py can quantize T, one tensor
                              "quant.T" of quantized normal rows.
  expected.safetensors      the fp32 values gguf.quants.dequantize gives for every tensor, under
                            the same names, in row-major shape (GGUF ne reversed).
  metadata_expected.json    every metadata key with its GGUF type and value, plus versions.
"""
import json
import pathlib
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V
from gguf.constants import GGML_QUANT_SIZES
import safetensors
from safetensors.numpy import save_file

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "io_gguf"
ROWS, COLS = 3, 512  # 3 rows of 2 super-blocks (or 16 legacy blocks)
TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]

# Byte offsets of the fp16 scales inside each block (they must be finite for a meaningful test;
# every other byte is uniformly random).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def random_blocks(rng, qtype):
    block, size = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        return rng.standard_normal((ROWS, COLS)).astype(np.float32)
    if qtype == T.F16:
        return rng.standard_normal((ROWS, COLS)).astype(np.float16)
    if qtype == T.BF16:
        # Random bf16 bit patterns, NaN and inf excluded.
        bits = rng.integers(0, 1 << 16, size=(ROWS, COLS), dtype=np.uint16)
        bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
        return bits.view(np.uint8).reshape(ROWS, COLS * 2)
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        scale = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, COLS // block * size)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    path = OUT / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")  # writes general.architecture first

    meta = [  # (key, GGUF type, value, sub type)
        ("test.u8", V.UINT8, 200, None),
        ("test.i8", V.INT8, -100, None),
        ("test.u16", V.UINT16, 60000, None),
        ("test.i16", V.INT16, -30000, None),
        ("test.u32", V.UINT32, 4000000000, None),
        ("test.i32", V.INT32, -2000000000, None),
        ("test.f32", V.FLOAT32, 1e-5, None),
        ("test.bool_true", V.BOOL, True, None),
        ("test.bool_false", V.BOOL, False, None),
        ("test.string", V.STRING, "héllo\nwörld ✓", None),
        ("test.u64", V.UINT64, 18000000000000000000, None),
        ("test.i64", V.INT64, -9000000000000000000, None),
        ("test.f64", V.FLOAT64, 3.141592653589793, None),
        ("test.array_i32", V.ARRAY, [3, -1, 7, 2147483647], V.INT32),
        ("test.array_u8", V.ARRAY, [0, 1, 255], V.UINT8),
        ("test.array_f32", V.ARRAY, [0.5, -2.25, 1e-3], V.FLOAT32),
        ("test.array_bool", V.ARRAY, [True, False, True], V.BOOL),
        ("test.array_string", V.ARRAY, ["a", "", "Ġthe", "<|im_end|>"], V.STRING),
        ("test.array_nested", V.ARRAY, [[1, 2], [3], [4, 5, 6]], V.ARRAY),
    ]
    nested = next(v for k, _, v, _ in meta if k == "test.array_nested")
    for key, vtype, value, sub in meta:
        w.add_key_value(key, value, vtype, sub_type=sub)

    expected = {}
    for qtype in TYPES:
        data = random_blocks(rng, qtype)
        name = f"bits.{qtype.name}"
        raw_dtype = qtype if qtype not in (T.F32, T.F16) else None
        w.add_tensor(name, data, raw_dtype=raw_dtype)
        expected[name] = gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(ROWS, COLS)
        try:
            values = rng.standard_normal((ROWS, COLS)).astype(np.float32)
            q = gguf.quants.quantize(values, qtype)
        except NotImplementedError:
            continue  # gguf-py has no quantizer for the k-quants; the random bits cover them
        name = f"quant.{qtype.name}"
        w.add_tensor(name, q, raw_dtype=raw_dtype)
        expected[name] = gguf.quants.dequantize(q, qtype).astype(np.float32).reshape(ROWS, COLS)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Read back with gguf-py so the expected metadata is what its reader sees.
    r = gguf.GGUFReader(str(path))
    versions = {"gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
                "numpy": np.__version__, "safetensors": safetensors.__version__,
                "python": sys.version.split()[0]}
    meta_out = {"versions": versions, "gguf_version": int(r.fields["GGUF.version"].parts[-1][0]),
                "metadata": {}, "tensors": {}}
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        value = _jsonable(field.contents())
        if key == "test.array_nested":
            value = nested  # gguf-py's contents() flattens nested arrays; keep the structure
        meta_out["metadata"][key] = {"type": [t.name for t in field.types], "value": value}
    for t in r.tensors:
        meta_out["tensors"][t.name] = {"type": t.tensor_type.name, "ne": [int(x) for x in t.shape],
                                       "offset": int(t.data_offset - r.data_offset),
                                       "nbytes": int(t.n_bytes)}
    (OUT / "metadata_expected.json").write_text(json.dumps(meta_out, indent=1, ensure_ascii=False) + "\n")
    save_file(expected, str(OUT / "expected.safetensors"),
              metadata={"generator": "tools/reference/make_gguf_goldens.py",
                        **{k: str(v) for k, v in versions.items()}})
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(expected)} tensors to {OUT} ({total} bytes)")


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.generic,)):
        return v.item()
    return v


if __name__ == "__main__":
    main()
