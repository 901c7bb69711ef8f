// Facts about the process a run is recorded from, which the callers that open a Recorder
// (the Python module, the LibTorch client) give it in Recorder::Options.
#pragma once

#include <string>

namespace trainscope {

// This machine's host name.
std::string HostName();
// The commit checked out in the git work tree holding `dir` (read from .git, no git
// process), or "" when there is none.
std::string GitCommit(const std::string& dir);

}  // namespace trainscope
