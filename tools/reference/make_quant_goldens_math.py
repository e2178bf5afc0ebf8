"""Math / observer goldens (see make_quant_goldens.py). Raw little-endian tensors in
math_goldens.bin.gz (gzip), index (cases, dtypes, shapes, offsets) in math_goldens.json."""
import copy
import gzip
import json
import os

import torch
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import fake_quantize, quantize, dequantize
from compressed_tensors.quantization.utils import (
    calculate_qparams,
    compute_dynamic_scales_and_zp,
    generate_gparam,
)
from llmcompressor.observers import Observer

DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int8: "I8",
      torch.float8_e4m3fn: "F8_E4M3", torch.int16: "I16", torch.int32: "I32", torch.uint8: "U8"}


class Blob:
    def __init__(self):
        self.data = bytearray()
        self.n = 0

    def add(self, t):
        t = t.detach().contiguous().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        off = len(self.data)
        self.data += raw
        return {"dtype": DT[t.dtype], "shape": list(t.shape), "offset": off, "nbytes": len(raw)}


def make_input(gen, shape, dtype, kind):
    x = torch.randn(shape, generator=gen) * 2.0
    # per-head spread so attn_head scales differ; a few outliers; exact zeros and ties
    h = shape[1]
    x = x * torch.linspace(0.25, 3.0, h).view(1, h, 1, 1)
    if kind % 2 == 1:
        x = x + 0.75  # asymmetric content
    flat = x.view(-1)
    flat[::97] = 0.0
    flat[5::211] *= 8.0
    return x.to(dtype)


