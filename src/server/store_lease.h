// The server's open run stores. A RunStore is single-threaded, so a request leases one for
// itself and hands it back when done (StoreLease's deleter). Stores handed back stay open
// for the next request of the same run: the most recently used few. Open handles, and the
// SQLite page caches behind them, are then bounded by the requests in flight plus that,
// whatever the number of runs and threads (a cache of 64 stores per server thread reached
// 2.3 GB RSS after 10,000 requests over 30 runs).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "store/run_store.h"

namespace trainscope::server {

struct ReturnStore {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  void operator()(RunStore* store) const;
};
using StoreLease = std::unique_ptr<RunStore, ReturnStore>;

// Leases the store at db_path (a run's .db file or its location in a database), opened
// read-only. A store whose file was replaced (another inode) is opened afresh.
Status StoreFor(const std::string& db_path, StoreLease* out);

// Closes the idle stores of db_path (after a failed read: the next request reopens).
void ForgetStores(const std::string& db_path);

// A string that changes whenever the store at db_path (or its WAL) is written: sizes and
// modification times (for a run in a database, its heartbeat and status). Empty when the
// file is gone.
std::string StoreSignature(const std::string& db_path);

}  // namespace trainscope::server
