# Turns INPUT into a C file defining `const char SYMBOL[]` (NUL-terminated)
# and `const unsigned long SYMBOL_len`.
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR byte_len "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" body "${body}")
file(WRITE ${OUTPUT} "/* generated from ${INPUT}; do not edit */\n"
  "extern const char ${SYMBOL}[];\nextern const unsigned long ${SYMBOL}_len;\n"
  "const char ${SYMBOL}[] = {\n${body}0x00};\nconst unsigned long ${SYMBOL}_len = ${byte_len};\n")
