// The web UI (web/dist), embedded in the binary at build time by embed_assets.cmake, so
// `trainscope serve` needs nothing else installed.
#pragma once

#include <cstddef>
#include <string_view>

namespace trainscope::server {

struct Asset {
  const char* path;          // "/index.html", "/app.js", ...
  const char* content_type;  // "text/html; charset=utf-8", ...
  const unsigned char* data;
  size_t size;
};

// The asset served at `path` ("/" is "/index.html"), or nullptr.
const Asset* FindAsset(std::string_view path);

// Every embedded asset (for tests and the docs).
extern const Asset kAssets[];
extern const size_t kAssetCount;

}  // namespace trainscope::server
