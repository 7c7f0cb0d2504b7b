# Lazy loading of libcurl, libarchive, libpng and zlib on first use (core/src/cli/lazy_libs.h): a
# plain C table in lazy_libs.c resolved with dlopen/dlsym, switched on by RELAY_LAZY_LIBS.
# Included by core/CMakeLists.txt after relay_core is defined. Linux only; elsewhere, or with
# -DRELAY_LAZY_LIBS=OFF, the four libraries are linked the ordinary way.
option(RELAY_LAZY_LIBS "Load libcurl, libarchive, libpng and zlib on first use (Linux)" ON)

# The SONAME of the first shared library in `libs` (full paths from pkg-config).
function(relay_lazy_soname out libs)
  foreach(lib ${libs})
    if(lib MATCHES "\\.so")
      execute_process(COMMAND ${CMAKE_OBJDUMP} -p ${lib} OUTPUT_VARIABLE dump ERROR_QUIET)
      if(dump MATCHES "SONAME +([^\n ]+)")
        set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

if(RELAY_LAZY_LIBS AND CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_OBJDUMP)
  relay_lazy_soname(RELAY_SONAME_CURL "${CURL_LINK_LIBRARIES}")
  relay_lazy_soname(RELAY_SONAME_ARCHIVE "${ARCHIVE_LINK_LIBRARIES}")
  relay_lazy_soname(RELAY_SONAME_PNG "${PNG_LINK_LIBRARIES}")
  relay_lazy_soname(RELAY_SONAME_Z "${ZLIB_LINK_LIBRARIES}")
  if(RELAY_SONAME_CURL AND RELAY_SONAME_ARCHIVE AND RELAY_SONAME_PNG AND RELAY_SONAME_Z)
    target_compile_definitions(relay_core PRIVATE RELAY_LAZY_LIBS
      RELAY_LAZY_SONAME_CURL="${RELAY_SONAME_CURL}"
      RELAY_LAZY_SONAME_ARCHIVE="${RELAY_SONAME_ARCHIVE}"
      RELAY_LAZY_SONAME_PNG="${RELAY_SONAME_PNG}"
      RELAY_LAZY_SONAME_Z="${RELAY_SONAME_Z}")
    message(STATUS "mcp-relay: lazy loading of ${RELAY_SONAME_CURL}, ${RELAY_SONAME_ARCHIVE}, ${RELAY_SONAME_PNG}, ${RELAY_SONAME_Z}")
  else()
    message(STATUS "mcp-relay: lazy library loading off (no SONAME found for libcurl, libarchive, libpng or zlib)")
  endif()
endif()
