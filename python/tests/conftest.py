"""Shared helpers of the kvq Python tests (run by ctest: label `python`, python/CMakeLists.txt)."""

import json
import os
import pathlib
import struct

import numpy as np
import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("KVQ_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
TEST_DATA = SOURCE_DIR / "tests" / "data"
TINY = TEST_DATA / "tiny_llama" / "gqa"
# As tests/support/test_paths.cc: $KVQ_HOME (default ~/.cache/kvq) and ../shared/data.
KVQ_HOME = pathlib.Path(os.environ.get("KVQ_HOME", pathlib.Path.home() / ".cache" / "kvq"))
DEFAULT_MODEL = KVQ_HOME / "SmolLM2-135M-Instruct"
SHARED_DATA = pathlib.Path(os.environ.get("KVQ_SHARED_DATA", SOURCE_DIR.parent / "shared" / "data"))
KVQ_BINARY = os.environ.get("KVQ_BINARY", str(SOURCE_DIR / "build" / "kvq"))


def read_safetensors(path):
    """{name: array} of a safetensors file (a few lines: the tests need no safetensors package)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    dtypes = {"F32": np.float32, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin : 8 + n + end], dtype=dtypes[info["dtype"]]).reshape(
            info["shape"]
        )
    return out


@pytest.fixture(scope="session")
def default_model_dir():
    """The default model's directory; skips when it is absent unless KVQ_REQUIRE_MODEL=1."""
    if not (DEFAULT_MODEL / "config.json").exists():
        if os.environ.get("KVQ_REQUIRE_MODEL") == "1":
            pytest.fail(f"default model missing at {DEFAULT_MODEL} (run scripts/fetch-model.sh)")
        pytest.skip("default model not fetched (scripts/fetch-model.sh)")
    return DEFAULT_MODEL
