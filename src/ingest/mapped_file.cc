#include "ingest/mapped_file.h"

#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace trainscope::ingest {

namespace {
constexpr size_t kMapThreshold = 1 << 20;  // below this a read() is as cheap as a mapping

Status Errno(const std::string& path, const char* what) {
  std::string message = path + ": " + what + ": " + std::strerror(errno);
  return errno == ENOENT ? Status::NotFound(std::move(message)) : Status::IOError(std::move(message));
}
// Reads until `size` bytes or the end of the file (a file still being written may be
// shorter than it was); false, with errno set, on a read error.
bool ReadUpTo(int fd, char* data, size_t size, size_t* done) {
  *done = 0;
  while (*done < size) {
    const ssize_t n = ::read(fd, data + *done, size - *done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    *done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status OpenRegularFile(const std::string& path, int* fd_out) {
  *fd_out = -1;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. It
  // is cleared again once the file is known to be regular (it means nothing there).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    Status s = Errno(path, "cannot open");
    struct stat st;  // a socket cannot be opened at all: say what it is
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return NotARegularFile(path, st.st_mode);
    return s;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Errno(path, "cannot stat");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotARegularFile(path, st.st_mode);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *fd_out = fd;
  return Status::Ok();
}

Status MappedFile::Open(const std::string& path, std::unique_ptr<MappedFile>* file) {
  int fd = -1;
  Status opened = OpenRegularFile(path, &fd);
  if (!opened.ok()) return opened;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Errno(path, "cannot stat");
    ::close(fd);
    return s;
  }
  std::unique_ptr<MappedFile> f(new MappedFile);
  f->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size >= kMapThreshold) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      ::madvise(p, size, MADV_SEQUENTIAL | MADV_WILLNEED);
      f->data_ = static_cast<const char*>(p);
      f->size_ = size;
      f->mapped_ = true;
      ::close(fd);
      *file = std::move(f);
      return Status::Ok();
    }
  }
  // Small file, or mapping refused: read it. The size may change while we read (a file
  // still being written); we keep what we got.
  f->buffer_.resize(size);
  size_t done = 0;
  if (!ReadUpTo(fd, f->buffer_.data(), size, &done)) {
    Status s = Errno(path, "cannot read");
    ::close(fd);
    return s;
  }
  ::close(fd);
  f->buffer_.resize(done);
  f->data_ = f->buffer_.data();
  f->size_ = done;
  *file = std::move(f);
  return Status::Ok();
}

void MappedFile::Release(size_t upto) {
  if (!mapped_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t end = std::min(upto, size_) / page * page;
  if (end <= released_) return;
  ::madvise(const_cast<char*>(data_) + released_, end - released_, MADV_DONTNEED);
  released_ = end;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<char*>(data_), size_);
}

Status ReadFilePrefix(const std::string& path, size_t max_bytes, std::string* out) {
  out->clear();
  int fd = -1;
  Status opened = OpenRegularFile(path, &fd);
  if (!opened.ok()) return opened;
  out->resize(max_bytes);
  size_t done = 0;
  if (!ReadUpTo(fd, out->data(), max_bytes, &done)) {
    Status s = Errno(path, "cannot read");
    ::close(fd);
    return s;
  }
  ::close(fd);
  out->resize(done);
  return Status::Ok();
}

}  // namespace trainscope::ingest
