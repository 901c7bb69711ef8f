// Refusing paths that are not regular files: reading a FIFO, a device or a socket waits for
// a writer or never ends. The readers of runs (store) and of other tools' logs (ingest)
// check their files here, so both say the same thing.
#pragma once

#include <string>

#include "core/status.h"

namespace trainscope {

// Refuses a path that is not a regular file, naming it, what it is and what was expected.
Status CheckRegularFile(const std::string& path);
// That refusal for a file of stat mode `mode`.
Status NotARegularFile(const std::string& path, unsigned int mode);

}  // namespace trainscope
