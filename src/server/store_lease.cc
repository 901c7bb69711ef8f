#include "server/store_lease.h"

#include <sys/stat.h>

#include <cstdio>
#include <list>
#include <mutex>

namespace trainscope::server {

namespace {

constexpr size_t kMaxIdleStores = 16;

struct IdleStore {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  std::unique_ptr<RunStore> store;
};

std::mutex& IdleMutex() {
  static std::mutex mu;
  return mu;
}

std::list<IdleStore>& IdleStores() {  // most recently handed back first
  static std::list<IdleStore> idle;
  return idle;
}

}  // namespace

void ReturnStore::operator()(RunStore* store) const {
  IdleStore back{path, dev, ino, std::unique_ptr<RunStore>(store)};
  std::list<IdleStore> evicted;  // closed outside the lock
  {
    std::lock_guard<std::mutex> lock(IdleMutex());
    auto& idle = IdleStores();
    idle.push_front(std::move(back));
    while (idle.size() > kMaxIdleStores) evicted.splice(evicted.begin(), idle, std::prev(idle.end()));
  }
}

void ForgetStores(const std::string& db_path) {
  std::list<IdleStore> forgotten;  // closed outside the lock
  std::lock_guard<std::mutex> lock(IdleMutex());
  auto& idle = IdleStores();
  for (auto it = idle.begin(); it != idle.end();) {
    auto next = std::next(it);
    if (it->path == db_path) forgotten.splice(forgotten.begin(), idle, it);
    it = next;
  }
}

Status StoreFor(const std::string& db_path, StoreLease* out) {
  struct stat st{};
  std::list<IdleStore> stale;  // closed outside the lock
  // A run in a database has no file to be replaced: its connection is kept as it is.
  if (!IsDatabaseLocation(db_path) && ::stat(db_path.c_str(), &st) != 0) {
    ForgetStores(db_path);
    return Status::NotFound(db_path + ": run store vanished");
  }
  std::unique_ptr<RunStore> store;
  {
    std::lock_guard<std::mutex> lock(IdleMutex());
    auto& idle = IdleStores();
    for (auto it = idle.begin(); it != idle.end();) {
      auto next = std::next(it);
      if (it->path == db_path) {
        if (it->dev == st.st_dev && it->ino == st.st_ino && !store) {
          store = std::move(it->store);
          idle.erase(it);
        } else if (it->dev != st.st_dev || it->ino != st.st_ino) {
          stale.splice(stale.begin(), idle, it);
        }
      }
      it = next;
    }
  }
  if (!store) {
    Status s = RunStore::OpenReadOnly(db_path, &store);
    if (!s.ok()) return s;
  }
  *out = StoreLease(store.release(), ReturnStore{db_path, st.st_dev, st.st_ino});
  return Status::Ok();
}

std::string StoreSignature(const std::string& db_path) {
  if (IsDatabaseLocation(db_path)) {
    // Every write of a run in a database moves its heartbeat; closing it sets its status.
    StoreLease store;
    RunMeta meta;
    if (!StoreFor(db_path, &store).ok() || !store->ReadMeta(&meta).ok()) return "";
    char part[96];
    std::snprintf(part, sizeof(part), "db|%.17g|", meta.heartbeat);
    return part + meta.status;
  }
  std::string signature;
  for (const char* suffix : {"", "-wal"}) {
    struct stat st{};
    if (::stat((db_path + suffix).c_str(), &st) != 0) {
      if (*suffix == '\0') return "";
      signature += "|-";
      continue;
    }
    char part[96];
    std::snprintf(part, sizeof(part), "|%llu:%lld:%lld.%09ld", static_cast<unsigned long long>(st.st_ino),
                  static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                  static_cast<long>(st.st_mtim.tv_nsec));
    signature += part;
  }
  return signature;
}

}  // namespace trainscope::server
