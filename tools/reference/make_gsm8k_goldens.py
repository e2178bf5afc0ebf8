#!/usr/bin/env python3
"""Writes the GSM8K goldens (tests/data/eval/) with lm-eval's own task, filter and metric code.

Reference: lm-eval's `gsm8k` task (lm_eval/tasks/gsm8k/gsm8k.yaml) loaded through
`lm_eval.tasks.TaskManager`, with the HF dataset `openai/gsm8k` replaced by the byte-identical
local copies in ../shared/data/gsm8k (`datasets.load_dataset` is patched to read the jsonl
files: no network). Everything else is lm-eval's code path:

  gsm8k_filter_goldens.json
      50 (response, target) cases. Each response is put through the task's real filter
      ensembles ("strict-match", "flexible-extract": RegexFilter + TakeFirstFilter, built by
      lm-eval from the yaml) on lm-eval `Instance`s, and the filtered answer through
      `task.process_results(doc, [answer])` (exact_match with the yaml's regexes_to_ignore,
      ignore_case, ignore_punctuation). Stored per case: response, target, and per filter the
      extracted answer and exact_match (0/1). Targets are real GSM8K test answers (the whole
      answer text, as `doc_to_target: "{{answer}}"` gives) plus a few synthetic ones ("#### 1,234",
      "#### -3", "#### 0.5"). With --generate N, the first N cases of the model-output section are
      real greedy generations of SmolLM2-135M-Instruct (transformers, GGUF dequantized to fp32) for
      the first N test questions, prompted exactly as below; otherwise that section is empty.

  gsm8k_prompt_goldens.json
      The exact prompt strings lm-eval builds with `apply_chat_template=True,
      fewshot_as_multiturn=True`, num_fewshot from the yaml (5), fewshot seed 1234 (lm-eval's
      default `fewshot_random_seed`), for the first 2 test questions; the chat template is
      SmolLM2-135M-Instruct's, applied through `HFLM.apply_chat_template` (the method lm-eval
      calls) on the transformers tokenizer built from the GGUF. Also the train indices of the
      few-shot examples drawn for each of the first 30 test questions (lm-eval's ContextSampler
      shares one random.Random(1234) across documents in order, so question i's examples depend
      on the draws for questions 0..i-1), the generation kwargs (until, max_gen_toks) and the
      chat template text used (so the C++ test needs no model files).

Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_gsm8k_goldens.py
           [--gguf PATH] [--shared-data DIR] [--out DIR] [--generate N]
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_json_atomic(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def load_task(shared: Path):
    import datasets
    import lm_eval.api.task as task_mod
    from lm_eval.tasks import TaskManager

    real_load = datasets.load_dataset

    def local_load(path=None, name=None, **kwargs):
        assert path == "openai/gsm8k" and name == "main", (path, name)
        files = {"train": str(shared / "gsm8k/train.jsonl"), "test": str(shared / "gsm8k/test.jsonl")}
        return real_load("json", data_files=files)

    task_mod.datasets.load_dataset = local_load
    tasks = TaskManager().load_task_or_group(["gsm8k"])
    return tasks["gsm8k"]


def filter_cases(test_docs):
    """(response, target) pairs: synthetic responses against real and synthetic targets."""
    t = [d["answer"] for d in test_docs[:12]]  # real targets; t[0] ends "#### 18"
    gold = [a.split("#### ")[-1] for a in t]
    cases = [
        (f"The answer is {gold[0]}.\n#### {gold[0]}", t[0]),
        (f"#### {gold[1]}", t[1]),
        (f"So the total is ${gold[2]}.", t[2]),
        (f"The answer is {gold[3]}.", t[3]),
        ("#### 42", t[4]),
        ("There are 3 apples and 5 pears, so 8 fruits.", t[5]),
        ("I do not know.", t[6]),
        ("", t[7]),
        (f"{gold[8]}", t[8]),
        (f"#### {gold[9]}.", t[9]),
        (f"#### ${gold[10]}", t[10]),
        (f"He pays 2 * 3 = 6 dollars. Then 6 + {gold[11]} ... #### {gold[11]}\nQuestion: next", t[11]),
        ("The result is 1,234.", "Sum.\n#### 1,234"),
        ("#### 1,234", "Sum.\n#### 1,234"),
        ("#### 1234", "Sum.\n#### 1,234"),
        ("$1,234.", "Sum.\n#### 1,234"),
        ("The answer is $1,234.00", "Sum.\n#### 1,234"),
        ("It drops by 3, so the change is -3.", "Change.\n#### -3"),
        ("#### -3", "Change.\n#### -3"),
        ("#### - 3", "Change.\n#### -3"),
        ("The change is 3.", "Change.\n#### -3"),
        ("Half of it: 0.5", "Half.\n#### 0.5"),
        ("#### .5", "Half.\n#### 0.5"),
        ("It is .5 of the cake", "Half.\n#### 0.5"),
        ("1/2 = 0.50", "Half.\n#### 0.5"),
        ("First 12, then 15, then 18.", t[0]),
        ("18, 12, 9", t[0]),
        ("#### 18\n#### 9", t[0]),
        ("#### 9\n#### 18", t[0]),
        ("The answer is 18 eggs.", t[0]),
        ("18.", t[0]),
        ("18...", t[0]),
        ("Total: $18.00.", t[0]),
        ("#### 18.0", t[0]),
        ("  #### 18  ", t[0]),
        ("####18", t[0]),
        ("#### eighteen", t[0]),
        ("Answer: eighteen", t[0]),
        ("It costs $5 and 7 cents", t[0]),
        ("1,2,3", t[0]),
        ("Version 2.0.1 released", t[0]),
        ("a-1b", t[0]),
        ("--5", t[0]),
        ("5%", t[0]),
        ("$", t[0]),
        ("18\n\nQuestion: How many?", t[0]),
        ("We get 9 * 2 = $18\nThe answer is $18", t[0]),
        ("9 * 2 = <<9*2=18>>18", t[0]),
        ("The answer is ＄18 (fullwidth) and ١٨", t[0]),
        ("#### 3\n", t[1]),
    ]
    assert len(cases) == 50, len(cases)
    return cases


def score(task, cases, first_doc_id=0):
    from lm_eval.api.instance import Instance

    out = []
    for i, (resp, target) in enumerate(cases):
        doc = {"question": f"case {i}", "answer": target}
        inst = Instance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0,
                        metadata=("gsm8k", first_doc_id + i, 1))
        inst.resps = [resp]
        for f in task._filters:
            f.apply([inst])
        rec = {"response": resp, "target": target}
        for name, filtered in inst.filtered_resps.items():
            res = task.process_results(doc, [filtered])
            rec[name] = {"extracted": filtered, "exact_match": int(res["exact_match"])}
        out.append(rec)
    return out


def build_prompts(task, tokenizer, n_prompts, n_indices):
    from lm_eval.models.huggingface import HFLM

    class Lm:  # what HFLM.apply_chat_template reads from self
        pass

    lm = Lm()
    lm.tokenizer = tokenizer
    lm.chat_template_args = {}

    def chat_template(history, add_generation_prompt=True):
        return HFLM.apply_chat_template(lm, history, add_generation_prompt)

    train = task.fewshot_docs() if task.has_training_docs() else None
    train = list(task.dataset["train"])
    key_to_index = {(d["question"], d["answer"]): i for i, d in enumerate(train)}
    drawn = []
    real_sample = task.sampler.sample

    def recording_sample(*args, **kwargs):
        res = real_sample(*args, **kwargs)
        drawn.append([key_to_index[(d["question"], d["answer"])] for d in res])
        return res

    task.sampler.sample = recording_sample
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=n_indices, apply_chat_template=True, fewshot_as_multiturn=True,
                            chat_template=chat_template, tokenizer_name="smollm2")
    insts = sorted(task.instances, key=lambda x: x.doc_id)
    prompts = [{"doc_id": x.doc_id, "prompt": x.arguments[0]} for x in insts[:n_prompts]]
    gen_kwargs = insts[0].arguments[1]
    return prompts, drawn, gen_kwargs, [x.arguments[0] for x in insts]


def generate(gguf: Path, tokenizer, prompts, until, max_new):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 torch_dtype=torch.float32)
    model.eval()
    outs = []
    for p in prompts:
        ids = tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=max_new, do_sample=False,
                                 stop_strings=until, tokenizer=tokenizer)
        text = tokenizer.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
        for term in until:  # lm-eval's postprocess_generated_text
            text = text.split(term)[0]
        outs.append(text)
        print(f"generated {len(outs)}/{len(prompts)}: {text[:80]!r}", file=sys.stderr)
    return outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=Path("/root/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared/data")
    ap.add_argument("--out", type=Path, default=ROOT / "tests/data/eval")
    ap.add_argument("--generate", type=int, default=0)
    args = ap.parse_args()

    import importlib.metadata as md

    from transformers import AutoTokenizer

    versions = {p: md.version(p) for p in ["lm_eval", "transformers", "datasets", "numpy"]}
    task = load_task(args.shared_data)
    test_docs = list(task.dataset["test"])
    tokenizer = AutoTokenizer.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name)

    prompts, drawn, gen_kwargs, all_prompts = build_prompts(task, tokenizer, 2, 30)
    write_json_atomic(args.out / "gsm8k_prompt_goldens.json", {
        "versions": versions,
        "source": "lm-eval task gsm8k, apply_chat_template=True, fewshot_as_multiturn=True, "
                  "fewshot_random_seed=1234, chat template of " + args.gguf.name,
        "num_fewshot": task.config.num_fewshot,
        "fewshot_seed": 1234,
        "generation_kwargs": gen_kwargs,
        "chat_template": tokenizer.chat_template,
        "prompts": prompts,
        "fewshot_train_indices": drawn,
    })

    cases = filter_cases(test_docs)
    generated = []
    if args.generate > 0:
        until = list(gen_kwargs["until"])
        outs = generate(args.gguf, tokenizer, all_prompts[: args.generate], until,
                        gen_kwargs.get("max_gen_toks", 256))
        generated = [(o, test_docs[i]["answer"]) for i, o in enumerate(outs)]
    records = score(task, cases + generated)
    for r, kind in zip(records, ["synthetic"] * len(cases) + ["smollm2_generation"] * len(generated)):
        r["kind"] = kind
    write_json_atomic(args.out / "gsm8k_filter_goldens.json", {
        "versions": versions,
        "source": "lm-eval gsm8k filter ensembles + task.process_results (exact_match)",
        "filters": [f.name for f in task._filters],
        "metric_kwargs": task._metric_fn_kwargs["exact_match"],
        "cases": records,
    })
    print(f"wrote {len(records)} filter cases, {len(prompts)} prompts, "
          f"{len(drawn)} few-shot draws to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
