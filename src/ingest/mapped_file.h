// A whole file, read-only, as one byte range: memory-mapped when the file is large enough
// for mapping to pay (page faults instead of copies), read into memory otherwise. Importers
// parse in place, so strings they hand on are views into this range and live as long as it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace trainscope::ingest {

class MappedFile {
 public:
  // Maps or reads `path`. An empty file is fine (size 0).
  static Status Open(const std::string& path, std::unique_ptr<MappedFile>* file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Drops the pages before `upto` from memory (a mapped file's pages count as resident
  // until released); reading them again still works, from disk. A no-op for read files.
  void Release(size_t upto);

 private:
  MappedFile() = default;
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  size_t released_ = 0;
  std::string buffer_;  // when read rather than mapped
};

// Opens a file for reading if it is a regular file. Anything else (a FIFO, a device, a
// socket) is refused without waiting on it, naming the file and what it is: every reader
// opens its files here. *fd is the caller's to close.
Status OpenRegularFile(const std::string& path, int* fd);

// Reads at most `max_bytes` from the start of a file (format detection).
Status ReadFilePrefix(const std::string& path, size_t max_bytes, std::string* out);

}  // namespace trainscope::ingest
