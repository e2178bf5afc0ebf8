"""Per-call cost of a no-op Python attention hook (issue 20), measured where it is largest
relative to the work: decode steps of the default model (1 new token; query, key and value hooks
on all 30 layers = 90 calls per step), 64 steps with and without hooks, alternating 5 times.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 python3 bench/python/hook_decode_step.py

Time it on a quiet machine only (check `uptime`).
"""
import os
import pathlib
import statistics
import time

import kvq
kvq.set_log_level("warn")
home = pathlib.Path(os.environ.get("KVQ_HOME", pathlib.Path.home() / ".cache" / "kvq"))
model = kvq.load_model(home / "SmolLM2-135M-Instruct")
att = [m for _, m in model.named_modules() if m.is_attention]
calls = 0
def noop(m, s):
    global calls
    calls += 1
def steps(hooked, n=64):
    global calls
    hs = []
    if hooked:
        for m in att:
            hs += [kvq.register_query_hook(m, noop), kvq.register_key_hook(m, noop), kvq.register_value_hook(m, noop)]
    cache = model.make_cache(capacity=80)
    model.forward(list(range(1, 9)), cache)
    calls = 0
    t = time.perf_counter()
    for i in range(n):
        model.forward([100 + i], cache)
    dt = time.perf_counter() - t
    c = calls
    for h in hs: h.remove()
    return dt / n, c / n
res = {False: [], True: []}
for r in range(5):
    for h in (False, True):
        res[h].append(steps(h))
p = min(x[0] for x in res[False]); q = min(x[0] for x in res[True]); c = res[True][0][1]
print(f"decode step plain min {p*1e3:.3f} ms (median {statistics.median(x[0] for x in res[False])*1e3:.3f}), hooked min {q*1e3:.3f} ms (median {statistics.median(x[0] for x in res[True])*1e3:.3f}), {c:.0f} hook calls/step -> {(q-p)/c*1e6:.2f} us per call, {100*(q-p)/p:.1f} % of a decode step")
