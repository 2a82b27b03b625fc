# Java binding: SWIG -> dev.kvtier.swig (+ libkvtier_jni.so), hand-written dev.kvtier on top.
# The Maven artifacts of dev.kvtier:kvtier (pom.xml configured from pom.xml.in) are built in
# ${jdir}/maven: the jar, the self-contained jar (classifier linux-<arch>: also carries
# libkvtier and the JNI library, extracted and loaded when the system has none), javadoc
# (doclint: a public member without documentation fails the build) and sources.
# JUnit 5 tests run by the console launcher; examples/java and the self-contained jar's proof
# (testdata/) are built and run; scripts/maven-install.sh is tested into a scratch repository.
find_package(Java 17 REQUIRED COMPONENTS Development)
# jni.h lives in the JDK beside javac (FindJNI also wants AWT/JVM, which are not needed).
file(REAL_PATH ${Java_JAVAC_EXECUTABLE} kvt_javac)
cmake_path(GET kvt_javac PARENT_PATH kvt_jdk_bin)
cmake_path(GET kvt_jdk_bin PARENT_PATH kvt_jdk)
find_path(KVT_JNI_INCLUDE jni.h PATHS ${kvt_jdk}/include NO_DEFAULT_PATH REQUIRED)
set(JNI_INCLUDE_DIRS ${KVT_JNI_INCLUDE} ${KVT_JNI_INCLUDE}/linux)
find_file(KVT_JUNIT_CONSOLE junit-platform-console-standalone.jar PATHS /usr/share/java REQUIRED)
find_program(KVT_JAVADOC javadoc HINTS ${kvt_jdk_bin} REQUIRED)

