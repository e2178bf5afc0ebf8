"""Goldens for kvq's reproduction of torch's CPU sampling (tests/data/core/torch_sampling_goldens.json).

What llm-compressor 0.14's calibration sampler draws (llmcompressor/datasets/utils.py
_make_sampler):
  - shuffle_calibration_samples=True: torch.utils.data.RandomSampler(dataset, num_samples=N),
    whose generator is seeded from torch's global one — recorded here after torch.manual_seed(seed)
    and `draws_before` other int64 draws from the global generator (each DataLoader iteration
    draws its base seed first; the sequential pipeline iterates twice);
  - shuffle_calibration_samples=False: LengthAwareSampler, the first N of
    torch.argsort(torch.tensor(lengths), descending=True) — recorded for length lists with many
    ties (samples truncated to max_seq_length tie).
Run with the reference venv (make_venv.sh):
    $VENV/bin/python tools/reference/make_torch_sampling_goldens.py
"""
import json
import os
import pathlib
import random
import tempfile

import torch
from torch.utils.data import RandomSampler

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/data/core/torch_sampling_goldens.json"

samplers = []
for seed, n, k, before in [(0, 1, 1, 0), (1, 2, 2, 0), (5, 10, 4, 0), (42, 1000, 64, 3),
                           (42, 7473, 32, 1), (1234, 7473, 512, 3), (2**40 + 7, 300, 300, 0),
                           (2**64 - 1, 50, 50, 2), (3, 200000, 16, 0)]:
    torch.manual_seed(seed)
    for _ in range(before):
        torch.empty((), dtype=torch.int64).random_()
    samplers.append({"seed": str(seed), "n": n, "k": k, "draws_before": before,
                     "indices": list(RandomSampler(range(n), num_samples=k))})

rng = random.Random(7)
argsorts = []
for n in [1, 5, 16, 17, 30, 100, 600, 5000]:
    lengths = [rng.choice([512, 512, 512, 100, 200, rng.randint(1, 512)]) for _ in range(n)]
    argsorts.append({"lengths": lengths,
                     "order": torch.argsort(torch.tensor(lengths), descending=True).tolist()})

golden = {"torch": torch.__version__, "random_sampler": samplers, "argsort_descending": argsorts}
fd, tmp = tempfile.mkstemp(dir=OUT.parent)
with os.fdopen(fd, "w") as f:
    json.dump(golden, f)
    f.write("\n")
os.replace(tmp, OUT)
print("wrote", OUT)
