#include "server/run_registry.h"

#include <algorithm>
#include <filesystem>

#include "core/tag.h"
#include "store/run_store.h"

namespace trainscope::server {

namespace fs = std::filesystem;

namespace {

// Whether `path` is `root` itself or lies below it (both canonical).
bool IsInside(const std::string& root, const std::string& path) {
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/';
}

}  // namespace

Status RunRegistry::Open(const std::string& logdir, std::unique_ptr<RunRegistry>* registry) {
  if (IsDatabaseLocation(logdir)) {
    // A database (or one project of it): runs are rows, named "project/run"; no path to contain.
    if (logdir.find('#') != std::string::npos && logdir.find('/', logdir.find('#')) != std::string::npos) {
      return Status::InvalidArgument(logdir + ": expected a database (or #project), not one run");
    }
    registry->reset(new RunRegistry(logdir));
    return (*registry)->Refresh();
  }
  std::error_code ec;
  if (!fs::is_directory(logdir, ec)) {
    return Status::InvalidArgument(logdir + ": not a directory (expected a logdir holding runs)");
  }
  const fs::path root = fs::canonical(logdir, ec);
  if (ec) return Status::IOError(logdir + ": cannot resolve: " + ec.message());
  std::string root_string = root.string();
  while (root_string.size() > 1 && root_string.back() == '/') root_string.pop_back();
  registry->reset(new RunRegistry(root_string));
  return (*registry)->Refresh();
}

Status RunRegistry::ValidateName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("run name is empty");
  if (name.size() > kMaxRunNameBytes) {
    return Status::InvalidArgument("run name is " + std::to_string(name.size()) + " bytes, at most " +
                         std::to_string(kMaxRunNameBytes) + " allowed");
  }
  if (!IsValidUtf8(name)) return Status::InvalidArgument("run name is not valid UTF-8");
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '\\') return Status::InvalidArgument("run name holds a control character or a backslash");
  }
  if (name.front() == '/') return Status::InvalidArgument("run name must be relative to the logdir");
  size_t begin = 0;
  while (begin <= name.size()) {
    const size_t end = std::min(name.find('/', begin), name.size());
    const std::string_view part = name.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument("run name has an empty, '.' or '..' component");
    }
    begin = end + 1;
  }
  return Status::Ok();
}

std::string RunRegistry::ContainedStorePath(const std::string& relative_name) const {
  if (IsDatabaseLocation(root_)) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool listed = std::binary_search(names_.begin(), names_.end(), relative_name);
    return listed ? root_.substr(0, root_.find('#')) + "#" + relative_name : "";
  }
  std::error_code ec;
  const fs::path dir = fs::canonical(fs::path(root_) / relative_name, ec);
  if (ec || !IsInside(root_, dir.string())) return "";
  const fs::path db = fs::canonical(dir / kStoreFileName, ec);
  if (ec || !IsInside(root_, db.string()) || !fs::is_regular_file(db, ec)) return "";
  return db.string();
}

Status RunRegistry::Refresh() {
  std::vector<RunEntry> runs;
  Status s = ListRuns(root_, &runs);
  if (!s.ok()) return s;
  std::vector<std::string> names;
  names.reserve(runs.size());
  const bool database = IsDatabaseLocation(root_);
  for (const RunEntry& run : runs) {
    if (!ValidateName(run.name).ok()) continue;                         // a name the API could not address
    if (!database && ContainedStorePath(run.name).empty()) continue;  // symlinked out of the logdir
    names.push_back(run.name);
  }
  std::sort(names.begin(), names.end());
  std::lock_guard<std::mutex> lock(mu_);
  names_ = std::move(names);
  return Status::Ok();
}

std::vector<std::string> RunRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_;
}

RunRegistry::Resolved RunRegistry::Resolve(std::string_view name) {
  Resolved out;
  Status s = ValidateName(name);
  if (!s.ok()) {
    out.http_status = 400;
    out.error = s.message();
    return out;
  }
  const std::string key(name);
  auto known = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return std::binary_search(names_.begin(), names_.end(), key);
  };
  if (!known()) Refresh();
  // Checked again even for a known name: the directory may have been swapped for a symlink.
  out.db_path = ContainedStorePath(key);
  if (out.db_path.empty() && IsDatabaseLocation(root_)) {
    out.http_status = 404;
    out.error = "no run '" + key + "' in the database";
    return out;
  }
  if (out.db_path.empty()) {
    std::error_code ec;
    const bool exists = fs::exists(fs::path(root_) / key / kStoreFileName, ec);
    out.http_status = exists ? 403 : 404;
    out.error = exists ? "run '" + key + "' resolves outside the logdir" : "no run '" + key + "' in the logdir";
    return out;
  }
  if (!known()) {
    out.http_status = 404;
    out.error = "no run '" + key + "' in the logdir";
    out.db_path.clear();
  }
  return out;
}

}  // namespace trainscope::server
