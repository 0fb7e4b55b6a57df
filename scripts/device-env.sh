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
