# The GPU architectures cachalot's CUDA kernels (GPU tests, GPU baselines) are built for, when
# the user has not set CMAKE_CUDA_ARCHITECTURES: Ampere (80, 86), Ada (89), Hopper (90) and
# Blackwell (100, 120) as far as the nvcc found supports them (nvcc --list-gpu-arch), as real
# code, plus PTX of the newest so that later GPUs can JIT it. Must run before
# enable_language(CUDA). Sets CMAKE_CUDA_ARCHITECTURES in the caller's scope.
function(cachalot_default_cuda_architectures compiler)
  set(wanted 80 86 89 90 100 120)
  execute_process(COMMAND "${compiler}" --list-gpu-arch OUTPUT_VARIABLE listed
                  RESULT_VARIABLE rc ERROR_QUIET)
  set(chosen "")
  if(rc EQUAL 0)
    foreach(arch IN LISTS wanted)
      if(listed MATCHES "compute_${arch}\n" OR listed MATCHES "compute_${arch}$")
        list(APPEND chosen ${arch})
      endif()
    endforeach()
  endif()
  if(NOT chosen)
    set(chosen 80 86 89 90)  # every nvcc since CUDA 11.8 has these
  endif()
  list(GET chosen -1 newest)
  list(TRANSFORM chosen APPEND "-real")
  list(APPEND chosen "${newest}-virtual")
  set(CMAKE_CUDA_ARCHITECTURES "${chosen}" PARENT_SCOPE)
endfunction()
