# Writes OUTPUT, a C++ file defining trainscope::doctor::kDefaultRolesJson with the bytes of INPUT.
file(READ ${INPUT} content)
file(WRITE ${OUTPUT} "// Generated from data/roles.json by embed_roles.cmake; edit that file.\n"
  "namespace trainscope::doctor {\nextern const char kDefaultRolesJson[] = R\"trainscope_roles(${content})trainscope_roles\";\n}\n")
