"""The Python API on the tiny random Llama (tests/data/tiny_llama/gqa: 3 layers, 4 heads / 2 kv
heads, head_dim 16, vocab 256, no tokenizer): module tree, forward against transformers' goldens,
hooks, quantization, the packed cache, interrupts and errors. Fast: runs in every CI build."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import kvq
from conftest import KVQ_BINARY, SOURCE_DIR, TINY, read_safetensors

KV_FP8_HEAD = {
    "config_groups": {},
    "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "attn_head", "symmetric": True,
                        "dynamic": False},
}


@pytest.fixture()
def model():
    return kvq.load_model(TINY)


def prompt_ids(p=0):
    return read_safetensors(TINY / "golden.safetensors")[f"prompt{p}.input_ids"]


def attention_modules(model):
    return [m for _, m in model.named_modules() if m.is_attention]


def test_named_modules_are_transformers_names_and_classes(model):
    expected = json.loads((TINY / "named_modules.json").read_text())
    got = [[name, m.class_name, m.class_hierarchy] for name, m in model.named_modules()]
    assert [g[:2] for g in got] == [e[:2] for e in expected]
    assert model.get_submodule("model.layers.1.self_attn").class_name == "LlamaAttention"
    assert model.config["model_type"] == "llama"
    assert model.weights == "f32"


def test_forward_matches_transformers_golden(model):
    golden = read_safetensors(TINY / "golden.safetensors")
    for p in (0, 1):
        logits = model.forward(golden[f"prompt{p}.input_ids"])
        assert logits.dtype == np.float32
        np.testing.assert_allclose(logits, golden[f"prompt{p}.prefill_logits"], atol=1e-5, rtol=0)


def test_hooks_count_calls_and_shapes(model):
    seen = []

    def hook(kind):
        def fn(module, states):
            seen.append((kind, module.name, states.shape, states.dtype))
        return fn

    handles = []
    for m in attention_modules(model):
        handles += [kvq.register_query_hook(m, hook("q")), kvq.register_key_hook(m, hook("k")),
                    kvq.register_value_hook(m, hook("v"))]
    ids = prompt_ids()
    cache = model.make_cache(64)
    model.forward(ids, cache=cache)
    # Per layer: key and value hooks (before the cache write), then the query hook.
    assert len(seen) == 3 * 3
    assert seen[:3] == [("k", "model.layers.0.self_attn", (1, 2, len(ids), 16), np.float32),
                        ("v", "model.layers.0.self_attn", (1, 2, len(ids), 16), np.float32),
                        ("q", "model.layers.0.self_attn", (1, 4, len(ids), 16), np.float32)]
    seen.clear()
    model.forward([5], cache=cache)  # decode: one new token
    assert [s[2] for s in seen[:3]] == [(1, 2, 1, 16), (1, 2, 1, 16), (1, 4, 1, 16)]
    assert cache.length == len(ids) + 1
    for h in handles:
        h.remove()
    seen.clear()
    model.forward(ids)
    assert seen == []
    assert all(m.num_hooks == 0 for m in attention_modules(model))


def test_noop_hook_leaves_logits_bit_identical(model):
    ids = prompt_ids(1)
    before = model.forward(ids)
    with kvq.register_key_hook(attention_modules(model)[0], lambda m, s: None):
        for m in attention_modules(model):
            kvq.register_query_hook(m, lambda m, s: None)
            kvq.register_value_hook(m, lambda m, s: s)  # returning the view itself: no change
        after = model.forward(ids)
    assert np.array_equal(before, after)


def test_states_are_a_view_and_edits_change_logits(model):
    ids = prompt_ids()
    before = model.forward(ids)
    attn = attention_modules(model)[1]
    owns = []

    def in_place(module, keys):
        owns.append(keys.flags.owndata)
        keys *= 0.5

    h = kvq.register_key_hook(attn, in_place)
    edited = model.forward(ids)
    h.remove()
    assert owns == [False]  # a view of kvq's buffer, not a copy
    assert not np.allclose(before, edited)
    # Returning a replacement does the same as editing in place.
    h = kvq.register_key_hook(attn, lambda module, keys: keys * 0.5)
    replaced = model.forward(ids)
    h.remove()
    assert np.array_equal(edited, replaced)
    assert np.array_equal(model.forward(ids), before)


def test_hook_exception_propagates_with_traceback(model):
    def failing_hook(module, states):
        raise ValueError("boom from " + module.name)

    kvq.register_query_hook(attention_modules(model)[2], failing_hook)
    with pytest.raises(ValueError, match="boom from model.layers.2.self_attn") as info:
        model.forward(prompt_ids())
    assert any(entry.name == "failing_hook" for entry in info.traceback)


def test_hook_wrong_shape_and_non_attention_module(model):
    kvq.register_value_hook(attention_modules(model)[0], lambda m, s: np.zeros(3, np.float32))
    with pytest.raises(kvq.InvalidArgument, match="another shape"):
        model.forward(prompt_ids())
    with pytest.raises(kvq.InvalidArgument, match="is not an attention module"):
        kvq.register_key_hook(model.get_submodule("model.layers.0.mlp"), lambda m, s: None)


def test_is_narrow_match(model):
    assert kvq.is_narrow_match(model, "LlamaAttention", "model.layers.0.self_attn")
    assert kvq.is_narrow_match(model, ["re:.*self_attn$"], "model.layers.0.self_attn")
    assert not kvq.is_narrow_match(model, "re:.*layers.0.*", "model.layers.0.self_attn")
    assert not kvq.is_narrow_match(model, "LlamaAttention", "model.layers.0")


def test_quantization_models_round_trip():
    args = kvq.QuantizationArgs(num_bits=8, type="float", strategy="attn_head")
    assert args.num_bits == 8 and args.strategy == "attn_head"
    assert kvq.QuantizationArgs.model_validate(args.model_dump()) == args
    config = kvq.QuantizationConfig(config_groups={}, kv_cache_scheme=args)
    assert config.model_dump()["kv_cache_scheme"] == args.model_dump()
    assert kvq.QuantizationConfig.model_validate_json(config.model_dump_json()) == config
    scheme = kvq.QuantizationScheme(targets=["LlamaAttention"], input_activations=args)
    assert scheme.targets == ["LlamaAttention"]
    recipe = kvq.QuantizationConfig.from_recipe(SOURCE_DIR / "examples/recipes/kv_fp8_head.yaml")
    assert recipe.kv_cache_scheme["strategy"] == "attn_head"


def test_oneshot_on_token_ids_sets_scales(model, tmp_path):
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, 24).tolist() for _ in range(4)]
    out = tmp_path / "ckpt"
    assert kvq.oneshot(model=model, max_seq_length=64, recipe=KV_FP8_HEAD, dataset=samples, output_dir=out) is model
    attn = model.get_submodule("model.layers.0.self_attn")
    assert attn.k_scale.shape == (2, 1, 1) and attn.v_scale.shape == (2, 1, 1)
    assert np.all(attn.k_scale > 0)
    assert attn.quantization_status == "frozen"
    assert not hasattr(attn, "q_scale")  # kv_cache_scheme only: no query quantization
    assert not hasattr(model.get_submodule("model.layers.0.mlp"), "k_scale")
    assert model.quantization_config["kv_cache_scheme"]["strategy"] == "attn_head"
    assert sorted(p.name for p in out.iterdir())[:2] == ["calibration_heatmap.png",
                                                        "calibration_heatmap.svg"]
    # The checkpoint loads with its scales and runs its packed FP8 cache.
    loaded = kvq.load_model(out)
    np.testing.assert_array_equal(loaded.get_submodule("model.layers.0.self_attn").k_scale,
                                  attn.k_scale)
    cache = loaded.make_cache(32)
    assert cache.format == "fp8"
    loaded.forward(prompt_ids(), cache=cache)
    keys = cache.keys(0)
    assert keys.dtype == np.uint8 and keys.shape == (1, 2, len(prompt_ids()), 16)
    assert not keys.flags.writeable
    np.testing.assert_array_equal(cache.key_params(0)["scale"], attn.k_scale.reshape(-1))
    assert cache.read_keys(0).shape == (1, 2, len(prompt_ids()), 16)
    # Packed cache == fake quantization (kvq's promise), seen from Python.
    fake = loaded.forward(prompt_ids(), cache=loaded.make_cache(32, kv_cache="fake"))
    packed = loaded.forward(prompt_ids(), cache=loaded.make_cache(32))
    assert np.array_equal(fake, packed)


def test_user_hook_sees_unquantized_keys_before_fake_quantization(model):
    rng = np.random.default_rng(1)
    kvq.oneshot(model=model, max_seq_length=64, recipe=KV_FP8_HEAD, dataset=[rng.integers(0, 256, 16).tolist()])
    raw = []
    kvq.register_key_hook(model.get_submodule("model.layers.0.self_attn"),
                          lambda m, s: raw.append(s.copy()))
    model.forward(prompt_ids())  # f32 cache: the lifecycle's hooks fake-quantize after ours
    fp8_grid = raw[0] / model.get_submodule("model.layers.0.self_attn").k_scale
    assert not np.array_equal(fp8_grid, fp8_grid.astype(np.float16))  # not on the FP8 grid


def test_interrupt_raises_keyboard_interrupt_and_writes_nothing(model, tmp_path):
    rng = np.random.default_rng(2)
    samples = [rng.integers(0, 256, 16).tolist() for _ in range(8)]
    calls = []

    def interrupt_once(module, states):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C during the second sample's forward

    kvq.register_key_hook(model.get_submodule("model.layers.0.self_attn"), interrupt_once)
    with pytest.raises(KeyboardInterrupt):
        kvq.oneshot(model=model, max_seq_length=64, recipe=KV_FP8_HEAD, dataset=samples, output_dir=tmp_path / "out")
    assert len(calls) < 8  # stopped early
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no temporaries
    assert model.quantization_config is None  # the half-done quantization is gone
    # Python's own SIGINT handler is back: a Ctrl-C now interrupts Python as usual.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)


def test_errors_are_kvq_errors_with_the_cli_messages(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(kvq.NotFoundError) as info:
        kvq.load_model(missing)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, kvq.Error)
    cli = subprocess.run([KVQ_BINARY, "generate", "--model", str(missing), "--prompt", "x"],
                         capture_output=True, text=True)
    assert cli.stderr.strip() == f"error: {info.value}"
    with pytest.raises(kvq.ConfigError) as info:
        kvq.QuantizationArgs(num_bits=8, strategy="nonsense")
    assert isinstance(info.value, ValueError)
    assert "'nonsense' is not a valid QuantizationStrategy" in str(info.value)
    with pytest.raises(kvq.InvalidArgument, match="fp9"):
        kvq.load_model(TINY).make_cache(8, kv_cache="fp9")
    with pytest.raises(kvq.InvalidArgument, match="bf32"):
        kvq.load_model(TINY, weights="bf32")
    with pytest.raises(kvq.InvalidArgument, match="no tokenizer.json"):
        kvq.load_model(TINY).generate("hello")


def test_bf16_weights_and_generate_from_ids():
    model = kvq.load_model(TINY, weights="bf16")
    assert model.weights == "bf16"
    golden = read_safetensors(TINY / "golden.safetensors")
    out = model.generate(golden["prompt0.input_ids"].tolist(), max_new_tokens=8)
    assert out["new_tokens"] == len(out["generated_ids"]) <= 8
    assert out["weights"] == "bf16" and out["kv_cache"] == "f32"


def test_sliding_window_ring_cache_from_python():
    # Mistral's window of 24 in a ring of 24 - 1 + 32 rows: after 100 tokens the ring holds
    # positions 45..99, which keys() / read_keys() return in position order (a copy where the ring
    # wrapped), equal to those positions of a full-length cache.
    model = kvq.load_model(SOURCE_DIR / "tests" / "data" / "tiny_arch" / "mistral")
    ids = [(i * 37 + 11) % 253 + 3 for i in range(100)]
    ring = model.make_cache(120, kv_cache="int8", window_chunk=32)
    full = model.make_cache(120, kv_cache="int8", window_chunk=0)
    np.testing.assert_array_equal(model.forward(ids, cache=ring), model.forward(ids, cache=full))
    for layer in range(ring.layers):
        assert ring.first_position(layer) == 45 and full.first_position(layer) == 0
        keys = ring.keys(layer)
        assert keys.shape == (1, 2, 55, full.keys(layer).shape[3]) and not keys.flags.writeable
        np.testing.assert_array_equal(keys, full.keys(layer)[:, :, 45:])
        np.testing.assert_array_equal(ring.values(layer), full.values(layer)[:, :, 45:])
        np.testing.assert_array_equal(ring.read_keys(layer), full.read_keys(layer)[:, :, 45:])
