# Sourced by scripts/build-gpu-carry.sh, scripts/gpu-check.sh and scripts/ci-gpu-kit.sh: what the
# one-call GPU check is made of, in one place.
#   GPU_KIT_TARGETS    the CMake targets of the executables the check runs (build-gpu/bin/<target>);
#                      tools/gpu_hotpath.cu is built by nvcc alone, beside them (gpu_hotpath)
#   GPU_KIT_LIBRARIES  libcachalot.so (build-gpu/lib/) and the fake driver (build-gpu/fake/)
# and the helpers that compare versions and read what an ELF file needs from glibc and libstdc++.

GPU_KIT_TARGETS=(cachalot_exports_test cachalot_hooks_test cachalot_default_adapters_test
  cachalot_cuda_backend_test cachalot_driver_abi_test cachalot_gpu_driver_check
  cachalot_device_costs core_tests c_api_tests inference_engine c_shim cachalot_bench)
GPU_KIT_LIBRARIES=(cachalot_shared cachalot_fakecuda)

# gpu_kit_version_ge A B: true when version A >= version B (2.39 >= 2.36; 3.4.30 >= 3.4.29).
gpu_kit_version_ge() {
  [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1) == "$2" ]]
}

# gpu_kit_needs PREFIX FILE...: the highest PREFIX_x.y version (GLIBC or GLIBCXX) any FILE asks
# of the dynamic linker (objdump -T version needs), or nothing when none does.
gpu_kit_needs() {
  local prefix=$1
  shift
  local f
  for f in "$@"; do objdump -T "$f" 2>/dev/null; done |
    grep -o "(${prefix}_[0-9][0-9.]*)" | tr -d '()' | sed "s/^${prefix}_//" | sort -uV | tail -n 1
}

# gpu_kit_needers PREFIX VERSION FILE...: "file (symbol symbol ...)" for each FILE that needs
# PREFIX_VERSION, to say in the MANIFEST why the floor is what it is.
gpu_kit_needers() {
  local prefix=$1 version=$2
  shift 2
  local f syms
  for f in "$@"; do
    syms=$(objdump -T "$f" 2>/dev/null | awk -v v="(${prefix}_${version})" '$0 ~ v {print $NF}' |
      sort -u | tr '\n' ' ')
    [[ -n $syms ]] && printf '%s (%s) ' "$(basename "$f")" "${syms% }"
  done
  echo
}

# gpu_kit_machine_glibc: this machine's glibc version (2.36).
gpu_kit_machine_glibc() {
  getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'
}

# gpu_kit_machine_glibcxx: the highest GLIBCXX version this machine's libstdc++.so.6 provides.
gpu_kit_machine_glibcxx() {
  local lib
  lib=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  [[ -n $lib && -r $lib ]] || return 0
  grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$lib" | sed 's/^GLIBCXX_//' | sort -uV | tail -n 1
}
