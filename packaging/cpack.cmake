# CPack: one Debian package per install component. Included by packaging/install.cmake.
# Build the packages with `cpack -G DEB` in the build directory (or scripts/package.sh);
# they land in <build>/packages/.
set(KVT_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})
set(KVTIER_PACKAGE_MAINTAINER "kvtier maintainers <kvtier@example.org>"
    CACHE STRING "Maintainer field of the Debian packages (Name <email>)")
set(KVTIER_DEB_RELEASE 1 CACHE STRING "Debian revision of the packages")
set(KVTIER_DEB_VERSION "${PROJECT_VERSION}-${KVTIER_DEB_RELEASE}")

# component -> package name, section and description (synopsis, then extended text).
# java/csharp/go are for the bindings, doc/javadoc for the API references; a package is made
# only for a component that has at least one install() rule (components without files make
# no empty packages).
set(kvt_pkg_runtime libkvtier${PROJECT_VERSION_MAJOR})
set(kvt_section_runtime libs)
set(kvt_desc_runtime "embeddable LLM text generation with a tiered KV cache
kvtier runs large-language-model text generation inside your program behind a
small, stable C API. Its paged KV cache lives in fixed memory budgets across
GPU memory, pinned host memory and disk, so a service embedding it never dies
of GPU out-of-memory: sequences are admitted, paused, moved and resumed inside
the budgets.

This package contains the shared library (CPU reference backend built in).")

# ldconfig trigger (lintian: lacks-ldconfig-trigger). CPack itself also adds postinst/postrm
# calling ldconfig for libraries under /usr/lib (lintian warning maintscript-calls-ldconfig;
# CPack 3.25 can only drop those for hand-written postinst/postrm scripts).
set(kvt_control_extra_runtime ${CMAKE_CURRENT_LIST_DIR}/debian/libkvtier0.triggers)

set(kvt_pkg_dev libkvtier-dev)
set(kvt_section_dev libdevel)
set(kvt_desc_dev "embeddable LLM text generation - development files
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the C header, the libkvtier.so link, the pkg-config file
(kvtier.pc) and the CMake package: find_package(kvtier), target kvtier::kvtier.")

set(kvt_pkg_cuda libkvtier-cuda${PROJECT_VERSION_MAJOR})
set(kvt_section_cuda libs)
set(kvt_desc_cuda "embeddable LLM text generation - CUDA backend module
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains libkvtier_cuda.so, the CUDA backend that libkvtier.so
loads at run time when the cuda or auto backend is asked for. It needs
the NVIDIA driver and a CUDA toolkit (libcublas) that the dynamic loader can
find, e.g. NVIDIA's CUDA installation in /usr/local/cuda with its ld.so.conf.d
entry. Neither comes from a Debian package, so they are not declared as
dependencies. Without them, the auto backend falls back to the CPU.")

set(kvt_pkg_tools kvtier-tools)
set(kvt_section_tools utils)
set(kvt_desc_tools "embeddable LLM text generation - command-line tool
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the kvtier command: run generation on a checkpoint, make
small random-weight test checkpoints (mkmodel), inspect a checkpoint.")

set(kvt_pkg_java libkvtier-java)
set(kvt_section_java java)
set(kvt_desc_java "embeddable LLM text generation - Java bindings
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the Java bindings: the jar (Maven coordinates
dev.kvtier:kvtier, its pom in /usr/share/maven-repo), its JNI library, and
/usr/share/libkvtier-java/maven-install.sh, which installs the jar and pom into
a user's Maven repository.")

set(kvt_pkg_csharp libkvtier-cil)
set(kvt_section_csharp cli-mono)
set(kvt_desc_csharp "embeddable LLM text generation - C# bindings
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the C# (.NET) assembly of the bindings (Kvtier.dll),
its XML documentation and its native glue library.")

set(kvt_pkg_go golang-kvtier-dev)
set(kvt_section_go golang)
set(kvt_desc_go "embeddable LLM text generation - Go bindings (source)
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the Go module github.com/kvtier/kvtier/bindings/go
(cgo, builds against libkvtier-dev) in GOPATH layout, with its examples and a
plain-text API reference.")

set(kvt_pkg_doc libkvtier-doc)
set(kvt_section_doc doc)
set(kvt_desc_doc "embeddable LLM text generation - C API reference
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the reference of the C API (kvtier/kvtier.h) as HTML,
made by Doxygen.")

set(kvt_pkg_javadoc libkvtier-java-doc)
set(kvt_section_javadoc doc)
set(kvt_desc_javadoc "embeddable LLM text generation - Java API documentation
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.

This package contains the javadoc of the Java bindings (libkvtier-java), in
/usr/share/doc/libkvtier-java/api.")

set(kvt_pkg_demomodel kvtier-demo-model)
set(kvt_section_demomodel misc)
set(kvt_desc_demomodel "embeddable LLM text generation - small trained demo model
kvtier runs large-language-model text generation inside your program behind a
small, stable C API.
This package contains a small Llama-architecture model (5.8M parameters, bf16
safetensors, 4096-token byte-level BPE tokenizer) trained on English text from
Debian packages (fortune cookies, The Devil's Dictionary, the Jargon File), in
/usr/share/kvtier/models/demo: what the kvtier demo, the examples and
`kvtier run --model demo` use. It writes short, loosely coherent English; it is
for trying and testing kvtier, not for real use.")
set(kvt_arch_demomodel all)
set(kvt_shlibdeps_demomodel OFF)
set(kvt_suggests_demomodel "${kvt_pkg_tools}")
# Dependencies between the packages; libraries' own dependencies (libc6, abseil, ...) are
# generated by dpkg-shlibdeps (CPACK_DEBIAN_PACKAGE_SHLIBDEPS), except for cuda (below).
set(kvt_depends_dev "${kvt_pkg_runtime} (= ${KVTIER_DEB_VERSION})")
# The CUDA module links libcublas from the CUDA toolkit, which no Debian package provides,
# so dpkg-shlibdeps cannot run on it (it fails on a library without dependency info).
# Its other needs are declared by hand: the exact libkvtier0 it was built with (the module
# interface is internal and versioned), which brings abseil; libc6/libstdc++6/libgcc-s1.
set(kvt_shlibdeps_cuda OFF)
set(kvt_depends_cuda "${kvt_pkg_runtime} (= ${KVTIER_DEB_VERSION}), libc6, libgcc-s1, libstdc++6")
set(kvt_suggests_runtime "${kvt_pkg_cuda} (= ${KVTIER_DEB_VERSION})")
# The CLI links the core statically; it uses the CUDA module when installed.
set(kvt_suggests_tools "${kvt_pkg_cuda} (= ${KVTIER_DEB_VERSION})")
# Bindings: the JNI and C# glue libraries get their dependencies from dpkg-shlibdeps too
# (libc6); libkvtier.so.0 belongs to no installed package while building, so the exact
# libkvtier0 is declared here. No Java runtime for libkvtier-java: Debian Java policy says
# libraries do not depend on one (lintian: needless-dependency-on-jre); the program using
# the jar brings it (the jar is Java 17 bytecode).
set(kvt_depends_java "${kvt_pkg_runtime} (= ${KVTIER_DEB_VERSION})")
set(kvt_depends_csharp "${kvt_pkg_runtime} (= ${KVTIER_DEB_VERSION}), mono-runtime")
set(kvt_depends_go "${kvt_pkg_dev} (= ${KVTIER_DEB_VERSION}), golang-go")
set(kvt_arch_go all)
# The maven-install.sh script of libkvtier-java needs Maven and its install plugin.
set(kvt_suggests_java "maven, libmaven-install-plugin-java, ${kvt_pkg_javadoc}")
# Documentation: no binaries. The C reference links Debian's jQuery instead of doxygen's copy.
set(kvt_arch_doc all)
set(kvt_depends_doc "libjs-jquery")
set(kvt_arch_javadoc all)
set(kvt_shlibdeps_doc OFF)
set(kvt_shlibdeps_javadoc OFF)

# --- Per-package documentation Debian requires: copyright and changelog.Debian.gz.
set(kvt_doc_dir ${PROJECT_BINARY_DIR}/packaging/debian)
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in ${kvt_doc_dir}/changelog @ONLY)
execute_process(COMMAND gzip -9nc ${kvt_doc_dir}/changelog
  OUTPUT_FILE ${kvt_doc_dir}/changelog.Debian.gz RESULT_VARIABLE kvt_gzip_rc)
if(NOT kvt_gzip_rc EQUAL 0)
  message(WARNING "kvtier packaging: gzip failed; packages will lack changelog.Debian.gz")
endif()

# The component list and CPack's configuration are made at the end of the top-level
# directory (deferred call), so install() rules added after include(packaging/install.cmake),
# e.g. by bindings/, are packaged too. CPack reads the variables of this function's scope.
function(kvt_configure_cpack)
  get_cmake_property(kvt_used_components COMPONENTS)
  set(CPACK_COMPONENTS_ALL "")
  foreach(comp runtime dev cuda tools demomodel java csharp go doc javadoc)
    if(NOT comp IN_LIST kvt_used_components)
      continue()
    endif()
    list(APPEND CPACK_COMPONENTS_ALL ${comp})
    string(TOUPPER ${comp} COMP)
    set(pkg ${kvt_pkg_${comp}})
    set(CPACK_DEBIAN_${COMP}_PACKAGE_NAME ${pkg})
    set(CPACK_DEBIAN_${COMP}_PACKAGE_SECTION ${kvt_section_${comp}})
    set(CPACK_DEBIAN_${COMP}_DESCRIPTION "${kvt_desc_${comp}}")
    set(CPACK_COMPONENT_${COMP}_DESCRIPTION "${kvt_desc_${comp}}")
    if(DEFINED kvt_depends_${comp})
      set(CPACK_DEBIAN_${COMP}_PACKAGE_DEPENDS "${kvt_depends_${comp}}")
    endif()
    # runtime and tools suggest the CUDA module, which exists only in a build with CUDA.
    if(DEFINED kvt_suggests_${comp} AND ("cuda" IN_LIST kvt_used_components OR NOT comp MATCHES "^(runtime|tools)$"))
      set(CPACK_DEBIAN_${COMP}_PACKAGE_SUGGESTS "${kvt_suggests_${comp}}")
    endif()
    if(DEFINED kvt_shlibdeps_${comp})
      set(CPACK_DEBIAN_${COMP}_PACKAGE_SHLIBDEPS ${kvt_shlibdeps_${comp}})
    endif()
    if(DEFINED kvt_control_extra_${comp})
      # dpkg-deb wants the control member named "triggers".
      configure_file(${kvt_control_extra_${comp}} ${kvt_doc_dir}/${comp}/triggers COPYONLY)
      set(CPACK_DEBIAN_${COMP}_PACKAGE_CONTROL_EXTRA ${kvt_doc_dir}/${comp}/triggers)
    endif()
    if(DEFINED kvt_arch_${comp})
      set(CPACK_DEBIAN_${COMP}_PACKAGE_ARCHITECTURE ${kvt_arch_${comp}})
    endif()
    install(FILES ${KVT_PACKAGING_DIR}/debian/copyright ${kvt_doc_dir}/changelog.Debian.gz
      DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${pkg} COMPONENT ${comp})
    # doc-base registration of a documentation package (lintian:
    # possible-documentation-but-no-doc-base-registration).
    if(EXISTS ${KVT_PACKAGING_DIR}/debian/${pkg}.doc-base)
      install(FILES ${KVT_PACKAGING_DIR}/debian/${pkg}.doc-base
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc-base RENAME ${pkg} COMPONENT ${comp})
    endif()
    if(EXISTS ${KVT_PACKAGING_DIR}/debian/${pkg}.lintian-overrides)
      install(FILES ${KVT_PACKAGING_DIR}/debian/${pkg}.lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides RENAME ${pkg} COMPONENT ${comp})
    endif()
  endforeach()

  set(CPACK_GENERATOR DEB)
  set(CPACK_PACKAGE_NAME kvtier)
  set(CPACK_PACKAGE_VENDOR "The kvtier authors")
  set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
  set(CPACK_PACKAGE_CONTACT "${KVTIER_PACKAGE_MAINTAINER}")
  # No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would prepend it to every component's
  # description (lintian: description-synopsis-is-duplicated).
  set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
  set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
  # Packages install under /usr whatever CMAKE_INSTALL_PREFIX the build tree has; configure
  # with -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh does) for the multiarch libdir
  # lib/<triplet> (GNUInstallDirs picks it only for prefix /usr; otherwise it is lib/).
  # CPack installs with DESTDIR so that kvtier.pc gets prefix=/usr, not the staging dir.
  set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
  set(CPACK_INSTALL_PREFIX /usr)
  set(CPACK_SET_DESTDIR ON)
  set(CPACK_STRIP_FILES ON)       # lintian: unstripped-binary-or-object
  set(CPACK_DEB_COMPONENT_INSTALL ON)
  set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_PACKAGE_RELEASE ${KVTIER_DEB_RELEASE})
  set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${KVTIER_PACKAGE_MAINTAINER}")
  set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
  set(CPACK_DEBIAN_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # The bindings' glue libraries (JNI, C#) link libkvtier.so.0, which no installed package
  # provides while building: dpkg-shlibdeps finds it in the build tree (-l) and skips it
  # (--ignore-missing-info); those packages declare libkvtier0 (= version) themselves.
  get_target_property(kvt_lib_dir kvtier LIBRARY_OUTPUT_DIRECTORY)
  if(NOT kvt_lib_dir)
    set(kvt_lib_dir ${PROJECT_BINARY_DIR})
  endif()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${kvt_lib_dir})
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)       # shlibs file for libkvtier0
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
  include(CPack)
endfunction()
cmake_language(DEFER CALL kvt_configure_cpack)
