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
elseif(NOT XK_SANITIZE STREQUAL "")
  message(FATAL_ERROR "XK_SANITIZE='${XK_SANITIZE}': use '', address or thread")
endif()
