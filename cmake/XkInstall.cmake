include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS xk xk_static EXPORT xkernelsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/xk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT xkernelsTargets NAMESPACE xk:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xkernels)
set(XK_CONFIG_WITH_OPENCL ${XK_WITH_OPENCL})
set(XK_CONFIG_THREADING ${XK_THREADING})
configure_package_config_file(cmake/xkernelsConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/xkernelsConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xkernels)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/xkernelsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/xkernelsConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/xkernelsConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xkernels)
if(XK_BUILD_TOOLS)
  install(TARGETS xk-info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
