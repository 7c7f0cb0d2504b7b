# The guest receiver (spec/guest.md §5): a static C99 + POSIX program, libc only,
# built per platform into ${RELAY_RECEIVER_OUTPUT_DIR}/<platform>/receiver.
#
#   receiver-${RELAY_HOST_PLATFORM}   the build for this machine (part of `all`)
#   receiver                          alias of the above
#   receiver-linux-aarch64            with aarch64-linux-gnu-gcc, when found
#
# Never sanitized: static linking and ASan do not mix, and the guest runs
# the program without the sanitizer runtimes.

file(GLOB RELAY_RECEIVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/receiver/*.c)
list(PREPEND RELAY_RECEIVER_SOURCES ${CMAKE_CURRENT_LIST_DIR}/receiver.c)
# The support library (support/) is compiled in with the receiver's own flags
# (static, never sanitized, C99; also by the aarch64 cross compiler).
list(APPEND RELAY_RECEIVER_SOURCES ${RELAY_SUPPORT_SOURCES})
set(RELAY_RECEIVER_C_FLAGS -std=c99 -O2 -D_GNU_SOURCE -fvisibility=hidden -I${RELAY_SUPPORT_INCLUDE_DIR}
  ${RELAY_WARNINGS})

set(_receiver_target receiver-${RELAY_HOST_PLATFORM})
add_executable(${_receiver_target} ${RELAY_RECEIVER_SOURCES})
set_target_properties(${_receiver_target} PROPERTIES
  OUTPUT_NAME receiver
  RUNTIME_OUTPUT_DIRECTORY ${RELAY_RECEIVER_OUTPUT_DIR}/${RELAY_HOST_PLATFORM}
  C_STANDARD 99
  C_EXTENSIONS OFF
  POSITION_INDEPENDENT_CODE OFF)
# The directory-wide options carry the sanitizer flags when RELAY_SANITIZE
# is on; this target takes none of them.
get_target_property(_receiver_copts ${_receiver_target} COMPILE_OPTIONS)
get_target_property(_receiver_lopts ${_receiver_target} LINK_OPTIONS)
foreach(_flag ${RELAY_SANITIZE_FLAGS})
  if(_receiver_copts)
    list(REMOVE_ITEM _receiver_copts ${_flag})
  endif()
  if(_receiver_lopts)
    list(REMOVE_ITEM _receiver_lopts ${_flag})
  endif()
endforeach()
if(NOT _receiver_copts)
  set(_receiver_copts "")
endif()
if(NOT _receiver_lopts)
  set(_receiver_lopts "")
endif()
set_target_properties(${_receiver_target} PROPERTIES COMPILE_OPTIONS "${_receiver_copts}" LINK_OPTIONS "${_receiver_lopts}")
target_compile_options(${_receiver_target} PRIVATE -O2 -fno-pie)
target_include_directories(${_receiver_target} PRIVATE ${RELAY_SUPPORT_INCLUDE_DIR})
target_compile_definitions(${_receiver_target} PRIVATE RECEIVER_PLATFORM="${RELAY_HOST_PLATFORM}"
  RECEIVER_VERSION="${PROJECT_VERSION}")
# clang's -static already implies a non-PIE link (it warns that -no-pie is unused).
target_link_options(${_receiver_target} PRIVATE -static $<$<C_COMPILER_ID:GNU>:-no-pie> -s)
install(TARGETS ${_receiver_target} RUNTIME DESTINATION ${RELAY_RECEIVER_INSTALL_DIR}/${RELAY_HOST_PLATFORM})

if(NOT TARGET receiver)
  add_custom_target(receiver DEPENDS ${_receiver_target})
endif()

# Cross build for linux-aarch64 guests with Debian's gcc-aarch64-linux-gnu.
if(NOT RELAY_HOST_PLATFORM STREQUAL "linux-aarch64")
  find_program(RELAY_AARCH64_CC aarch64-linux-gnu-gcc)
  if(RELAY_AARCH64_CC)
    set(_aarch64_out ${RELAY_RECEIVER_OUTPUT_DIR}/linux-aarch64/receiver)
    add_custom_command(OUTPUT ${_aarch64_out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${RELAY_RECEIVER_OUTPUT_DIR}/linux-aarch64
      COMMAND ${RELAY_AARCH64_CC} ${RELAY_RECEIVER_C_FLAGS} -DRECEIVER_PLATFORM="linux-aarch64" -DRECEIVER_VERSION="${PROJECT_VERSION}"
              -static -s -o ${_aarch64_out} ${RELAY_RECEIVER_SOURCES}
      DEPENDS ${RELAY_RECEIVER_SOURCES} ${CMAKE_CURRENT_LIST_FILE}
      COMMENT "Building the linux-aarch64 guest receiver with ${RELAY_AARCH64_CC}"
      VERBATIM)
    add_custom_target(receiver-linux-aarch64 ALL DEPENDS ${_aarch64_out})
    install(PROGRAMS ${_aarch64_out} DESTINATION ${RELAY_RECEIVER_INSTALL_DIR}/linux-aarch64)
  endif()
endif()
