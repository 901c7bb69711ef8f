// Base64 (RFC 4648, with padding): the ingest API's packed points travel in JSON strings.
#pragma once

#include <string>

namespace trainscope {

std::string Base64Encode(const std::string& bytes);
// False if `text` is not base64.
bool Base64Decode(const std::string& text, std::string* bytes);

}  // namespace trainscope
