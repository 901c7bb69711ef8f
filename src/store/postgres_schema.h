// The PostgreSQL store's schema, its versions and the per-run partitions.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "store/pg_connection.h"

namespace trainscope {

// The tables holding a run's bulk rows, one partition per run.
extern const char* const kPartitionedTables[4];
// The schema version this binary writes and reads.
int KnownSchemaVersion();
// Brings the database's schema to KnownSchemaVersion(); refuses a newer one.
Status MigrateSchema(PgConnection* db);
std::string PartitionName(const char* table, int64_t run_id);
// The statements that make, and drop, a run's partitions.
std::string PartitionsSql(int64_t run_id);
std::string DropPartitionsSql(int64_t run_id);

}  // namespace trainscope
