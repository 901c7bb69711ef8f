# Writes OUTPUT, core/tag_families.h: data/tag_families.json as constexpr C++ (tags::kGrad,
# tags::kTimeStep, tags::kFamilies ...), so C++ names a family or a known tag by a constant
# checked at compile time and the table has one owner.
# cmake -DINPUT=data/tag_families.json -DOUTPUT=.../core/tag_families.h -P tag_families.cmake
file(READ ${INPUT} json)

include(${CMAKE_CURRENT_LIST_DIR}/camel_case.cmake)

function(group_mask object out)
  set(mask "0")
  string(JSON n LENGTH "${object}" groups)
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON group GET "${object}" groups ${i})
      if(group STREQUAL "internal")
        string(APPEND mask " | kInternalGroup")
      elseif(group STREQUAL "watch")
        string(APPEND mask " | kWatchGroup")
      elseif(group STREQUAL "performance")
        string(APPEND mask " | kPerformanceGroup")
      else()
        message(FATAL_ERROR "${INPUT}: unknown group '${group}' (expected internal, watch or performance)")
      endif()
    endforeach()
  endif()
  set(${out} "${mask}" PARENT_SCOPE)
endfunction()

# Sets each of the fields named after `object` to its value in the JSON object.
function(json_fields object)
  foreach(field IN LISTS ARGN)
    string(JSON value GET "${object}" ${field})
    set(${field} "${value}" PARENT_SCOPE)
  endforeach()
endfunction()

# id: the C++ name of the family or tag `text` (k<id>); mask: its groups as C++.
function(constant object text)
  camel("${text}" id)
  group_mask("${object}" mask)
  set(id "${id}" PARENT_SCOPE)
  set(mask "${mask}" PARENT_SCOPE)
endfunction()

# The last index of the JSON array `key` of the table.
function(last_index key out)
  string(JSON count LENGTH "${json}" ${key})
  math(EXPR last "${count} - 1")
  set(${out} ${last} PARENT_SCOPE)
endfunction()

# string(APPEND) starts each output list from empty.
last_index(families last)
foreach(i RANGE ${last})
  string(JSON family GET "${json}" families ${i})
  json_fields("${family}" name prefix names kind scope)
  if(NOT scope MATCHES "^(model|process)$")
    message(FATAL_ERROR "${INPUT}: family '${name}' has scope '${scope}' (expected model or process)")
  endif()
  if(NOT prefix STREQUAL "${name}/")
    message(FATAL_ERROR "${INPUT}: family '${name}' has prefix '${prefix}' (expected '${name}/')")
  endif()
  constant("${family}" "${name}")
  string(APPEND families "inline constexpr TagFamily k${id}{\"${name}\", \"${prefix}\", \"${names}\", \"${kind}\", \"${scope}\", ${mask}};\n")
  string(APPEND family_list "&k${id}, ")
endforeach()

last_index(tags last)
foreach(i RANGE ${last})
  string(JSON entry GET "${json}" tags ${i})
  json_fields("${entry}" tag kind)
  constant("${entry}" "${tag}")
  string(APPEND known "inline constexpr char k${id}[] = \"${tag}\";\n")
  string(APPEND known_list "{k${id}, \"${kind}\", ${mask}}, ")
endforeach()

file(WRITE ${OUTPUT}.tmp
  "// Generated from data/tag_families.json by cmake/tag_families.cmake; edit that file.\n"
  "// Included by core/tag.h, which defines TagFamily and KnownTag.\n"
  "#pragma once\n\nnamespace trainscope::tags {\n\n${families}\n"
  "inline constexpr const TagFamily* kFamilies[] = {${family_list}};\n\n${known}\n"
  "inline constexpr KnownTag kKnownTags[] = {${known_list}};\n\n"
  "}  // namespace trainscope::tags\n")
# Only a changed table rebuilds what includes it.
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)
