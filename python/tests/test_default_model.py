"""The Python API on the default model (SmolLM2-135M-Instruct, scripts/fetch-model.sh), against the
`kvq` CLI: oneshot writes the same checkpoint bytes, generate and perplexity give the CLI's
--json results. Skipped when the model is absent unless KVQ_REQUIRE_MODEL=1 (CI sets it)."""

import json
import subprocess

import numpy as np
import pytest

import kvq
from conftest import KVQ_BINARY, SHARED_DATA, SOURCE_DIR

RECIPE = SOURCE_DIR / "examples" / "recipes" / "kv_fp8_head.yaml"


def cli(*args):
    run = subprocess.run([KVQ_BINARY, *map(str, args)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def model(default_model_dir):
    return kvq.load_model(default_model_dir)


def test_module_tree(model):
    modules = model.named_modules()
    assert len(modules) == 397  # transformers' named_modules() of SmolLM2-135M
    attn = [m for _, m in modules if m.is_attention]
    assert len(attn) == 30 and attn[0].class_name == "LlamaAttention"
    assert (attn[0].num_heads, attn[0].num_kv_heads, attn[0].head_dim) == (9, 3, 64)


def test_noop_hooks_on_every_layer_leave_logits_bit_identical(model):
    ids = model.encode("The capital of France is")
    before = model.forward(ids)
    calls = []
    handles = [kvq.register_key_hook(m, lambda m, s: calls.append(s.shape))
               for _, m in model.named_modules() if m.is_attention]
    after = model.forward(ids)
    for h in handles:
        h.remove()
    assert len(calls) == 30 and calls[0] == (1, 3, len(ids), 64)
    assert np.array_equal(before, after)


def test_generate_equals_cli(model, default_model_dir):
    for kv in ("auto", "int8:head"):
        py = model.generate("Hello my name is", max_new_tokens=16, kv_cache=kv)
        ref = json.loads(cli("generate", "--model", default_model_dir, "--prompt", "Hello my name is",
                             "--max-new-tokens", 16, "--kv-cache", kv, "--json"))
        for key in ("prompt_ids", "generated_ids", "text", "stop_reason", "kv_cache",
                    "kv_bytes_per_token"):
            assert py[key] == ref[key], key
        assert set(py) == set(ref)


def test_perplexity_equals_cli(model, default_model_dir, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("kvq quantizes the attention and KV cache of LLMs. " * 40)
    py = kvq.perplexity(model, text, ctx=128, max_windows=2, kv_cache="int4:head")
    ref = json.loads(cli("perplexity", "--model", default_model_dir, "--text", text, "--ctx", 128,
                         "--max-windows", 2, "--kv-cache", "int4:head", "--json"))
    assert py["ppl"] == ref["ppl"] and py["window_nll_sum"] == ref["window_nll_sum"]
    assert set(py) == set(ref)


def test_oneshot_writes_the_cli_checkpoint_bytes(default_model_dir, tmp_path):
    dataset = SHARED_DATA / "gsm8k" / "train.jsonl"
    cli("oneshot", "--model", default_model_dir, "--recipe", RECIPE, "--dataset", dataset,
        "--num-calibration-samples", 4, "--max-seq-length", 128, "--output", tmp_path / "cli")
    model = kvq.load_model(default_model_dir)
    kvq.oneshot(model=model, recipe=str(RECIPE), dataset=dataset, num_calibration_samples=4,
                max_seq_length=128, output_dir=tmp_path / "py")
    files = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "py").iterdir())
    assert "model.safetensors" in files and "config.json" in files
    for name in files:
        cli_bytes, py_bytes = (tmp_path / "cli" / name).read_bytes(), (tmp_path / "py" / name).read_bytes()
        if name == "calibration_report.json":  # holds the calibration's wall time
            cli_json, py_json = json.loads(cli_bytes), json.loads(py_bytes)
            for timing in ("seconds", "tokens_per_second"):
                cli_json.pop(timing), py_json.pop(timing)
            assert cli_json == py_json
        else:
            assert cli_bytes == py_bytes, name
    # The calibrated model in memory runs the checkpoint's packed cache.
    out = model.generate("Hello my name is", max_new_tokens=8)
    assert out["kv_cache"] == "fp8:head"
    saved = kvq.load_model(tmp_path / "py").generate("Hello my name is", max_new_tokens=8)
    assert saved["generated_ids"] == out["generated_ids"]


def test_oneshot_from_a_list_of_strings(default_model_dir):
    model = kvq.load_model(default_model_dir)
    kvq.oneshot(model=model, recipe=RECIPE, dataset=["Hello there.", "The sky is blue today."],
                max_seq_length=64)
    scale = model.get_submodule("model.layers.3.self_attn").k_scale
    assert scale.shape == (3, 1, 1) and np.all(np.isfinite(scale)) and np.all(scale > 0)


def test_compare_returns_results_json(default_model_dir, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 30)
    out = tmp_path / "cmp"
    r = kvq.compare(default_model_dir, ["KV-INT8-Head"], out_dir=out, data_dir=SHARED_DATA,
                    text_file=text, ctx=64, max_windows=2, calib_samples=2, decode_steps=0)
    assert r == json.loads((out / "results.json").read_text())
    assert [row["scheme"] for row in r["schemes"]] == ["baseline", "KV-INT8-Head"]


def test_long_calls_release_the_gil(model, tmp_path):
    import threading

    text = tmp_path / "text.txt"
    text.write_text("Calibration keeps the GIL free for other threads. " * 200)
    done = threading.Event()
    result = {}

    def work():
        result["ppl"] = kvq.perplexity(model, text, ctx=512, max_windows=2)["ppl"]
        done.set()

    t = threading.Thread(target=work)
    t.start()
    spins = 0
    while not done.is_set():  # runs only while the native call has released the GIL
        spins += 1
    t.join()
    assert result["ppl"] > 1 and spins > 10_000
