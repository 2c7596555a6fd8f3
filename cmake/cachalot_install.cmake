# cachalot's install rules and its CMake package (find_package(cachalot)), included by the
# top-level CMakeLists.txt when CACHALOT_INSTALL is on (the default when cachalot is the
# top-level project; off under a parent's add_subdirectory()).
include(CMakePackageConfigHelpers)
install(DIRECTORY include/cachalot DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/cachalot/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cachalot)
install(TARGETS cachalot cachalot_shared EXPORT cachalotTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT cachalotTargets NAMESPACE cachalot:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachalot)
configure_package_config_file(cmake/cachalotConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cachalotConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachalot)
# Compatibility and soname follow one policy (docs/usage.md, "Versions"): before 1.0 a minor
# release may break the API and ABI, so find_package accepts the same minor version and the
# soname is libcachalot.so.0.MINOR; from 1.0 on, the same major version and libcachalot.so.MAJOR.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cachalotConfigVersion.cmake
  COMPATIBILITY ${CACHALOT_COMPATIBILITY})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cachalotConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cachalotConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachalot)

# pkg-config: cachalot.pc describes libcachalot.so (the C API and the framework hooks).
file(RELATIVE_PATH CACHALOT_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(cmake/cachalot.pc.in ${PROJECT_BINARY_DIR}/cachalot.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cachalot.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
