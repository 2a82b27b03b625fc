# Go binding: the module bindings/go (package kvtier) is staged into the build tree with the
# SWIG-generated cgo package internal/capi; a go.work joins it with examples/go. `go test`
# runs the tests; the example is built and run.
find_program(KVT_GO go REQUIRED)

set(gdir ${kvt_bind_out}/go)
set(gmod ${gdir}/module)
file(GLOB kvt_go_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/go/*.go ${CMAKE_CURRENT_SOURCE_DIR}/go/go.mod)
file(GLOB kvt_go_examples CONFIGURE_DEPENDS ${kvt_examples}/go/*.go ${kvt_examples}/go/go.mod)
file(WRITE ${kvt_bind_out}/go.work.in "go 1.19\n\nuse (\n\t./module\n\t./example\n)\n")

# Everything go needs, with caches inside the build tree and no network.
set(kvt_go_env ${CMAKE_COMMAND} -E env
  GOCACHE=${gdir}/cache GOPATH=${gdir}/gopath GOPROXY=off GOFLAGS= GO111MODULE=on CGO_ENABLED=1
  GOWORK=${gdir}/go.work
  "CGO_CFLAGS=-I${PROJECT_SOURCE_DIR}/include -O2 -g"
  "CGO_LDFLAGS=-L$<TARGET_FILE_DIR:kvtier> -Wl,-rpath,$<TARGET_FILE_DIR:kvtier>")

add_custom_command(
  OUTPUT ${gdir}/stage.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${gmod} ${gdir}/example
  COMMAND ${CMAKE_COMMAND} -E make_directory ${gmod}/internal/capi ${gdir}/example
  COMMAND ${CMAKE_COMMAND} -E copy ${kvt_go_src} ${gmod}/
  COMMAND ${CMAKE_COMMAND} -E copy ${kvt_go_examples} ${gdir}/example/
  COMMAND ${CMAKE_COMMAND} -E copy ${kvt_bind_out}/go.work.in ${gdir}/go.work
  COMMAND ${SWIG_EXECUTABLE} -go -cgo -intgosize 64 -package capi
          -I${PROJECT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}/go
          -o ${gmod}/internal/capi/kvtier_wrap.c -outdir ${gmod}/internal/capi ${kvt_swig_i}
  COMMAND ${CMAKE_COMMAND} -E touch ${gdir}/stage.stamp
  DEPENDS ${kvt_swig_i} ${CMAKE_CURRENT_SOURCE_DIR}/go/kvtier_go.i ${kvt_header}
          ${kvt_go_src} ${kvt_go_examples}
  COMMENT "SWIG: Go low layer; staging the Go module")
add_custom_command(
  OUTPUT ${gdir}/build.stamp
  COMMAND ${kvt_go_env} ${KVT_GO} vet .
  COMMAND ${kvt_go_env} ${KVT_GO} test -c -o ${gdir}/kvtier.test .
  COMMAND ${CMAKE_COMMAND} -E chdir ${gdir}/example ${kvt_go_env} ${KVT_GO} build -o ${gdir}/kvtier-example-go .
  COMMAND ${CMAKE_COMMAND} -E touch ${gdir}/build.stamp
  WORKING_DIRECTORY ${gmod}
  DEPENDS ${gdir}/stage.stamp kvtier
  COMMENT "go: building the kvtier module, its tests and the example")
add_custom_target(kvtier_go ALL DEPENDS ${gdir}/build.stamp)

kvt_add_binding_test(go_binding_test
  COMMAND ${kvt_go_env} ${KVT_GO} test -count=1 -v .
  WORKING_DIRECTORY ${gmod})
kvt_add_binding_test(go_example COMMAND ${gdir}/kvtier-example-go ${kvt_bind_model})

# Install (Debian package golang-kvtier-dev, Architecture all, see packaging/): the module's
# sources with the SWIG-generated cgo package internal/capi (so no swig is needed to use
# it), in GOPATH layout under /usr/share/gocode/src/<module path> (Debian Go policy). cgo
# links -lkvtier and finds kvtier.h in /usr/include (libkvtier-dev). The SWIG interface is
# shipped in swig/ (no Go files there) for regenerating internal/capi.
set(kvt_go_install ${CMAKE_INSTALL_DATADIR}/gocode/src/kvtier)
file(GLOB kvt_go_pkg_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/go/*.go)
list(FILTER kvt_go_pkg_src EXCLUDE REGEX "_test\\.go$")
install(FILES ${kvt_go_pkg_src} ${CMAKE_CURRENT_SOURCE_DIR}/go/go.mod
  DESTINATION ${kvt_go_install} COMPONENT go)
install(DIRECTORY ${gmod}/internal/capi/ DESTINATION ${kvt_go_install}/internal/capi
  COMPONENT go FILES_MATCHING PATTERN "*.go" PATTERN "*.c" PATTERN "*.h")
install(FILES ${kvt_swig_i} ${CMAKE_CURRENT_SOURCE_DIR}/go/kvtier_go.i
  DESTINATION ${kvt_go_install}/swig COMPONENT go)
