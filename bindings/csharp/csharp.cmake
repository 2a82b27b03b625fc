# C# binding: SWIG -> Kvtier.Native (+ libkvtier_csharp.so), hand-written Kvtier on top, one
# Kvtier.dll compiled by Mono's mcs; NUnit tests run by nunit-console; examples/csharp built
# and run. Mono finds libkvtier_csharp.so through LD_LIBRARY_PATH (or a dllmap).
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
  OUTPUT ${cdir}/Kvtier.dll
  COMMAND ${KVT_MCS} -nologo -target:library -out:${cdir}/Kvtier.dll ${cgen}/KvtierNative.cs ${kvt_cs_src}
  DEPENDS ${cgen}/KvtierNative.cs ${kvt_cs_src}
  COMMENT "mcs: Kvtier.dll")
add_custom_command(
  OUTPUT ${cdir}/Kvtier.Tests.dll ${cdir}/ServiceExample.exe
  COMMAND ${KVT_MCS} -nologo -target:library -r:${cdir}/Kvtier.dll -r:${KVT_NUNIT_FRAMEWORK}
          -out:${cdir}/Kvtier.Tests.dll ${kvt_cs_tests}
  COMMAND ${KVT_MCS} -nologo -r:${cdir}/Kvtier.dll -out:${cdir}/ServiceExample.exe ${kvt_cs_examples}
  DEPENDS ${cdir}/Kvtier.dll ${kvt_cs_tests} ${kvt_cs_examples}
  COMMENT "mcs: tests and example")
add_custom_target(kvtier_csharp_assemblies ALL
  DEPENDS ${cdir}/Kvtier.dll ${cdir}/Kvtier.Tests.dll ${cdir}/ServiceExample.exe kvtier_csharp)

kvt_add_binding_test(csharp_binding_test
  COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${cdir}
          ${KVT_NUNIT_CONSOLE} -nologo -nodots -noresult ${cdir}/Kvtier.Tests.dll)
kvt_add_binding_test(csharp_example
  COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${cdir}
          ${KVT_MONO} ${cdir}/ServiceExample.exe ${kvt_bind_model})

# Install (Debian package libkvtier-cil, see packaging/): Kvtier.dll, its SWIG glue library
# and a dllmap in /usr/lib/cli/kvtier (Debian CLI policy). Mono looks for a dllmap'ed
# library in the assembly's directory first, so the glue is found there; it links
# libkvtier.so.0, found by the dynamic loader. "kvtier" maps to the core library itself.
set(kvt_cli_dir lib/cli/kvtier)
file(MAKE_DIRECTORY ${cdir}/install)
file(WRITE ${cdir}/install/Kvtier.dll.config [=[<configuration>
  <dllmap dll="kvtier_csharp" target="libkvtier_csharp.so"/>
  <dllmap dll="kvtier" target="libkvtier.so.0"/>
</configuration>
]=])
install(FILES ${cdir}/Kvtier.dll ${cdir}/install/Kvtier.dll.config
  DESTINATION ${kvt_cli_dir} PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
  COMPONENT csharp)
install(TARGETS kvtier_csharp LIBRARY DESTINATION ${kvt_cli_dir}
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT csharp)
