# The tables of data/ that C++ compiles in, as generated headers: each script of this folder
# turns its table into OUTPUT (written only when its text changes, so a rebuild of the
# generator does not rebuild its readers).
#   trainscope_table_header(<table.json> <script.cmake> <header>)
function(trainscope_table_header table script header)
  get_filename_component(name ${header} NAME)
  add_custom_command(
    OUTPUT ${header}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${table} -DOUTPUT=${header} -P ${script}
    DEPENDS ${table} ${script} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/camel_case.cmake
    COMMENT "Generating core/${name} from ${table}")
endfunction()
