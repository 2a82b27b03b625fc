# Install rules and Debian packaging for kvtier. Included once, near the end of the
# top-level CMakeLists.txt, after the kvtier / kvtier_cuda targets exist. The CPack
# component list is made at the end of the top-level directory (packaging/cpack.cmake), so
# install() rules added later (bindings/) are packaged too.
#
# Components (one Debian package each, see packaging/cpack.cmake):
#   runtime  libkvtier.so.<major>, libkvtier.so.<version>            -> libkvtier0
#   dev      header, libkvtier.so link, kvtier.pc, CMake package files -> libkvtier-dev
#   cuda     libkvtier_cuda.so (dlopen'ed CUDA backend module)        -> libkvtier-cuda0
#   tools    the kvtier CLI (its install rule is in tools/kvtier)     -> kvtier-tools
#   demomodel the trained demo model (models/demo)                   -> kvtier-demo-model
#   java / csharp / go  reserved for the language bindings (install rules in bindings/**
#            with COMPONENT java|csharp|go); a package is made only when its component
#            has at least one install rule.
include(CMakePackageConfigHelpers)

set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# Debian policy: shared objects are 0644 (lintian: shared-library-is-executable).
set(KVTIER_SHLIB_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
set(KVTIER_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)

# --- runtime + dev: the shared library, its link name, the header.
install(TARGETS kvtier EXPORT kvtierTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          PERMISSIONS ${KVTIER_SHLIB_PERMISSIONS}
          COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kvtier/kvtier.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvtier COMPONENT dev)

# --- cuda: the backend module goes next to libkvtier.so, where backend_factory.cc looks
# first. (src/backend/cuda also has a component-less install rule for it; that copy lands in
# the "Unspecified" component, which CPack does not package.)
if(TARGET kvtier_cuda)
  install(TARGETS kvtier_cuda
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            PERMISSIONS ${KVTIER_SHLIB_PERMISSIONS}
            COMPONENT cuda)
endif()

# --- dev: CMake package (kvtier::kvtier) and pkg-config file.
install(EXPORT kvtierTargets NAMESPACE kvtier::
  DESTINATION ${KVTIER_CMAKE_INSTALL_DIR} COMPONENT dev)
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/kvtierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/packaging/kvtierConfig.cmake
  INSTALL_DESTINATION ${KVTIER_CMAKE_INSTALL_DIR}
  NO_SET_AND_CHECK_MACRO)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/packaging/kvtierConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/packaging/kvtierConfig.cmake
  ${PROJECT_BINARY_DIR}/packaging/kvtierConfigVersion.cmake
  DESTINATION ${KVTIER_CMAKE_INSTALL_DIR} COMPONENT dev)

# kvtier.pc holds absolute paths (Debian convention: prefix=/usr). The prefix is filled in
# at install time from the prefix actually used (cmake --install --prefix P, or CPack's
# /usr; DESTDIR is never part of it; CPack installs with DESTDIR, see cpack.cmake).
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(KVTIER_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(KVTIER_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
set(KVTIER_PC_PREFIX "@KVTIER_PC_PREFIX@")  # kept for the install-time pass
configure_file(${CMAKE_CURRENT_LIST_DIR}/kvtier.pc.in
  ${PROJECT_BINARY_DIR}/packaging/kvtier.pc.stage @ONLY)
install(CODE "
  set(KVTIER_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/packaging/kvtier.pc.stage\"
                 \"${PROJECT_BINARY_DIR}/packaging/kvtier.pc\" @ONLY)
" COMPONENT dev)
install(FILES ${PROJECT_BINARY_DIR}/packaging/kvtier.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

include(${CMAKE_CURRENT_LIST_DIR}/cpack.cmake)

# --- demomodel: the small trained model of models/demo, where `kvtier run --model demo` and
# the examples look for it (tools/kvtier/demo_model_path.cc).
install(FILES
    ${PROJECT_SOURCE_DIR}/models/demo/config.json
    ${PROJECT_SOURCE_DIR}/models/demo/generation_config.json
    ${PROJECT_SOURCE_DIR}/models/demo/model.safetensors
    ${PROJECT_SOURCE_DIR}/models/demo/tokenizer.json
    ${PROJECT_SOURCE_DIR}/models/demo/tokenizer_config.json
    ${PROJECT_SOURCE_DIR}/models/demo/heldout.txt
    ${PROJECT_SOURCE_DIR}/models/demo/training.json
    ${PROJECT_SOURCE_DIR}/models/demo/loss.png
    ${PROJECT_SOURCE_DIR}/models/demo/SOURCES.tsv
  DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier/models/demo
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
  COMPONENT demomodel)
# The same model as GGUF, written by this build's kvtier (tools/kvtier/CMakeLists.txt).
if(KVTIER_DEMO_GGUF)
  install(FILES ${KVTIER_DEMO_GGUF}
    DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier/models/demo
    PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
    COMPONENT demomodel)
endif()
# Its model card, where Debian keeps documentation.
install(FILES ${PROJECT_SOURCE_DIR}/models/demo/README.md
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/kvtier-demo-model COMPONENT demomodel)