set(jdir ${kvt_bind_out}/java)
set(jgen ${jdir}/gen)
set(jsrc ${CMAKE_CURRENT_SOURCE_DIR}/java/src)
file(GLOB kvt_java_src CONFIGURE_DEPENDS ${jsrc}/dev/kvtier/*.java ${jsrc}/dev/kvtier/swig/*.java)
file(GLOB kvt_java_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/java/test/dev/kvtier/*.java)
file(GLOB kvt_java_examples CONFIGURE_DEPENDS ${kvt_examples}/java/*.java)

# Maven artifacts. The platform is named as the jar's loader names the running one
# (NativeLoader.platform()): os.name and os.arch as uname -s (lower case) and uname -m.
string(TOLOWER "${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}" KVT_JAVA_PLATFORM)
set(jmvn ${jdir}/maven)
set(kvt_mvn_base ${jmvn}/kvtier-${PROJECT_VERSION})
set(kvt_jar ${kvt_mvn_base}.jar)
set(kvt_jar_native ${kvt_mvn_base}-${KVT_JAVA_PLATFORM}.jar)
set(kvt_jar_javadoc ${kvt_mvn_base}-javadoc.jar)
set(kvt_jar_sources ${kvt_mvn_base}-sources.jar)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/java/pom.xml.in ${kvt_mvn_base}.pom @ONLY)
# What every jar carries besides classes: the manifest and, as Maven-built jars do, the pom.
set(jmeta ${jdir}/meta)
configure_file(${kvt_mvn_base}.pom ${jmeta}/META-INF/maven/dev.kvtier/kvtier/pom.xml COPYONLY)
file(WRITE ${jmeta}/META-INF/maven/dev.kvtier/kvtier/pom.properties
  "groupId=dev.kvtier\nartifactId=kvtier\nversion=${PROJECT_VERSION}\n")
file(WRITE ${jdir}/MANIFEST.MF "Automatic-Module-Name: dev.kvtier
Implementation-Title: kvtier
Implementation-Version: ${PROJECT_VERSION}
Implementation-Vendor: The kvtier authors
")

add_custom_command(
  OUTPUT ${jgen}/kvtier_wrap.c ${jgen}/stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jgen}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${jgen}/dev/kvtier/swig
  COMMAND ${SWIG_EXECUTABLE} -java -package dev.kvtier.swig
          -I${PROJECT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}/java
          -o ${jgen}/kvtier_wrap.c -outdir ${jgen}/dev/kvtier/swig ${kvt_swig_i}
  COMMAND ${CMAKE_COMMAND} -E touch ${jgen}/stamp
  DEPENDS ${kvt_swig_i} ${CMAKE_CURRENT_SOURCE_DIR}/java/kvtier_java.i ${kvt_header}
  COMMENT "SWIG: Java low layer"
  VERBATIM)

# One compilation, two JNI libraries: kvtier_jni for the system (installed in <libdir>/jni),
# and the self-contained jar's copy, whose RUNPATH is only $ORIGIN (no build-tree path).
add_library(kvtier_jni_obj OBJECT ${jgen}/kvtier_wrap.c)
target_include_directories(kvtier_jni_obj PRIVATE ${JNI_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(kvtier_jni_obj PRIVATE -fno-strict-aliasing)
add_library(kvtier_jni MODULE $<TARGET_OBJECTS:kvtier_jni_obj>)
target_link_libraries(kvtier_jni PRIVATE kvtier)
set_target_properties(kvtier_jni PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${jdir})
add_library(kvtier_jni_bundled MODULE $<TARGET_OBJECTS:kvtier_jni_obj>)
target_link_libraries(kvtier_jni_bundled PRIVATE kvtier)
set_target_properties(kvtier_jni_bundled PROPERTIES OUTPUT_NAME kvtier_jni
  LIBRARY_OUTPUT_DIRECTORY ${jdir}/bundled BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "$ORIGIN")

# The generated class files are known only once SWIG has run: javac gets them by a glob.
list(JOIN kvt_java_src " " kvt_java_src_args)
add_custom_command(
  OUTPUT ${kvt_jar} ${kvt_jar_sources}
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/classes
  COMMAND sh -c "${Java_JAVAC_EXECUTABLE} -nowarn -encoding UTF-8 --release 17 -d ${jdir}/classes ${jgen}/dev/kvtier/swig/*.java ${kvt_java_src_args}"
  COMMAND ${Java_JAR_EXECUTABLE} cfm ${kvt_jar} ${jdir}/MANIFEST.MF -C ${jdir}/classes . -C ${jmeta} .
  COMMAND ${Java_JAR_EXECUTABLE} cf ${kvt_jar_sources} -C ${jsrc} dev -C ${jgen} dev -C ${jmeta} .
  DEPENDS ${jgen}/stamp ${kvt_java_src} ${kvt_mvn_base}.pom ${jdir}/MANIFEST.MF
  COMMENT "javac: kvtier-${PROJECT_VERSION}.jar, sources jar"
  VERBATIM)
# The self-contained jar: the same classes, plus stripped copies of libkvtier (under its
# soname) and the JNI library, and the list of them in load order.
set(jnative ${jdir}/native-res/dev/kvtier/native/${KVT_JAVA_PLATFORM})
add_custom_command(
  OUTPUT ${kvt_jar_native}
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/native-res
  COMMAND ${CMAKE_COMMAND} -E make_directory ${jnative}
  COMMAND ${CMAKE_STRIP} --strip-unneeded -o ${jnative}/$<TARGET_SONAME_FILE_NAME:kvtier> $<TARGET_FILE:kvtier>
  COMMAND ${CMAKE_STRIP} --strip-unneeded -o ${jnative}/libkvtier_jni.so $<TARGET_FILE:kvtier_jni_bundled>
  COMMAND sh -c "printf '%s\\n' $<TARGET_SONAME_FILE_NAME:kvtier> libkvtier_jni.so > ${jnative}/libraries"
  COMMAND ${Java_JAR_EXECUTABLE} cfm ${kvt_jar_native} ${jdir}/MANIFEST.MF
          -C ${jdir}/classes . -C ${jmeta} . -C ${jdir}/native-res .
  DEPENDS ${kvt_jar} kvtier kvtier_jni_bundled
  COMMENT "jar: kvtier-${PROJECT_VERSION}-${KVT_JAVA_PLATFORM}.jar (self-contained)"
  VERBATIM)
# javadoc of the public package dev.kvtier (the low layer dev.kvtier.swig is internal): no
# search index (it would bundle jQuery), no legal notices (the copyright file covers them).
add_custom_command(
  OUTPUT ${kvt_jar_javadoc}
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/javadoc
  COMMAND ${KVT_JAVADOC} -quiet -Xdoclint:all -Werror -noindex --legal-notices none -encoding UTF-8
          -windowtitle "kvtier ${PROJECT_VERSION} Java API" -doctitle "kvtier ${PROJECT_VERSION} Java API"
          -d ${jdir}/javadoc -sourcepath ${jsrc}:${jgen} dev.kvtier
  COMMAND ${Java_JAR_EXECUTABLE} cf ${kvt_jar_javadoc} -C ${jdir}/javadoc .
  DEPENDS ${jgen}/stamp ${kvt_java_src}
  COMMENT "javadoc: dev.kvtier"
  VERBATIM)

set(jtest_cp ${kvt_jar}:/usr/share/java/junit-jupiter-api.jar:/usr/share/java/apiguardian-api.jar:/usr/share/java/opentest4j.jar:/usr/share/java/junit-platform-commons.jar)
set(kvt_java_self_contained ${CMAKE_CURRENT_SOURCE_DIR}/java/testdata/SelfContained.java)
add_custom_command(
  OUTPUT ${jdir}/tests.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${jdir}/test-classes ${jdir}/example-classes
  COMMAND ${Java_JAVAC_EXECUTABLE} -encoding UTF-8 -cp ${jtest_cp} -d ${jdir}/test-classes ${kvt_java_tests}
  COMMAND ${Java_JAVAC_EXECUTABLE} -encoding UTF-8 -cp ${kvt_jar} -d ${jdir}/example-classes
          ${kvt_java_examples} ${kvt_java_self_contained}
  COMMAND ${CMAKE_COMMAND} -E touch ${jdir}/tests.stamp
  DEPENDS ${kvt_jar} ${kvt_java_tests} ${kvt_java_examples} ${kvt_java_self_contained}
  COMMENT "javac: tests and examples"
  VERBATIM)
add_custom_target(kvtier_java ALL
  DEPENDS ${kvt_jar} ${kvt_jar_native} ${kvt_jar_javadoc} ${jdir}/tests.stamp kvtier_jni)

kvt_add_binding_test(java_binding_test
  COMMAND ${Java_JAVA_EXECUTABLE} -Djava.library.path=${jdir}
          -jar ${KVT_JUNIT_CONSOLE} --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests
          -cp ${kvt_jar}:${jdir}/test-classes --select-package dev.kvtier)
kvt_add_binding_test(java_example
  COMMAND ${Java_JAVA_EXECUTABLE} -Dkvtier.jni.library=$<TARGET_FILE:kvtier_jni>
          -cp ${kvt_jar}:${jdir}/example-classes ServiceExample ${kvt_bind_model})
# Only the self-contained jar on the classpath: no libkvtier on the system's paths, no
# java.library.path; then the same from a Maven repository the install script filled.
set(kvt_java_proof ${CMAKE_CURRENT_SOURCE_DIR}/java/testdata/self_contained.sh)
kvt_add_binding_test(java_self_contained
  COMMAND bash ${kvt_java_proof} jar ${Java_JAVA_EXECUTABLE} ${kvt_jar_native} ${jdir}/example-classes ${kvt_bind_model})
kvt_add_binding_test(java_maven_install
  COMMAND bash ${kvt_java_proof} maven ${PROJECT_SOURCE_DIR}/scripts/maven-install.sh ${jmvn} ${kvt_bind_model})
if(kvt_bind_tests)
  # 77: skipped, saying why (a system kvtier_jni would be loaded instead; no mvn).
  set_tests_properties(java_self_contained java_maven_install PROPERTIES SKIP_RETURN_CODE 77)
endif()

# Install (Debian package libkvtier-java, see packaging/): the jar under its versioned name
# with the kvtier.jar link (Debian Java policy), its pom in Debian's Maven repository layout
# (/usr/share/maven-repo, the jar linked beside it) with the script that installs both into a
# user's Maven repository, and the JNI library in <libdir>/jni, which is on OpenJDK's default
# java.library.path on Debian (/usr/lib/<triplet>/jni), so System.loadLibrary("kvtier_jni")
# finds it without options. The javadoc goes to libkvtier-java-doc (/usr/share/doc/libkvtier-java/api).
set(kvt_java_share ${CMAKE_INSTALL_DATADIR}/java)
set(kvt_maven_repo_dir ${CMAKE_INSTALL_DATADIR}/maven-repo/dev/kvtier/kvtier/${PROJECT_VERSION})
file(MAKE_DIRECTORY ${jdir}/install)
file(CREATE_LINK kvtier-${PROJECT_VERSION}.jar ${jdir}/install/kvtier.jar SYMBOLIC)
file(CREATE_LINK ../../../../../java/kvtier-${PROJECT_VERSION}.jar
  ${jdir}/install/kvtier-${PROJECT_VERSION}.jar SYMBOLIC)
install(FILES ${kvt_jar} DESTINATION ${kvt_java_share} COMPONENT java)
install(FILES ${jdir}/install/kvtier.jar DESTINATION ${kvt_java_share} COMPONENT java)
install(FILES ${kvt_mvn_base}.pom ${jdir}/install/kvtier-${PROJECT_VERSION}.jar
  DESTINATION ${kvt_maven_repo_dir} COMPONENT java)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/maven-install.sh
  DESTINATION ${CMAKE_INSTALL_DATADIR}/${kvt_pkg_java} COMPONENT java)
install(TARGETS kvtier_jni LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/jni
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT java)
install(DIRECTORY ${jdir}/javadoc/ DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${kvt_pkg_java}/api
  COMPONENT javadoc)
