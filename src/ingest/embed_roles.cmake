# Writes OUTPUT, a C++ file defining trainscope::ingest::kDefaultRolesJson with the bytes of INPUT.
file(READ ${INPUT} content)
file(WRITE ${OUTPUT} "// Generated from data/roles.json by embed_roles.cmake; edit that file.\n"
  "namespace trainscope::ingest {\nextern const char kDefaultRolesJson[] = R\"trainscope_roles(${content})trainscope_roles\";\n}\n")
