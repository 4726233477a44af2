# Finds CUDA and NCCL. NCCL ships no CMake config: its header and library are looked up under
# $NCCL_HOME first (a folder with include/nccl.h and lib/libnccl.so*, such as the nvidia/nccl
# folder of PyTorch's NCCL wheel, which has only libnccl.so.2), then next to the CUDA toolkit.
# Sets MW_NCCL_FOUND and, when found, the imported target mw::nccl.
find_package(CUDAToolkit QUIET)
set(MW_NCCL_FOUND OFF)
if(CUDAToolkit_FOUND)
  find_path(MW_NCCL_INCLUDE_DIR nccl.h
            HINTS "$ENV{NCCL_HOME}/include" ${CUDAToolkit_INCLUDE_DIRS})
  find_library(MW_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS "$ENV{NCCL_HOME}/lib" ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(MW_NCCL_INCLUDE_DIR AND MW_NCCL_LIBRARY AND NOT TARGET mw::nccl)
    add_library(mw::nccl UNKNOWN IMPORTED)
    set_target_properties(mw::nccl PROPERTIES IMPORTED_LOCATION "${MW_NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${MW_NCCL_INCLUDE_DIR}")
  endif()
  if(TARGET mw::nccl)
    set(MW_NCCL_FOUND ON)
  endif()
endif()
