# Java binding: SWIG -> dev.kvtier.swig (+ libkvtier_jni.so), hand-written dev.kvtier on top,
# one jar; JUnit 5 tests run by the console launcher; examples/java built and run.
find_package(Java 17 REQUIRED COMPONENTS Development)
# jni.h lives in the JDK beside javac (FindJNI also wants AWT/JVM, which are not needed).
file(REAL_PATH ${Java_JAVAC_EXECUTABLE} kvt_javac)
cmake_path(GET kvt_javac PARENT_PATH kvt_jdk_bin)
cmake_path(GET kvt_jdk_bin PARENT_PATH kvt_jdk)
find_path(KVT_JNI_INCLUDE jni.h PATHS ${kvt_jdk}/include NO_DEFAULT_PATH REQUIRED)
set(JNI_INCLUDE_DIRS ${KVT_JNI_INCLUDE} ${KVT_JNI_INCLUDE}/linux)
find_file(KVT_JUNIT_CONSOLE junit-platform-console-standalone.jar PATHS /usr/share/java REQUIRED)

set(jdir ${kvt_bind_out}/java)
set(jgen ${jdir}/gen)
file(GLOB kvt_java_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/java/src/dev/kvtier/*.java)
file(GLOB kvt_java_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/java/test/dev/kvtier/*.java)
file(GLOB kvt_java_examples CONFIGURE_DEPENDS ${kvt_examples}/java/*.java)

add_custom_command(
  OUTPUT ${jgen}/kvtier_wrap.c ${jgen}/stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jgen}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${jgen}/dev/kvtier/swig
  COMMAND ${SWIG_EXECUTABLE} -java -package dev.kvtier.swig
          -I${PROJECT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}/java
          -o ${jgen}/kvtier_wrap.c -outdir ${jgen}/dev/kvtier/swig ${kvt_swig_i}
  COMMAND ${CMAKE_COMMAND} -E touch ${jgen}/stamp
  DEPENDS ${kvt_swig_i} ${CMAKE_CURRENT_SOURCE_DIR}/java/kvtier_java.i ${kvt_header}
  COMMENT "SWIG: Java low layer")

add_library(kvtier_jni MODULE ${jgen}/kvtier_wrap.c)
target_include_directories(kvtier_jni PRIVATE ${JNI_INCLUDE_DIRS})
target_compile_options(kvtier_jni PRIVATE -fno-strict-aliasing)
target_link_libraries(kvtier_jni PRIVATE kvtier)
set_target_properties(kvtier_jni PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${jdir})

# The generated class files are known only once SWIG has run: javac gets them by a glob.
list(JOIN kvt_java_src " " kvt_java_src_args)
add_custom_command(
  OUTPUT ${jdir}/kvtier.jar
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/classes
  COMMAND sh -c "${Java_JAVAC_EXECUTABLE} -nowarn -encoding UTF-8 -d ${jdir}/classes ${jgen}/dev/kvtier/swig/*.java ${kvt_java_src_args}"
  COMMAND ${Java_JAR_EXECUTABLE} cf ${jdir}/kvtier.jar -C ${jdir}/classes .
  DEPENDS ${jgen}/stamp ${kvt_java_src}
  COMMENT "javac: kvtier.jar")

set(jtest_cp ${jdir}/kvtier.jar:/usr/share/java/junit-jupiter-api.jar:/usr/share/java/apiguardian-api.jar:/usr/share/java/opentest4j.jar:/usr/share/java/junit-platform-commons.jar)
add_custom_command(
  OUTPUT ${jdir}/tests.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/test-classes ${jdir}/example-classes
  COMMAND ${Java_JAVAC_EXECUTABLE} -encoding UTF-8 -cp ${jtest_cp} -d ${jdir}/test-classes ${kvt_java_tests}
  COMMAND ${Java_JAVAC_EXECUTABLE} -encoding UTF-8 -cp ${jdir}/kvtier.jar -d ${jdir}/example-classes ${kvt_java_examples}
  COMMAND ${CMAKE_COMMAND} -E touch ${jdir}/tests.stamp
  DEPENDS ${jdir}/kvtier.jar ${kvt_java_tests} ${kvt_java_examples}
  COMMENT "javac: tests and example")
add_custom_target(kvtier_java ALL DEPENDS ${jdir}/kvtier.jar ${jdir}/tests.stamp kvtier_jni)

kvt_add_binding_test(java_binding_test
  COMMAND ${Java_JAVA_EXECUTABLE} -Djava.library.path=${jdir}
          -jar ${KVT_JUNIT_CONSOLE} --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests
          -cp ${jdir}/kvtier.jar:${jdir}/test-classes --select-package dev.kvtier)
kvt_add_binding_test(java_example
  COMMAND ${Java_JAVA_EXECUTABLE} -Dkvtier.jni.library=$<TARGET_FILE:kvtier_jni>
          -cp ${jdir}/kvtier.jar:${jdir}/example-classes ServiceExample ${kvt_bind_model})

# Install (Debian package libkvtier-java, see packaging/): the jar under its versioned name
# with the kvtier.jar link (Debian Java policy), the JNI library in <libdir>/jni, which is on
# OpenJDK's default java.library.path on Debian (/usr/lib/<triplet>/jni), so
# System.loadLibrary("kvtier_jni") finds it without options.
file(MAKE_DIRECTORY ${jdir}/install)
file(CREATE_LINK kvtier-${PROJECT_VERSION}.jar ${jdir}/install/kvtier.jar SYMBOLIC)
install(FILES ${jdir}/kvtier.jar DESTINATION ${CMAKE_INSTALL_DATADIR}/java
  RENAME kvtier-${PROJECT_VERSION}.jar COMPONENT java)
install(FILES ${jdir}/install/kvtier.jar DESTINATION ${CMAKE_INSTALL_DATADIR}/java COMPONENT java)
install(TARGETS kvtier_jni LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/jni
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT java)
