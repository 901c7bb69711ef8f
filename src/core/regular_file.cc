#include "core/regular_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace trainscope {

Status NotARegularFile(const std::string& path, unsigned int mode) {
  const char* kind = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO (named pipe)"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "a special file";
  return Status::InvalidArgument(path + ": " + kind +
                                 ", not a regular file: expected a log file, a run directory or a trainscope.db");
}

Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return NotARegularFile(path, st.st_mode);
  return Status::Ok();
}

}  // namespace trainscope