def write(out_dir, versions):
    blob = Blob()
    cases = []
    gen = torch.Generator().manual_seed(1234)
    inputs = {}
    for dtype in (torch.float32, torch.bfloat16):
        for h in (3, 9):
            for s in (1, 37):
                key = f"{DT[dtype]}_{h}_{s}"
                xs = [make_input(gen, (1, h, s, 64), dtype, b) for b in range(5)]
                inputs[key] = [blob.add(x) for x in xs]
                inputs[key + "_t"] = xs
    type_variants = [
        ("int8_sym", dict(num_bits=8, type="int", symmetric=True)),
        ("int8_asym", dict(num_bits=8, type="int", symmetric=False)),
        ("int4_sym", dict(num_bits=4, type="int", symmetric=True)),
        ("int4_asym", dict(num_bits=4, type="int", symmetric=False)),
        ("fp8", dict(num_bits=8, type="float", symmetric=True)),
        ("fp4", dict(num_bits=4, type="float", symmetric=True)),
    ]
    for key in [k for k in inputs if not k.endswith("_t")]:
        xs = inputs[key + "_t"]
        dname, h, s = key.split("_")
        for strategy in ("tensor", "attn_head"):
            for tname, targs in type_variants:
                observers = ["minmax"]
                if h == "9" and s == "37":
                    observers += ["static_minmax", "memoryless_minmax"]
                if h == "3" and s == "37" and tname in ("int8_sym", "int4_asym", "fp8", "fp4"):
                    observers += ["memoryless_mse", "mse"]
                for obs_name in observers:
                    args = QuantizationArgs(strategy=strategy, observer=obs_name, **targs)
                    base = "k"
                    obs = Observer.load_from_registry(obs_name, base_name=base, args=copy.deepcopy(args))
                    steps = []
                    for b, x in enumerate(xs):
                        obs(x)
                        snap = copy.deepcopy(obs)
                        qp = snap.get_qparams()
                        step = {"min_vals": blob.add(obs.min_vals), "max_vals": blob.add(obs.max_vals),
                                "scale": blob.add(qp["scale"]), "zero_point": blob.add(qp["zero_point"])}
                        # Outputs only where they add coverage (keeps the golden ~3 MB): the
                        # last batch of minmax cases; the big [1,9,37,64] input for 4 types.
                        big = h == "9" and s == "37"
                        if (b == len(xs) - 1 and obs_name == "minmax"
                                and (not big or tname in ("int8_asym", "int4_sym", "fp8", "fp4"))):
                            zp = qp["zero_point"]
                            step["fake_quant"] = blob.add(fake_quantize(x, qp["scale"], zp, args))
                            if h == "3":
                                step["quantized"] = blob.add(quantize(x, qp["scale"], zp, args))
                        steps.append(step)
                    cases.append({"kind": "observer", "name": f"{key}_{strategy}_{tname}_{obs_name}",
                                  "args": args.model_dump(mode="json"), "base_name": base,
                                  "inputs": inputs[key], "steps": steps})
    # spec §2.8 golden vectors
    x = torch.arange(24, dtype=torch.bfloat16).reshape(1, 2, 3, 4)
    for strategy in ("tensor", "attn_head"):
        args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy=strategy)
        obs = Observer.load_from_registry("memoryless_minmax", base_name="q", args=copy.deepcopy(args))
        obs(x)
        qp = copy.deepcopy(obs).get_qparams()
        cases.append({"kind": "observer", "name": f"spec28_{strategy}", "args": args.model_dump(mode="json"),
                      "base_name": "q", "inputs": [blob.add(x)],
                      "steps": [{"min_vals": blob.add(obs.min_vals), "max_vals": blob.add(obs.max_vals),
                                 "scale": blob.add(qp["scale"]), "zero_point": blob.add(qp["zero_point"]),
                                 "fake_quant": blob.add(fake_quantize(x, qp["scale"], qp["zero_point"], args)),
                                 "quantized": blob.add(quantize(x, qp["scale"], qp["zero_point"], args))}]})
    v = torch.tensor([-3, -0.7, 0, 0.013, 0.5, 1, 2.2, 7], dtype=torch.bfloat16)
    args = QuantizationArgs(num_bits=8, type="float", strategy="tensor")
    sc, zp = calculate_qparams(v.min(), v.max(), args)
    cases.append({"kind": "qdq", "name": "spec28_fp8", "args": args.model_dump(mode="json"),
                  "x": blob.add(v), "min_vals": blob.add(v.min()), "max_vals": blob.add(v.max()),
                  "scale": blob.add(sc), "zero_point": blob.add(zp),
                  "fake_quant": blob.add(fake_quantize(v, sc, zp, args))})
    # dynamic activation strategies (token / tensor / group / tensor_group with global scale)
    dyn = [
        ("token_int8", dict(num_bits=8, type="int", strategy="token", dynamic=True), (1, 37, 192)),
        ("token_fp8", dict(num_bits=8, type="float", strategy="token", dynamic=True), (2, 5, 64)),
        ("tensor_int8_asym", dict(num_bits=8, type="int", strategy="tensor", dynamic=True, symmetric=False), (1, 37, 64)),
        ("group_fp8", dict(num_bits=8, type="float", strategy="group", group_size=32, dynamic=True), (1, 37, 128)),
        ("group_int4_asym", dict(num_bits=4, type="int", strategy="group", group_size=16, dynamic=True, symmetric=False), (1, 7, 64)),
        ("nvfp4_local", dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, dynamic="local",
                             scale_dtype="float8_e4m3fn", zp_dtype="float8_e4m3fn"), (1, 37, 64)),
    ]
    for dtype in (torch.float32, torch.bfloat16):
        for name, a, shape in dyn:
            args = QuantizationArgs(**a)
            x = (torch.randn(shape, generator=gen) * 3.0).to(dtype)
            gs = None
            entry = {"kind": "dynamic", "name": f"{DT[dtype]}_{name}", "args": args.model_dump(mode="json"),
                     "x": blob.add(x)}
            if args.strategy == "tensor_group":
                gs = generate_gparam(x.min().reshape(1), x.max().reshape(1))
                entry["global_scale"] = blob.add(gs)
            sc, zp = compute_dynamic_scales_and_zp(x, args, None, global_scale=gs)
            entry.update(scale=blob.add(sc), zero_point=blob.add(zp),
                         fake_quant=blob.add(fake_quantize(x, sc, zp, args, global_scale=gs)),
                         quantized=blob.add(quantize(x, sc, zp, args, global_scale=gs)))
            q = quantize(x, sc, zp, args, global_scale=gs)
            entry["dequantized"] = blob.add(dequantize(q, sc, zp, args, global_scale=gs))
            cases.append(entry)
    # weight observers (channel / group / block / tensor_group)
    wcases = [
        ("channel_int8", dict(num_bits=8, type="int", strategy="channel")),
        ("group_int4_asym", dict(num_bits=4, type="int", strategy="group", group_size=32, symmetric=False)),
        ("block_fp8", dict(num_bits=8, type="float", strategy="block", block_structure=[32, 64])),
        ("nvfp4", dict(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                       scale_dtype="float8_e4m3fn", zp_dtype="float8_e4m3fn")),
        ("channel_int8_mse", dict(num_bits=8, type="int", strategy="channel", observer="memoryless_mse")),
    ]
    for dtype in (torch.float32, torch.bfloat16):
        for name, a in wcases:
            args = QuantizationArgs(**a)
            w = (torch.randn((48, 128), generator=gen) * 0.05).to(dtype)
            obs = Observer.load_from_registry(args.observer or "memoryless_minmax", base_name="weight",
                                              args=copy.deepcopy(args))
            obs(w)
            mn, mx = obs.min_vals, obs.max_vals
            qp = obs.get_qparams()
            gs = qp["global_scale"]
            entry = {"kind": "weight", "name": f"{DT[dtype]}_{name}", "args": args.model_dump(mode="json"),
                     "x": blob.add(w), "min_vals": blob.add(mn), "max_vals": blob.add(mx),
                     "scale": blob.add(qp["scale"]), "zero_point": blob.add(qp["zero_point"]),
                     "fake_quant": blob.add(fake_quantize(w, qp["scale"], qp["zero_point"], args, global_scale=gs))}
            if gs is not None:
                entry["global_scale"] = blob.add(gs)
            cases.append(entry)
    # gzip halves the blob (3.8 -> 1.9 MB); mtime=0 keeps the file reproducible.
    with open(os.path.join(out_dir, "math_goldens.bin.gz"), "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(bytes(blob.data))
    with open(os.path.join(out_dir, "math_goldens.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases}, f)
