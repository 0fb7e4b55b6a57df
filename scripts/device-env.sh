# Sourced by the scripts that run on the lent GPU machine: the Vulkan loader from .gl (see the
# device tool's README), the NVIDIA ICD, and the card's name in $1/gpu.txt.
device_env() {
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$1/gpu.txt"
}

# The kernel tests and the architecture parity tests of the unpacked test binaries in /tmp/b
# (kernels, arch_parity) on the card, results in $1/kernels.txt and $1/arch_parity.txt and a
# summary on stdout. The binaries find the fixtures through the build machine's path.
device_tests() {
  mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
  (cd crate && WGPU_BACKEND=vulkan /tmp/b/kernels --test-threads 1 2>&1 | grep -E "^test |panicked|skipped|test result") > "$1/kernels.txt"
  # One process a test: after about seven tests' worth of devices in one process the NVIDIA
  # driver stops offering an adapter (seen with and without the matrix path).
  for t in $(/tmp/b/arch_parity --list 2>/dev/null | sed -n 's/: test$//p'); do
    (cd crate && WGPU_BACKEND=vulkan /tmp/b/arch_parity --exact "$t" 2>&1 | grep -E "^test |panicked|assert" | head -5)
  done > "$1/arch_parity.txt"
  grep "test result" "$1/kernels.txt"; grep -v " ok$" "$1/kernels.txt" | grep -v "test result"
  echo "arch_parity: $(grep -c ' ok$' "$1/arch_parity.txt") passed"; grep -v ' ok$' "$1/arch_parity.txt"
}

# The benchmark files of make-gguf shapes $2 (comma-separated, Q4_0) in folder $1, written by
# the unpacked binary /tmp/ferrolm-new where missing; their names in the array `models`. The
# vocabulary only has to exist (the benches feed ids): the tiny fixture one, padded.
bench_models() {
  models=()
  local s f
  for s in ${2//,/ }; do
    f=$s.q4_0.gguf
    [ -f "$1/$f" ] || /tmp/ferrolm-new make-gguf --shape "$s" --type q4_0 --out "$1/$f" \
      --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
    models+=("$f")
  done
}
