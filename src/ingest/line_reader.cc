#include "ingest/line_reader.h"

#include "ingest/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trainscope::ingest {

namespace {
constexpr size_t kChunk = 1 << 20;
}

Status LineReader::Open(const std::string& path, std::unique_ptr<LineReader>* reader) {
  int fd = -1;
  Status opened = OpenRegularFile(path, &fd);
  if (!opened.ok()) return opened;
  std::unique_ptr<LineReader> r(new LineReader);
  r->name_ = path;
  r->fd_ = fd;
  struct stat st;
  if (::fstat(fd, &st) == 0) r->total_ = static_cast<uint64_t>(st.st_size);
  r->buffer_.resize(kMaxLineBytes + kChunk);
  *reader = std::move(r);
  return Status::Ok();
}

LineReader::LineReader(std::string_view bytes, std::string name)
    : name_(std::move(name)), memory_(bytes), memory_mode_(true), total_(bytes.size()) {}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool LineReader::Fill() {
  if (eof_) return false;
  if (begin_ > 0) {  // slide the unread bytes to the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) return false;
  for (;;) {
    const ssize_t n = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = name_ + ": read failed: " + std::strerror(errno);
      io_failed_ = true;
      eof_ = true;
      return false;
    }
    if (n == 0) {
      eof_ = true;
      return false;
    }
    end_ += static_cast<size_t>(n);
    return true;
  }
}

LineReader::Result LineReader::NextLine(std::string_view* line) {
  if (memory_mode_) {
    if (memory_.empty()) return kEnd;
    line_offset_ = consumed_;
    ++line_number_;
    const size_t nl = memory_.find('\n');
    const size_t len = nl == std::string_view::npos ? memory_.size() : nl;
    const size_t take = nl == std::string_view::npos ? len : len + 1;
    std::string_view l = memory_.substr(0, len);
    memory_.remove_prefix(take);
    consumed_ += take;
    if (len > kMaxLineBytes) {
      error_ = name_ + ": line " + std::to_string(line_number_) + " (offset " + std::to_string(line_offset_) +
               "): expected a line of at most " + std::to_string(kMaxLineBytes) + " bytes, found " +
               std::to_string(len) + "; skipped";
      return kTooLong;
    }
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    *line = l;
    return kLine;
  }
  if (!io_failed_) error_.clear();
  line_offset_ = consumed_;
  size_t scanned = 0;  // bytes of the current line already searched for '\n'
  for (;;) {
    const char* start = buffer_.data() + begin_;
    const size_t avail = end_ - begin_;
    const void* nl = avail > scanned ? std::memchr(start + scanned, '\n', avail - scanned) : nullptr;
    if (nl) {
      const size_t len = static_cast<const char*>(nl) - start;
      std::string_view l(start, len);
      begin_ += len + 1;
      consumed_ += len + 1;
      ++line_number_;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      *line = l;
      return kLine;
    }
    scanned = avail;
    if (avail >= kMaxLineBytes) {
      // Too long to hold: drop what we have and look for the end of this line.
      ++line_number_;
      uint64_t skipped = avail;
      begin_ = end_ = 0;
      for (;;) {
        if (!Fill()) {
          consumed_ += skipped;
          if (io_failed_) return kError;
          error_ = name_ + ": line " + std::to_string(line_number_) + " (offset " + std::to_string(line_offset_) +
                   "): expected a line of at most " + std::to_string(kMaxLineBytes) + " bytes, found " +
                   std::to_string(skipped) + " bytes without a newline up to the end of the file; skipped";
          return kTooLong;
        }
        const void* p = std::memchr(buffer_.data(), '\n', end_);
        if (p) {
          const size_t part = static_cast<const char*>(p) - buffer_.data();
          skipped += part;
          begin_ = part + 1;
          consumed_ += skipped + 1;
          error_ = name_ + ": line " + std::to_string(line_number_) + " (offset " + std::to_string(line_offset_) +
                   "): expected a line of at most " + std::to_string(kMaxLineBytes) + " bytes, found " +
                   std::to_string(skipped) + "; skipped";
          return kTooLong;
        }
        skipped += end_;
        begin_ = end_ = 0;
        if (skipped > kGiveUpBytes) {
          consumed_ += skipped;
          error_ = name_ + ": line " + std::to_string(line_number_) + " (offset " + std::to_string(line_offset_) +
                   "): expected text lines, found more than " + std::to_string(kGiveUpBytes >> 20) +
                   " MiB without a newline; stopped reading";
          return kError;
        }
      }
    }
    if (!Fill()) {
      if (io_failed_) return kError;
      const size_t left = end_ - begin_;
      if (left == 0) return kEnd;
      std::string_view l(buffer_.data() + begin_, left);  // last line, no newline
      begin_ = end_;
      consumed_ += left;
      ++line_number_;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      *line = l;
      return kLine;
    }
  }
}

}  // namespace trainscope::ingest
