# Installable CMake package: find_package(ccht) gives ccht::ccht.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CCHT_INSTALL_TARGETS ccht)
if(CCHT_HAVE_REDIS)
  list(APPEND CCHT_INSTALL_TARGETS ccht_remote)
endif()
install(TARGETS ${CCHT_INSTALL_TARGETS} EXPORT cchtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/ccht DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/ccht/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ccht)

set(CCHT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ccht)
install(EXPORT cchtTargets NAMESPACE ccht:: DESTINATION ${CCHT_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cchtConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cchtConfig.cmake
                              INSTALL_DESTINATION ${CCHT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cchtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cchtConfig.cmake ${PROJECT_BINARY_DIR}/cchtConfigVersion.cmake
        DESTINATION ${CCHT_INSTALL_CMAKEDIR})
