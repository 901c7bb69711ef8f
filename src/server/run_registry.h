// RunRegistry: which runs of a logdir the dashboard may read, and where their stores are.
//
// The logdir is canonicalised once, at Open. A run is a directory below it holding a
// trainscope.db (store/run_store.h ListRuns). A run name from a request is only ever
// mapped to a file through Resolve, which refuses malformed names (absolute, "..", ".",
// empty components, control characters, over kMaxRunNameBytes), names of runs that do not
// exist, and anything whose canonical path (symlinks resolved) leaves the logdir. Nothing
// outside the logdir is ever opened.
//
// Thread-safe: Refresh may run on one thread while others Resolve.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainscope::server {

inline constexpr size_t kMaxRunNameBytes = 512;

class RunRegistry {
 public:
  // Fails when logdir is not an existing directory.
  static Status Open(const std::string& logdir, std::unique_ptr<RunRegistry>* registry);

  // The canonical logdir (no symlinks, no trailing slash).
  const std::string& root() const { return root_; }

  // Rescans the logdir for runs. Runs whose store resolves outside the logdir (a symlinked
  // trainscope.db) are left out.
  Status Refresh();
  // The run names found by the last Refresh, sorted.
  std::vector<std::string> Names() const;

  // Why a name was refused, as an HTTP status: 400 malformed, 403 outside the logdir,
  // 404 no such run.
  struct Resolved {
    int http_status = 200;
    std::string db_path;  // canonical path of the run's trainscope.db when http_status is 200
    std::string error;
  };
  // Maps a run name to its store. A name not seen by the last Refresh triggers one more
  // Refresh (a run created since) before being refused.
  Resolved Resolve(std::string_view name);

  // Syntax check only: 1..kMaxRunNameBytes bytes of UTF-8 without control characters or
  // backslashes, relative, '/'-separated components none of which is empty, "." or "..".
  static Status ValidateName(std::string_view name);

 private:
  explicit RunRegistry(std::string root) : root_(std::move(root)) {}
  // Canonical store path of a run directory below root_, or "" if it leaves root_.
  std::string ContainedStorePath(const std::string& relative_name) const;

  const std::string root_;
  mutable std::mutex mu_;
  std::vector<std::string> names_;  // sorted
};

}  // namespace trainscope::server
