# camel(<text> <out>): "grad_units" -> "GradUnits", "time/step" -> "TimeStep", the names the
# generated headers give a table's rows.
function(camel text out)
  string(REGEX REPLACE "[/_]" ";" parts "${text}")
  set(result "")
  foreach(part IN LISTS parts)
    string(SUBSTRING "${part}" 0 1 first)
    string(SUBSTRING "${part}" 1 -1 rest)
    string(TOUPPER "${first}" first)
    string(APPEND result "${first}${rest}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()
