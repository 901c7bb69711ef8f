// Lines of a text file (logs, CSV, JSONL) with bounded memory: at most kMaxLineBytes of one
// line are ever held, whatever the file holds. A longer line is skipped and reported; a
// "line" that runs on for kGiveUpBytes without a newline (a binary file, a 5 GB line) stops
// the read with an error instead of scanning it all.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "ingest/import_stats.h"

namespace trainscope::ingest {

class LineReader {
 public:
  static constexpr size_t kMaxLineBytes = 1 << 20;   // 1 MiB
  static constexpr uint64_t kGiveUpBytes = 64 << 20;  // 64 MiB

  enum Result {
    kLine,     // *line holds the next line, without its "\n" or "\r\n"
    kEnd,      // end of input
    kTooLong,  // a line longer than kMaxLineBytes was skipped; error() says where
    kError,    // I/O error or a runaway line; error() says what; stop
  };

  // Reads the file at path in chunks.
  static Status Open(const std::string& path, std::unique_ptr<LineReader>* reader);
  // Reads lines of bytes held in memory (tests, fuzzing); `name` is used in messages.
  LineReader(std::string_view bytes, std::string name);
  ~LineReader();

  Result Next(std::string_view* line) {
    const Result r = NextLine(line);
    if (progress_ && consumed_ >= next_progress_) {
      progress_(consumed_, total_);
      next_progress_ = consumed_ + kProgressEvery;
    }
    return r;
  }
  // Called with (bytes read, file size) every 16 MB or so.
  void SetProgress(ProgressFn progress) { progress_ = std::move(progress); }
  // 1-based number of the line last returned (or skipped).
  uint64_t line_number() const { return line_number_; }
  // Byte offset of the start of the line last returned.
  uint64_t line_offset() const { return line_offset_; }
  uint64_t bytes_read() const { return consumed_; }
  uint64_t total_bytes() const { return total_; }
  const std::string& error() const { return error_; }
  // error() as a Status of its kind, after kError: IOError when the system failed the
  // read, Corruption for a runaway line (the file is not text lines).
  Status ErrorStatus() const { return io_failed_ ? Status::IOError(error_) : Status::Corruption(error_); }
  const std::string& name() const { return name_; }

 private:
  LineReader() = default;
  static constexpr uint64_t kProgressEvery = 16 << 20;
  Result NextLine(std::string_view* line);
  bool Fill();  // reads more into buffer_; false at EOF or error
  ProgressFn progress_;
  uint64_t next_progress_ = kProgressEvery;

  std::string name_;
  int fd_ = -1;
  std::string buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes in buffer_
  bool eof_ = false;
  bool io_failed_ = false;
  std::string_view memory_;  // memory mode
  bool memory_mode_ = false;
  uint64_t consumed_ = 0;   // file offset of buffer_[begin_]
  uint64_t total_ = 0;
  uint64_t line_number_ = 0;
  uint64_t line_offset_ = 0;
  std::string error_;
};

}  // namespace trainscope::ingest
