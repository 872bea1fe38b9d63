# What the install tests share (include() from their -P scripts).

# BUILD_DIR installed into a fresh PREFIX; PREFIX-moved and any `extra` folders cleared first
# (each test moves the prefix and builds again from there).
function(qmoe_install_into build_dir prefix)
  file(REMOVE_RECURSE ${prefix} ${prefix}-moved ${ARGN})
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${build_dir} --prefix ${prefix}
    RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "cmake --install failed: ${rc}")
  endif()
endfunction()

# `pkg-config --cflags --libs pkg` of the .pc installed under `prefix`, as a list in `out`; the
# flags must point into that prefix (the .pc files find it from their own location).
function(qmoe_pkg_flags prefix pkg out)
  file(GLOB_RECURSE pc ${prefix}/*/${pkg}.pc)
  if(NOT pc)
    message(FATAL_ERROR "${pkg}.pc was not installed under ${prefix}")
  endif()
  get_filename_component(pcdir ${pc} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  execute_process(COMMAND pkg-config --cflags --libs ${pkg}
    OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc OR NOT flags MATCHES "-I${prefix}/")
    message(FATAL_ERROR "pkg-config --cflags --libs ${pkg}: \"${flags}\" (rc ${rc}): not into ${prefix}")
  endif()
  message(STATUS "pkg-config --cflags --libs ${pkg}: ${flags}")
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
