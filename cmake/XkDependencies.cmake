# Every dependency is a Debian 12 package (scripts/install-deps.sh installs what is missing).
find_package(Threads REQUIRED)
find_package(xbyak CONFIG REQUIRED)              # libxbyak-dev (header-only, 6.68)
find_package(dnnl CONFIG REQUIRED)               # libdnnl-dev (oneDNN 2.6, v2 C++ API)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)   # libhwloc-dev
if(XK_WITH_OPENCL)
  find_package(OpenCL REQUIRED)                  # opencl-headers + ocl-icd-opencl-dev
endif()
# Both backends: XK_THREADING=omp threads with it; std links only its runtime (oneDNN is an
# OpenMP build, and the oneDNN GEMM sets its thread count through omp_set_num_threads).
find_package(OpenMP REQUIRED)
