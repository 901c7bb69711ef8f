#include "ingest/yaml_loader.h"

#include <yaml.h>

#include <vector>

#include "ingest/parse_util.h"

namespace trainscope::ingest {

namespace {

using nlohmann::json;

constexpr size_t kMaxDepth = 64;

json PlainScalar(std::string_view v) {
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  double d;
  if (ParseNumber(v, &d)) {
    int64_t i;
    if (v.find_first_of(".eE") == std::string_view::npos && ParseStep(v, &i)) return i;
    return d;
  }
  return std::string(v);
}

// Adds value to the container on top of the stack (under the pending key for a mapping).
struct Frame {
  json value;
  bool mapping = false;
  bool have_key = false;
  std::string key;
};

void Put(std::vector<Frame>& stack, json value, json* root, bool* done) {
  if (stack.empty()) {
    *root = std::move(value);
    *done = true;
    return;
  }
  Frame& top = stack.back();
  if (!top.mapping) {
    top.value.push_back(std::move(value));
    return;
  }
  if (!top.have_key) {
    top.key = value.is_string() ? value.get<std::string>() : value.dump();
    top.have_key = true;
    return;
  }
  top.value[top.key] = std::move(value);
  top.have_key = false;
}

}  // namespace

Status ParseYaml(std::string_view text, const std::string& name, json* out) {
  *out = nullptr;
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return Status::Internal(name + ": could not start the YAML parser");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  std::vector<Frame> stack;
  bool done = false;
  Status status = Status::Ok();
  while (!done) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      status = Status::Corruption(name + ": line " + std::to_string(parser.problem_mark.line + 1) + ", column " +
                                  std::to_string(parser.problem_mark.column + 1) + ": " +
                                  (parser.problem ? parser.problem : "invalid YAML"));
      break;
    }
    const yaml_event_type_t type = event.type;
    if (type == YAML_STREAM_END_EVENT || type == YAML_DOCUMENT_END_EVENT) {
      done = true;
    } else if (type == YAML_MAPPING_START_EVENT || type == YAML_SEQUENCE_START_EVENT) {
      if (stack.size() >= kMaxDepth) {
        status = Status::Corruption(name + ": line " + std::to_string(event.start_mark.line + 1) +
                                    ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
        yaml_event_delete(&event);
        break;
      }
      Frame f;
      f.mapping = type == YAML_MAPPING_START_EVENT;
      f.value = f.mapping ? json::object() : json::array();
      stack.push_back(std::move(f));
    } else if (type == YAML_MAPPING_END_EVENT || type == YAML_SEQUENCE_END_EVENT) {
      if (!stack.empty()) {
        json v = std::move(stack.back().value);
        stack.pop_back();
        Put(stack, std::move(v), out, &done);
      }
    } else if (type == YAML_SCALAR_EVENT) {
      const std::string_view v(reinterpret_cast<const char*>(event.data.scalar.value), event.data.scalar.length);
      json value = event.data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? PlainScalar(v) : json(std::string(v));
      Put(stack, std::move(value), out, &done);
    } else if (type == YAML_ALIAS_EVENT) {
      Put(stack, nullptr, out, &done);
    }
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  return status;
}

}  // namespace trainscope::ingest
