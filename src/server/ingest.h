// The ingest API of a team server (docs/server.md): ranks' forwarders (store/forwarder.h)
// and `trainscope push` send a run's records to
//
//   POST /api/v1/ingest?project=P&run=R   (Authorization: Bearer TOKEN with write scope;
//                                          body JSON, optionally Content-Encoding: gzip)
//   GET  /api/v1/positions?project=P&run=R
//
// A batch says, for each stream it carries, where it starts: a scalar series' points from
// the `from`-th point of the series, a table's rows by the source's row id. The server holds
// each stream's position and advances it in the transaction that stores the records, so a
// batch sent twice (a retry after a lost answer, a second server given the same batch) is
// stored once, and a batch past a gap is refused (409) with the positions to resume from.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/api.h"
#include "store/run_store.h"

namespace trainscope::server {

inline constexpr int kIngestVersion = 1;

class Ingest {
 public:
  // `database`: postgresql://host[:port]/database (runs are made in it as batches come).
  explicit Ingest(std::string database) : database_(std::move(database)) {}
  ApiReply Post(const std::string& project, const std::string& run, const std::string& body);
  ApiReply Positions(const std::string& project, const std::string& run);

 private:
  struct Writer {
    std::mutex mu;  // a RunStore is single-threaded: one batch of a run at a time here
    std::unique_ptr<RunStore> store;
  };
  Status WriterFor(const std::string& project, const std::string& run, std::shared_ptr<Writer>* out);

  std::string database_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Writer>> writers_;  // by "project/run"
};

}  // namespace trainscope::server
