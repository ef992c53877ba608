# Embeds every src/gpu/kernels/*.cl file into the library as a string, at build time:
# generated/xk_cl_sources.inc holds {name, source} pairs used by the OpenCL program cache.
function(xk_embed_opencl_kernels target dir)
  file(GLOB cl_files CONFIGURE_DEPENDS ${dir}/*.cl)
  file(GLOB cl_headers CONFIGURE_DEPENDS ${dir}/*.h)  # inlined where a .cl file includes them
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated/xk_cl_sources.inc)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DFILES="${cl_files}" -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/XkEmbedFiles.cmake
    DEPENDS ${cl_files} ${cl_headers} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/XkEmbedFiles.cmake
    COMMENT "Embedding OpenCL kernels")
  add_custom_target(${target}_cl_sources DEPENDS ${out})
  add_dependencies(${target} ${target}_cl_sources)
endfunction()
