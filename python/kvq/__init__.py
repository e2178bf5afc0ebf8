"""kvq: attention and KV-cache quantization of LLMs, natively in C++, from Python.

The API reads like compressed-tensors / llm-compressor's where the concept is theirs::

    import kvq
    model = kvq.load_model("~/.cache/kvq/SmolLM2-135M-Instruct")
    for name, module in model.named_modules():
        ...
    kvq.oneshot(model=model, recipe="examples/recipes/kv_fp8_head.yaml",
                dataset="../shared/data/gsm8k/train.jsonl", num_calibration_samples=64,
                max_seq_length=512, output_dir="out-kv-fp8-head")
    print(model.generate("Hello my name is", max_new_tokens=20)["text"])

Everything runs on kvq's C++ engine (the same static libraries as the ``kvq`` CLI): long
calls release the GIL, Ctrl-C raises KeyboardInterrupt without leaving half-written files, and
kvq's errors are ``kvq.Error`` subclasses (also ValueError / OSError / FileNotFoundError /
NotImplementedError as fits) with the CLI's messages.
"""

from ._kvq import (  # noqa: F401
    ConfigError,
    Error,
    FormatError,
    InvalidArgument,
    IoError,
    KvCache,
    Model,
    Module,
    NotFoundError,
    NotSupported,
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    RemovableHandle,
    apply_quantization_config,
    compare,
    is_narrow_match,
    load_model,
    num_threads,
    oneshot,
    perplexity,
    register_key_hook,
    register_query_hook,
    register_value_hook,
    set_log_level,
    set_num_threads,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Error",
    "FormatError",
    "InvalidArgument",
    "IoError",
    "KvCache",
    "Model",
    "Module",
    "NotFoundError",
    "NotSupported",
    "QuantizationArgs",
    "QuantizationConfig",
    "QuantizationScheme",
    "RemovableHandle",
    "apply_quantization_config",
    "compare",
    "is_narrow_match",
    "load_model",
    "num_threads",
    "oneshot",
    "perplexity",
    "register_key_hook",
    "register_query_hook",
    "register_value_hook",
    "set_log_level",
    "set_num_threads",
]
