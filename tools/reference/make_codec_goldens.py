"""Codec goldens for FP8 E4M3 / E5M2 and FP4 E2M1, straight from torch and compressed-tensors.

Writes tests/data/codec/codec_goldens.json (atomically):
  versions                 torch / compressed-tensors versions used
  e4m3_decode, e5m2_decode 256 fp32 bit patterns: code c -> torch.tensor(c, uint8).view(f8).float()
  e4m3_encode, e5m2_encode {"inputs": [fp32 bits], "codes": [uint8]}: x.to(float8_*) for a dense
                           set of inputs: every code's value and every midpoint between adjacent
                           finite values of both formats, each with its fp32 neighbours
                           (nextafter up / down), both signs, ±0, fp32 subnormals, 448, 464, 465,
                           480, 57344, 61440, 1e6, ±inf, nan (both signs)
  e2m1                     {"inputs": [fp32 bits], "outputs": [fp32 bits]}: compressed-tensors'
                           FP4_E2M1_DATA.cast_to_fp4 (the CPU path used by round_to_quantized_type)
                           at every threshold and its neighbours, ±0, ±inf, nan
Bit patterns are stored as unsigned ints so NaN payloads and the sign of zero survive JSON.
Run: $HOME/.cache/kvq/refvenv/bin/python tools/reference/make_codec_goldens.py
"""
import json
import os

import numpy as np
import torch
import compressed_tensors
from compressed_tensors.quantization.quant_args import FP4_E2M1_DATA

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "codec")


def bits(x):
    return [int(v) for v in np.asarray(x, dtype=np.float32).view(np.uint32)]


def decode_all(dtype):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return codes.view(dtype).to(torch.float32).numpy()


def neighbours(values):
    v = np.asarray(values, dtype=np.float32)
    with np.errstate(over="ignore"):  # nextafter(fp32 max) = inf is wanted
        up = np.nextafter(v, np.float32(np.inf))
    down = np.nextafter(v, np.float32(-np.inf))
    return np.concatenate([v, up, down])


def dense_inputs(decoded_tables):
    pts = []
    for table in decoded_tables:
        finite = np.unique(np.abs(table[np.isfinite(table)]).astype(np.float64))
        mids = (finite[1:] + finite[:-1]) / 2  # exact in fp64, exact in fp32 too (few bits)
        pts.append(finite)
        pts.append(mids)
    special = [0.0, 448.0, 464.0, 465.0, 480.0, 57344.0, 61440.0, 1e6, 1e-45, 1e-40,
               np.finfo(np.float32).tiny, 2.0 ** -10, 2.0 ** -17, 3.0 * 2.0 ** -18,
               np.finfo(np.float32).max]
    pos = neighbours(np.concatenate(pts + [np.asarray(special)]).astype(np.float32))
    pos = pos[pos >= 0]
    allv = np.concatenate([pos, -pos, np.asarray([np.inf, -np.inf], dtype=np.float32)])
    allv = np.unique(allv.view(np.uint32)).view(np.float32)
    nan = np.asarray([np.nan, -np.nan], dtype=np.float32)
    nan[1] = -np.abs(nan[1])  # a negative quiet NaN
    return np.concatenate([allv, nan])


def encode(x, dtype):
    return [int(c) for c in torch.from_numpy(x.copy()).to(dtype).view(torch.uint8).numpy()]


def main():
    e4 = decode_all(torch.float8_e4m3fn)
    e5 = decode_all(torch.float8_e5m2)
    x = dense_inputs([e4, e5])
    thresholds = np.asarray([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5,
                             4.0, 5.0, 6.0, 7.0, 0.1, 100.0, 1e30], dtype=np.float32)
    t = neighbours(thresholds)
    t = np.concatenate([t, -t, np.asarray([np.inf, -np.inf, np.nan], dtype=np.float32)])
    t = np.unique(t.view(np.uint32)).view(np.float32)
    fp4 = FP4_E2M1_DATA.cast_to_fp4(torch.from_numpy(t.copy())).numpy()
    golden = {
        "versions": {"torch": torch.__version__, "compressed_tensors": compressed_tensors.__version__},
        "e4m3_decode": bits(e4),
        "e5m2_decode": bits(e5),
        "e4m3_encode": {"inputs": bits(x), "codes": encode(x, torch.float8_e4m3fn)},
        "e5m2_encode": {"inputs": bits(x), "codes": encode(x, torch.float8_e5m2)},
        "e2m1": {"inputs": bits(t), "outputs": bits(fp4)},
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "codec_goldens.json")
    with open(path + ".tmp", "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    os.replace(path + ".tmp", path)
    print(path, len(x), "fp8 inputs,", len(t), "fp4 inputs")


if __name__ == "__main__":
    main()
