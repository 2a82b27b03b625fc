# C# binding: SWIG -> Kvtier.Native (internal, + libkvtier_csharp.so), hand-written Kvtier on
# top, one Kvtier.dll compiled by Mono's mcs with its XML documentation (Kvtier.xml; a public
# member without a doc comment fails the build). NUnit tests run by nunit-console;
# examples/csharp and testdata/NoDispose.cs built and run. The glue library is found by name
# beside Kvtier.dll, where Mono and .NET both look for a [DllImport("kvtier_csharp")]: no
# dllmap, no LD_LIBRARY_PATH.
find_program(KVT_MCS mcs REQUIRED)
find_program(KVT_MONO mono REQUIRED)
find_program(KVT_NUNIT_CONSOLE nunit-console REQUIRED)
find_file(KVT_NUNIT_FRAMEWORK nunit.framework.dll PATHS /usr/lib/cli/nunit.framework-2.6.3 REQUIRED)

set(cdir ${kvt_bind_out}/csharp)
set(cgen ${cdir}/gen)
file(GLOB kvt_cs_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/csharp/src/*.cs)
file(GLOB kvt_cs_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/csharp/test/*.cs)
file(GLOB kvt_cs_examples CONFIGURE_DEPENDS ${kvt_examples}/csharp/*.cs)

add_custom_command(
  OUTPUT ${cgen}/kvtier_wrap.c ${cgen}/KvtierNative.cs
  COMMAND ${CMAKE_COMMAND} -E make_directory ${cgen}
  COMMAND ${SWIG_EXECUTABLE} -csharp -namespace Kvtier.Native -dllimport kvtier_csharp
          -I${PROJECT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}/csharp
          -o ${cgen}/kvtier_wrap.c -outdir ${cgen} -outfile KvtierNative.cs ${kvt_swig_i}
  DEPENDS ${kvt_swig_i} ${CMAKE_CURRENT_SOURCE_DIR}/csharp/kvtier_csharp.i ${kvt_header}
  COMMENT "SWIG: C# low layer")

add_library(kvtier_csharp MODULE ${cgen}/kvtier_wrap.c)
target_compile_options(kvtier_csharp PRIVATE -fno-strict-aliasing -Wno-incompatible-pointer-types)
target_link_libraries(kvtier_csharp PRIVATE kvtier)
set_target_properties(kvtier_csharp PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${cdir})

add_custom_command(
  OUTPUT ${cdir}/Kvtier.dll ${cdir}/Kvtier.xml
  COMMAND ${KVT_MCS} -nologo -target:library -doc:${cdir}/Kvtier.xml -warnaserror+:1591
          -out:${cdir}/Kvtier.dll ${cgen}/KvtierNative.cs ${kvt_cs_src}
  DEPENDS ${cgen}/KvtierNative.cs ${kvt_cs_src}
  COMMENT "mcs: Kvtier.dll, Kvtier.xml")
add_custom_command(
  OUTPUT ${cdir}/Kvtier.Tests.dll ${cdir}/ServiceExample.exe ${cdir}/NoDispose.exe
  COMMAND ${KVT_MCS} -nologo -target:library -r:${cdir}/Kvtier.dll -r:${KVT_NUNIT_FRAMEWORK}
          -out:${cdir}/Kvtier.Tests.dll ${kvt_cs_tests}
  COMMAND ${KVT_MCS} -nologo -r:${cdir}/Kvtier.dll -out:${cdir}/ServiceExample.exe ${kvt_cs_examples}
  COMMAND ${KVT_MCS} -nologo -r:${cdir}/Kvtier.dll -out:${cdir}/NoDispose.exe
          ${CMAKE_CURRENT_SOURCE_DIR}/csharp/testdata/NoDispose.cs
  DEPENDS ${cdir}/Kvtier.dll ${kvt_cs_tests} ${kvt_cs_examples} ${CMAKE_CURRENT_SOURCE_DIR}/csharp/testdata/NoDispose.cs
  COMMENT "mcs: tests and examples")
add_custom_target(kvtier_csharp_assemblies ALL
  DEPENDS ${cdir}/Kvtier.dll ${cdir}/Kvtier.Tests.dll ${cdir}/ServiceExample.exe ${cdir}/NoDispose.exe
          kvtier_csharp)

# The programs lie beside Kvtier.dll, which finds libkvtier_csharp.so beside itself (no
# LD_LIBRARY_PATH; the glue's build RUNPATH finds the build tree's libkvtier).
kvt_add_binding_test(csharp_binding_test
  COMMAND ${KVT_NUNIT_CONSOLE} -nologo -nodots -noresult ${cdir}/Kvtier.Tests.dll)
kvt_add_binding_test(csharp_example
  COMMAND ${KVT_MONO} ${cdir}/ServiceExample.exe ${kvt_bind_model})
kvt_add_binding_test(csharp_no_dispose
  COMMAND ${KVT_MONO} ${cdir}/NoDispose.exe ${kvt_bind_model})

# Install (Debian package libkvtier-cil, see packaging/): Kvtier.dll, its XML documentation
# (beside it, where IDEs look) and its SWIG glue library in /usr/lib/cli/kvtier (Debian CLI
# policy). The runtime finds the glue by name in the assembly's directory; the glue links
# libkvtier.so.0, found by the dynamic loader.
set(kvt_cli_dir lib/cli/kvtier)
install(FILES ${cdir}/Kvtier.dll ${cdir}/Kvtier.xml
  DESTINATION ${kvt_cli_dir} PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
  COMPONENT csharp)
install(TARGETS kvtier_csharp LIBRARY DESTINATION ${kvt_cli_dir}
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT csharp)
