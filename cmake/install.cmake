# Installs the library, its headers and a package config, so that another project can write
#   find_package(mixprec REQUIRED)
#   target_link_libraries(app PRIVATE mixprec::mixprec)   # and #include <mixprec/mixprec.hpp>
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS mixprec EXPORT mixprecTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The public headers: every .hpp of the library's folders except those in detail/ (internal, included
# only from the library's own sources).
foreach(dir autodiff optim amp models)
  install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixprec
    FILES_MATCHING PATTERN "*.hpp" PATTERN "detail" EXCLUDE PATTERN "arch" EXCLUDE PATTERN "dist" EXCLUDE)
endforeach()
# mixprec::mpi, when built: the library and the dist/ headers.
if(TARGET mixprec_mpi)
  install(TARGETS mixprec_mpi EXPORT mixprecTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY models/dist DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixprec/models FILES_MATCHING PATTERN "*.hpp")
endif()
install(FILES mixprec.hpp ${PROJECT_BINARY_DIR}/include/mixprec/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixprec)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/mixprec)
install(EXPORT mixprecTargets NAMESPACE mixprec:: DESTINATION ${config_dir})
configure_package_config_file(cmake/mixprecConfig.cmake.in ${PROJECT_BINARY_DIR}/mixprecConfig.cmake
  INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mixprecConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mixprecConfig.cmake ${PROJECT_BINARY_DIR}/mixprecConfigVersion.cmake
  DESTINATION ${config_dir})
