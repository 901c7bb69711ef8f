#include "cli/rank_groups.h"

#include <algorithm>
#include <filesystem>
#include <map>

namespace trainscope::cli {

namespace fs = std::filesystem;

int RankOfRunDir(const std::string& dir) {
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  const std::string prefix = "rank-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || name.size() > prefix.size() + 9) {
    return -1;
  }
  int rank = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    rank = rank * 10 + (name[i] - '0');
  }
  return rank;
}

std::vector<RunGroup> GroupByRun(const std::vector<std::string>& dirs) {
  std::vector<RunGroup> groups;
  std::map<std::string, size_t> by_parent;  // normalised parent -> group index
  for (size_t i = 0; i < dirs.size(); ++i) {
    const int rank = RankOfRunDir(dirs[i]);
    if (rank < 0) {
      groups.push_back({dirs[i], {i}, {}});
      continue;
    }
    fs::path parent = fs::path(dirs[i]).lexically_normal();
    if (parent.filename().empty()) parent = parent.parent_path();
    parent = parent.parent_path();
    const std::string key = parent.empty() ? "." : parent.string();
    auto [it, added] = by_parent.emplace(key, groups.size());
    if (added) groups.push_back({key, {}, {}});
    groups[it->second].members.push_back(i);
    groups[it->second].ranks.push_back(rank);
  }
  for (RunGroup& g : groups) {  // members by rank
    std::vector<size_t> order(g.members.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    if (g.ranks.empty()) continue;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return g.ranks[a] < g.ranks[b]; });
    RunGroup sorted{g.dir, {}, {}};
    for (size_t k : order) sorted.members.push_back(g.members[k]), sorted.ranks.push_back(g.ranks[k]);
    g = std::move(sorted);
  }
  return groups;
}

bool SameDirectory(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  const fs::path pa = fs::weakly_canonical(a, ec1), pb = fs::weakly_canonical(b, ec2);
  if (ec1 || ec2) return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
  return pa == pb;
}

}  // namespace trainscope::cli
