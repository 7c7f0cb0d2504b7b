# relay-x11shot: the capture-x11 guest program (spec/guest.md §11.2).
# Built statically (C99 + POSIX, libc only) into
#   ${RELAY_RECEIVER_OUTPUT_DIR}/${RELAY_HOST_PLATFORM}/relay-x11shot
# and installed to ${RELAY_RECEIVER_INSTALL_DIR}/<platform>/. It is never
# built with the sanitizers: static linking and ASan do not mix.
set(RELAY_X11SHOT_TARGET relay-x11shot-${RELAY_HOST_PLATFORM})
file(GLOB RELAY_X11SHOT_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/relay-x11shot/*.c)
# The support library's Adler-32 only (libc only, like the program).
add_executable(${RELAY_X11SHOT_TARGET} ${CMAKE_CURRENT_LIST_DIR}/relay-x11shot.c ${RELAY_X11SHOT_SOURCES}
  ${RELAY_SUPPORT_INCLUDE_DIR}/../src/adler32.c)
target_include_directories(${RELAY_X11SHOT_TARGET} PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${RELAY_SUPPORT_INCLUDE_DIR})
# Replace the inherited directory options (sanitizers, _GNU_SOURCE) with
# exactly what a portable static guest program needs.
set_property(TARGET ${RELAY_X11SHOT_TARGET} PROPERTY COMPILE_OPTIONS ${RELAY_WARNINGS} -O2)
set_property(TARGET ${RELAY_X11SHOT_TARGET} PROPERTY COMPILE_DEFINITIONS "")
set_property(TARGET ${RELAY_X11SHOT_TARGET} PROPERTY LINK_OPTIONS -static -s)
set_target_properties(${RELAY_X11SHOT_TARGET} PROPERTIES
  OUTPUT_NAME relay-x11shot
  RUNTIME_OUTPUT_DIRECTORY ${RELAY_RECEIVER_OUTPUT_DIR}/${RELAY_HOST_PLATFORM}
  C_STANDARD 99
  C_STANDARD_REQUIRED ON
  C_EXTENSIONS OFF
  POSITION_INDEPENDENT_CODE OFF)
add_custom_target(relay-x11shot DEPENDS ${RELAY_X11SHOT_TARGET})
install(TARGETS ${RELAY_X11SHOT_TARGET}
  RUNTIME DESTINATION ${RELAY_RECEIVER_INSTALL_DIR}/${RELAY_HOST_PLATFORM})
