"""Cost of Python attention hooks during calibration (issue 20): kvq.oneshot on the default model
with and without a no-op Python hook (query, key and value) on every attention layer.

    PYTHONPATH=build/python python3 bench/python/hook_overhead.py [SAMPLES] [REPEATS]

Runs alternate (plain, hooked) REPEATS times; reports the minimum and median wall time of each,
the hook calls per run, the cost per call ((hooked - plain) / calls, from the minima) and the
share of calibration time. Time it on a quiet machine only (check `uptime`).
"""

import os
import pathlib
import statistics
import sys
import time

import kvq

home = pathlib.Path(os.environ.get("KVQ_HOME", pathlib.Path.home() / ".cache" / "kvq"))
MODEL = home / "SmolLM2-135M-Instruct"
ROOT = pathlib.Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "recipes" / "kv_fp8_head.yaml"
DATASET = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
SAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 32
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3

kvq.set_log_level("warn")
model = kvq.load_model(MODEL)
attention = [m for _, m in model.named_modules() if m.is_attention]
calls = 0


def noop(module, states):
    global calls
    calls += 1


def run(hooked):
    global calls
    handles = []
    if hooked:
        for m in attention:
            handles += [kvq.register_query_hook(m, noop), kvq.register_key_hook(m, noop),
                        kvq.register_value_hook(m, noop)]
    calls = 0
    start = time.perf_counter()
    kvq.oneshot(model=model, recipe=RECIPE, dataset=DATASET, num_calibration_samples=SAMPLES,
                max_seq_length=512)
    seconds = time.perf_counter() - start
    for h in handles:
        h.remove()
    return seconds, calls


plain, hooked = [], []
n_calls = 0
for _ in range(REPEATS):
    plain.append(run(False)[0])
    s, n_calls = run(True)
    hooked.append(s)
per_call = (min(hooked) - min(plain)) / n_calls
print(f"threads {kvq.num_threads()}, {SAMPLES} samples, {REPEATS} repeats")
print(f"plain : min {min(plain):.3f} s, median {statistics.median(plain):.3f} s")
print(f"hooked: min {min(hooked):.3f} s, median {statistics.median(hooked):.3f} s "
      f"({n_calls} hook calls)")
print(f"per hook call: {per_call * 1e6:.2f} us; share of calibration time: "
      f"{(min(hooked) - min(plain)) / min(hooked) * 100:.2f} %")
