# embed_text.cmake - writes a C file whose function FUNC returns the exact
# text of SRC. Run as: cmake -DSRC=file -DDST=file.c -DFUNC=fn -P embed_text.cmake
# The text is stored as a byte array (no escaping rules to get wrong) with a
# terminating NUL.
foreach(var SRC DST FUNC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_text.cmake: -D${var}=... is required")
  endif()
endforeach()

file(READ "${SRC}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
# "0a2f2a" -> "0x0a,0x2f,0x2a," with a line break every 16 bytes
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REPEAT "0x..," 16 row)
string(REGEX REPLACE "(${row})" "\\1\n    " bytes "${bytes}")
get_filename_component(in_name "${SRC}" NAME)

set(text "/* Generated from ${in_name} by cmake/embed_text.cmake; do not edit. */
#include \"tk.h\"

/* ${nbytes} bytes of ${in_name} and a terminating NUL. */
static const unsigned char text[] = {
    ${bytes}0x00
};

const char *${FUNC}(void) { return (const char *)text; }
")

# Rewrite only when the text changed, so dependents are not rebuilt needlessly.
if(EXISTS "${DST}")
  file(READ "${DST}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${DST}" "${text}")
