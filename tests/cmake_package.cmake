# The CMake package from a clean install (CTest: cmake_package).
# Installs the build tree into a fresh prefix, configures and builds
# examples/cpp_load against that prefix alone (find_package(tk), which finds
# Torch itself), and runs it on the module tests/cpp/torchscript_save.py wrote.
#
#   cmake -DBUILD_DIR=build -DSOURCE_DIR=. -DWORK=DIR -DTS_DIR=DIR
#         -DGENERATOR=Ninja -DCXX=c++ -P tests/cmake_package.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK TS_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "cmake_package: -D${var}=... is required")
  endif()
endforeach()

function(run what)
  message(STATUS "cmake_package: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake_package: ${what} failed (${rc})")
  endif()
endfunction()

set(prefix ${WORK}/prefix)
set(example_build ${WORK}/cpp_load)
file(REMOVE_RECURSE ${prefix} ${example_build})

run("install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f torch_tk/lib/libtk.so torch_tk/include/tk.h torch_tk/share/cmake/tk/tkConfig.cmake
          torch_tk/share/cmake/tk/tkConfigVersion.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake_package: the install has no ${f}")
  endif()
endforeach()

# Only the prefix: no Torch_DIR, no CMAKE_PREFIX_PATH from the environment.
unset(ENV{CMAKE_PREFIX_PATH})
unset(ENV{Torch_DIR})
run("configure examples/cpp_load against the install"
    ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/cpp_load -B ${example_build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_PREFIX_PATH=${prefix}/torch_tk)

# The example must use the installed libtk, not the build tree's.
file(STRINGS ${example_build}/CMakeCache.txt tk_dir REGEX "^tk_DIR:")
if(NOT tk_dir STREQUAL "tk_DIR:PATH=${prefix}/torch_tk/share/cmake/tk")
  message(FATAL_ERROR "cmake_package: found tk elsewhere: ${tk_dir}")
endif()

run("build cpp_load" ${CMAKE_COMMAND} --build ${example_build})
run("run cpp_load" ${example_build}/cpp_load ${TS_DIR})
