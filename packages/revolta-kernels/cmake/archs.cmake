# Arch lists and the native library target, shared by the top-level build and the Volta sub-build.

set(REVOLTA_VOLTA_ARCHS 70 72 75)  # what CUDA 13 cannot target: built into librevolta_native_sm70.so
set(REVOLTA_SOURCES csrc/api.cu csrc/attention_decode.cu csrc/attention_prefill.cu csrc/quant_gemm.cu
    csrc/dense_gemv.cu csrc/gdn.cu csrc/moe.cu csrc/quant_moe.cu)

# The compute capabilities of the visible GPUs (e.g. 90), empty without nvidia-smi or a GPU.
function(revolta_local_archs out)
  set(_caps "")
  find_program(_smi nvidia-smi)
  if(_smi)
    execute_process(COMMAND ${_smi} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _caps RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_rc EQUAL 0 AND NOT _caps STREQUAL "")
      string(REPLACE "." "" _caps "${_caps}")
      string(REPLACE "\n" ";" _caps "${_caps}")
      list(REMOVE_DUPLICATES _caps)
      message(STATUS "revolta-kernels: building for the local GPU arch(s) ${_caps}")
    else()
      set(_caps "")
    endif()
  endif()
  set(${out} "${_caps}" PARENT_SCOPE)
endfunction()

# Split a list of archs (";" or "," separated) into the Volta library's (70, 72, 75) and the modern one's.
function(revolta_split_archs archs volta_out modern_out)
  string(REPLACE "," ";" archs "${archs}")
  set(_volta "")
  set(_modern "")
  foreach(a IN LISTS archs)
    if(a IN_LIST REVOLTA_VOLTA_ARCHS)
      list(APPEND _volta ${a})
    elseif(a MATCHES "^[0-9]+[af]?$")
      list(APPEND _modern ${a})
    else()
      message(FATAL_ERROR "revolta-kernels: '${a}' in REVOLTA_CUDA_ARCHS is not a compute capability like 70 or 90")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _volta)
  list(REMOVE_DUPLICATES _modern)
  list(SORT _volta COMPARE NATURAL)
  list(SORT _modern COMPARE NATURAL)
  set(${volta_out} "${_volta}" PARENT_SCOPE)
  set(${modern_out} "${_modern}" PARENT_SCOPE)
endfunction()

# The native library `target` for `archs`: SASS for each, plus PTX of the lowest (Volta library: compute_70, so
# every later GPU can JIT it) or of the highest (modern library: for GPUs newer than the build). With
# `ptxas_log`, ptxas -v reports each object's registers, spills and shared memory into ptxas/<object>.log of
# the build directory (tools/check_volta.py reads them).
function(revolta_add_native target archs ptxas_log)
  set(_gencode "")
  foreach(a IN LISTS archs)
    list(APPEND _gencode "${a}-real")
  endforeach()
  if(ptxas_log)
    list(GET archs 0 _ptx)
  else()
    list(GET archs -1 _ptx)
  endif()
  list(APPEND _gencode "${_ptx}-virtual")
  string(REPLACE ";" "," _arch_str "${archs}")
  list(GET archs -1 _max)
  string(REGEX REPLACE "[af]$" "" _max "${_max}")
  add_library(${target} SHARED ${REVOLTA_SOURCES})
  target_include_directories(${target} PRIVATE csrc)
  target_compile_definitions(${target} PRIVATE REVOLTA_ARCHS="${_arch_str}" REVOLTA_MAX_ARCH=${_max})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 --expt-relaxed-constexpr>)
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME "${target}" CUDA_ARCHITECTURES "${_gencode}"
                        CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_RUNTIME_LIBRARY Static)
  if(ptxas_log)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
    set_target_properties(${target} PROPERTIES CUDA_COMPILER_LAUNCHER
                          "${CMAKE_CURRENT_SOURCE_DIR}/tools/ptxas_log.sh;${CMAKE_CURRENT_BINARY_DIR}/ptxas")
  endif()
  message(STATUS "revolta-kernels: lib${target}.so for ${_gencode} (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
endfunction()
