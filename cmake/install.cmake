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

# systemd units and their settings.  The units name absolute paths, so they are made
# when installing, for the prefix installed to (not the configure-time one).
set(KC_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
  "Where the systemd units go (relative to the prefix, or absolute)")
install(CODE "
  set(kc_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(KC_BINDIR \"\${kc_prefix}/${CMAKE_INSTALL_BINDIR}\")
  if(kc_prefix STREQUAL \"/usr\")
    set(KC_CONFDIR /etc/kcage)
  else()
    set(KC_CONFDIR \"\${kc_prefix}/${CMAKE_INSTALL_SYSCONFDIR}/kcage\")
  endif()
  foreach(u kcage-tracker.service kcage-agent@.service)
    configure_file(${CMAKE_SOURCE_DIR}/systemd/\${u}.in ${CMAKE_BINARY_DIR}/systemd/\${u} @ONLY)
  endforeach()")
install(FILES ${CMAKE_BINARY_DIR}/systemd/kcage-tracker.service
  ${CMAKE_BINARY_DIR}/systemd/kcage-agent@.service DESTINATION ${KC_SYSTEMD_UNITDIR})
install(FILES systemd/tracker.conf systemd/agent.conf
  DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/kcage)

# Man pages, one per subcommand, from --help (help2man), and bash completion.
find_program(KC_HELP2MAN help2man)
if(KC_HELP2MAN)
  set(kc_man_pages kcage kcage-run kcage-bench kcage-policy kcage-tracker kcage-agent kcage-query)
  list(TRANSFORM kc_man_pages PREPEND ${CMAKE_BINARY_DIR}/man/ OUTPUT_VARIABLE kc_man_files)
  list(TRANSFORM kc_man_files APPEND .1)
  add_custom_command(OUTPUT ${kc_man_files}
    COMMAND ${CMAKE_SOURCE_DIR}/man/help2man.sh ${KC_HELP2MAN} $<TARGET_FILE:kcage>
            ${PROJECT_VERSION} ${CMAKE_BINARY_DIR}/man
    DEPENDS kcage ${CMAKE_SOURCE_DIR}/man/help2man.sh ${CMAKE_SOURCE_DIR}/man/kcage.h2m
            ${CMAKE_SOURCE_DIR}/man/kcage-run.h2m ${CMAKE_SOURCE_DIR}/man/kcage-bench.h2m
            ${CMAKE_SOURCE_DIR}/man/kcage-policy.h2m ${CMAKE_SOURCE_DIR}/man/kcage-tracker.h2m
            ${CMAKE_SOURCE_DIR}/man/kcage-agent.h2m ${CMAKE_SOURCE_DIR}/man/kcage-query.h2m
    COMMENT "man pages from --help (help2man)")
  add_custom_target(kcage_man ALL DEPENDS ${kc_man_files})
  install(FILES ${kc_man_files} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man pages (apt-get install help2man)")
endif()
install(FILES completion/kcage.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME kcage)
