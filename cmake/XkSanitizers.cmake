# XK_SANITIZE=address → ASan + UBSan; XK_SANITIZE=thread → TSan (use XK_THREADING=std with it:
# TSan does not understand libgomp).
if(XK_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(XK_SANITIZE STREQUAL "thread")
  if(XK_THREADING STREQUAL "omp")
    message(FATAL_ERROR "XK_SANITIZE=thread needs XK_THREADING=std (TSan does not understand libgomp)")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(XK_SANITIZE STREQUAL "fuzzer")
  # libFuzzer targets (tests/fuzz): clang only; the library is instrumented for coverage
  # (fuzzer-no-link) with ASan + UBSan; the fuzz executables link -fsanitize=fuzzer.
  # -fno-sanitize=function: the JIT kernels are called through function pointers and have no
  # type signature in front of them for that check to read.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "XK_SANITIZE=fuzzer needs clang (CXX=clang++; the 'fuzz' preset sets it)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=function
                      -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT XK_SANITIZE STREQUAL "")
  message(FATAL_ERROR "XK_SANITIZE='${XK_SANITIZE}': use '', address, thread or fuzzer")
endif()
# Every sanitizer build: kernels with one template per shape class compile a reduced set of them
# (attention: head_dims 16-96, 128, 256 — src/kernels/attention/attention.hpp, attn_hd_compiled).
if(NOT XK_SANITIZE STREQUAL "")
  add_compile_definitions(XK_SANITIZER_BUILD=1)
endif()
