# The Volta/Turing library (librevolta_native_sm70.so): sm_70/72/75 SASS plus compute_70 PTX, built by a CUDA
# 11.x or 12.x nvcc in a sub-build of this same project (REVOLTA_VOLTA_BUILD=ON), since one CMake project has one
# CUDA compiler and the default one (CUDA 13) cannot target these archs.
#
# The nvcc is REVOLTA_VOLTA_NVCC when set, else the first CUDA 11/12 nvcc among Debian's nvidia-cuda-toolkit
# (/usr/lib/nvidia-cuda-toolkit/bin, /usr/bin), /usr/local/cuda-12.*, /usr/local/cuda-11.* and the default CUDA
# compiler. REVOLTA_VOLTA_LIB names an already built library to package instead (tools/check_volta.py's build).
include(ExternalProject)

# The CUDA release ("11.8") of the tool `exe` (nvcc or ptxas), empty when it does not run.
function(revolta_cuda_release exe out)
  set(_rel "")
  if(EXISTS "${exe}")
    execute_process(COMMAND "${exe}" --version OUTPUT_VARIABLE _v ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _v MATCHES "release ([0-9]+\\.[0-9]+)")
      set(_rel "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out} "${_rel}" PARENT_SCOPE)
endfunction()

# A CUDA 11/12 nvcc (`nvcc_out`), its release and the PATH its compiles need (its ptxas first: Debian's nvcc
# lives apart from its ptxas in /usr/bin, and a CUDA 13 ptxas found first on the PATH cannot assemble sm_70).
function(revolta_find_volta_nvcc nvcc_out release_out path_out)
  set(_candidates "$ENV{REVOLTA_VOLTA_NVCC}")
  if(_candidates STREQUAL "")
    file(GLOB _cuda12 /usr/local/cuda-12.*/bin/nvcc)
    file(GLOB _cuda11 /usr/local/cuda-11.*/bin/nvcc)
    set(_candidates /usr/lib/nvidia-cuda-toolkit/bin/nvcc /usr/bin/nvcc ${_cuda12} ${_cuda11})
    if(CMAKE_CUDA_COMPILER)
      list(APPEND _candidates "${CMAKE_CUDA_COMPILER}")
    endif()
  endif()
  foreach(nvcc IN LISTS _candidates)
    revolta_cuda_release("${nvcc}" _rel)
    if(_rel VERSION_GREATER_EQUAL 11.0 AND _rel VERSION_LESS 13.0)
      get_filename_component(_dir "${nvcc}" DIRECTORY)
      foreach(ptxas_dir "${_dir}" /usr/bin)
        revolta_cuda_release("${ptxas_dir}/ptxas" _ptxas_rel)
        if(_ptxas_rel STREQUAL _rel)
          set(${nvcc_out} "${nvcc}" PARENT_SCOPE)
          set(${release_out} "${_rel}" PARENT_SCOPE)
          set(${path_out} "${_dir}:${ptxas_dir}:$ENV{PATH}" PARENT_SCOPE)
          return()
        endif()
      endforeach()
    endif()
  endforeach()
  set(${nvcc_out} "" PARENT_SCOPE)
endfunction()

# Build (or take prebuilt) and install the Volta library for `archs`; `note_out` says what happened.
function(revolta_volta_library archs note_out)
  string(REPLACE ";" "," _arch_str "${archs}")
  set(_lib librevolta_native_sm70.so)
  if(NOT "$ENV{REVOLTA_VOLTA_LIB}" STREQUAL "")
    if(NOT EXISTS "$ENV{REVOLTA_VOLTA_LIB}")
      message(FATAL_ERROR "revolta-kernels: REVOLTA_VOLTA_LIB=$ENV{REVOLTA_VOLTA_LIB}: no such file")
    endif()
    install(FILES "$ENV{REVOLTA_VOLTA_LIB}" RENAME ${_lib} DESTINATION revolta_kernels)
    set(${note_out} "${_lib}: prebuilt $ENV{REVOLTA_VOLTA_LIB}" PARENT_SCOPE)
    return()
  endif()
  revolta_find_volta_nvcc(_nvcc _rel _path)
  if(_nvcc STREQUAL "")
    message(WARNING "revolta-kernels: archs ${archs} (Volta/Turing) were asked for, but CUDA 13 cannot target them "
                    "and no CUDA 11.x/12.x nvcc (with its ptxas) was found: ${_lib} is NOT built. Install one "
                    "(as root: packages/revolta-kernels/tools/install_cuda118.sh) or set REVOLTA_VOLTA_NVCC.")
    set(${note_out} "no Volta library: archs ${archs} need a CUDA 11.x/12.x nvcc and none was found" PARENT_SCOPE)
    return()
  endif()
  message(STATUS "revolta-kernels: ${_lib} for archs ${archs} by ${_nvcc} (CUDA ${_rel}) in a sub-build")
  set(_bin ${CMAKE_CURRENT_BINARY_DIR}/volta)
  set(_env ${CMAKE_COMMAND} -E env "PATH=${_path}")
  ExternalProject_Add(revolta_volta
    SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}
    BINARY_DIR ${_bin}
    CONFIGURE_COMMAND ${_env} ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_SOURCE_DIR} -B ${_bin} -G ${CMAKE_GENERATOR}
                      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=${_nvcc} -DREVOLTA_VOLTA_BUILD=ON
                      -DREVOLTA_CUDA_ARCHS=${_arch_str} "-DCMAKE_CUDA_FLAGS=${CMAKE_CUDA_FLAGS}"
    BUILD_COMMAND ${_env} ${CMAKE_COMMAND} --build ${_bin}
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    BUILD_BYPRODUCTS ${_bin}/${_lib})
  install(FILES ${_bin}/${_lib} DESTINATION revolta_kernels)
  set(${note_out} "${_lib}: archs ${_arch_str} + compute_70 PTX (nvcc ${_rel})" PARENT_SCOPE)
endfunction()
