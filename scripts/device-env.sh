# Sourced by the scripts that run on the lent GPU machine: the Vulkan loader from .gl (see the
# device tool's README), the NVIDIA ICD, and the card's name in $1/gpu.txt.
device_env() {
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$1/gpu.txt"
}
