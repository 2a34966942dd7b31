# `cmake --install build [--prefix DIR]`, `make install`, DESTDIR staging.  Nothing
# installed names the configure-time prefix: kcage finds its files relative to itself
# (base/install_dirs.c), kcage.pc from its own directory, the CMake package from
# its own location.
include(CMakePackageConfigHelpers)

file(RELATIVE_PATH KC_PC_TO_PREFIX "/kc/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/kc")
string(REGEX REPLACE "/$" "" KC_PC_TO_PREFIX "${KC_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/kcage.pc.in ${CMAKE_BINARY_DIR}/kcage.pc @ONLY)

install(TARGETS kcage RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kcage-worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/kcage)
install(TARGETS kcage_shared EXPORT kcageTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kcage DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY policies/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kcage/policies
  FILES_MATCHING PATTERN "*.policy")
install(FILES ${CMAKE_BINARY_DIR}/kcage.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/kcage)

set(kc_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/kcage)
install(EXPORT kcageTargets NAMESPACE kcage:: DESTINATION ${kc_cmakedir})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kcageConfig.cmake.in
  ${CMAKE_BINARY_DIR}/kcageConfig.cmake INSTALL_DESTINATION ${kc_cmakedir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kcageConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kcageConfig.cmake ${CMAKE_BINARY_DIR}/kcageConfigVersion.cmake
  DESTINATION ${kc_cmakedir})
set_target_properties(kcage_shared PROPERTIES EXPORT_NAME kcage)
