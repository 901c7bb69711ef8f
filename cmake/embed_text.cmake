# Writes OUTPUT, a C++ file defining `extern const char NAMESPACE::SYMBOL[]` with the bytes of
# INPUT, so a data file is compiled into the binary and nothing is looked up at run time.
# cmake -DINPUT=... -DOUTPUT=... -DNAMESPACE=trainscope::x -DSYMBOL=kName -P embed_text.cmake
file(READ ${INPUT} content)
get_filename_component(name ${INPUT} NAME)
file(WRITE ${OUTPUT} "// Generated from ${name} by cmake/embed_text.cmake; edit that file.\n"
  "namespace ${NAMESPACE} {\nextern const char ${SYMBOL}[] = R\"trainscope_embed(${content})trainscope_embed\";\n}\n")
