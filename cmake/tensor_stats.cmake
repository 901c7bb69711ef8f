# Writes OUTPUT, core/measured_stats_table.h: data/tensor_stats.json as C++ (the fields of
# MeasuredTensorStats, tensor_stats::kMeasured and each row's thresholds as constants), so
# every serialiser loops over one table and a kernel names its thresholds by constant.
# cmake -DINPUT=data/tensor_stats.json -DOUTPUT=.../core/measured_stats_table.h -P tensor_stats.cmake
file(READ ${INPUT} json)

include(${CMAKE_CURRENT_LIST_DIR}/camel_case.cmake)

string(JSON count LENGTH "${json}" measured)
math(EXPR last "${count} - 1")
set(later_row FALSE)
foreach(i RANGE ${last})
  string(JSON row GET "${json}" measured ${i})
  foreach(field name unit computed first_schema)
    string(JSON ${field} GET "${row}" ${field})
  endforeach()
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "${INPUT}: measured statistic '${name}' is not a lower_case identifier (it names a column)")
  endif()
  if(first_schema)
    if(later_row)
      message(FATAL_ERROR "${INPUT}: '${name}' has first_schema true after a row without: the first schema's rows come first")
    endif()
    set(first "true")
  else()
    set(later_row TRUE)
    set(first "false")
  endif()
  foreach(text IN ITEMS "${unit}" "${computed}")
    if(text MATCHES "[\"\\\\]")
      message(FATAL_ERROR "${INPUT}: '${name}': no quotes or backslashes in unit or computed")
    endif()
  endforeach()
  camel("${name}" id)
  string(APPEND fields "  double ${name} = std::numeric_limits<double>::quiet_NaN();\n")
  string(JSON thresholds GET "${row}" thresholds)
  string(JSON n LENGTH "${thresholds}")
  set(threshold_list "")
  if(n GREATER 0)
    math(EXPR last_threshold "${n} - 1")
    foreach(t RANGE ${last_threshold})
      string(JSON key MEMBER "${thresholds}" ${t})
      string(JSON value GET "${thresholds}" ${key})
      camel("${key}" key_id)
      string(APPEND constants "inline constexpr double k${id}${key_id} = ${value};\n")
      string(APPEND threshold_list "{\"${key}\", k${id}${key_id}}, ")
    endforeach()
    string(APPEND constants "inline constexpr Threshold k${id}Thresholds[] = {${threshold_list}};\n")
    set(threshold_ref "k${id}Thresholds, ${n}")
  else()
    set(threshold_ref "nullptr, 0")
  endif()
  string(APPEND rows "inline constexpr MeasuredStat k${id}{\"${name}\", &MeasuredTensorStats::${name}, \"${unit}\",\n"
                     "    \"${computed}\",\n    ${first}, ${threshold_ref}};\n")
  string(APPEND row_list "&k${id}, ")
endforeach()

file(WRITE ${OUTPUT}.tmp
  "// Generated from data/tensor_stats.json by cmake/tensor_stats.cmake; edit that file.\n"
  "// Included by core/measured_stats.h, which defines MeasuredStat and Threshold.\n"
  "#pragma once\n\n#include <limits>\n\nnamespace trainscope {\n\n"
  "// The measured statistics of a tensor: NaN when not measured.\n"
  "struct MeasuredTensorStats {\n${fields}};\n\n"
  "namespace tensor_stats {\n\n${constants}\n${rows}\n"
  "inline constexpr const MeasuredStat* kMeasured[] = {${row_list}};\n"
  "inline constexpr size_t kMeasuredCount = ${count};\n\n"
  "}  // namespace tensor_stats\n}  // namespace trainscope\n")
# Only a changed table rebuilds what includes it.
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)
