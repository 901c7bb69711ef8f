// The subcommands of the trainscope CLI, one file each. Each Add*Command registers its
// subcommand on the app; its callback stores the process exit code in *exit_code
// (0 ok, 1 findings at or above --fail-on, 2 error).
#pragma once

#include <CLI/CLI.hpp>

namespace trainscope::cli {

void AddRunsCommand(CLI::App& app, int* exit_code);
void AddShowCommand(CLI::App& app, int* exit_code);
void AddDiagnoseCommand(CLI::App& app, int* exit_code);
void AddDemoCommand(CLI::App& app, int* exit_code);
void AddReportCommand(CLI::App& app, int* exit_code);
void AddImportCommand(CLI::App& app, int* exit_code);
void AddPushCommand(CLI::App& app, int* exit_code);
void AddExportCommand(CLI::App& app, int* exit_code);
void AddServeCommand(CLI::App& app, int* exit_code);
void AddNumericsCommand(CLI::App& app, int* exit_code);
void AddTraceCommand(CLI::App& app, int* exit_code);
void AddPerfCommand(CLI::App& app, int* exit_code);

// Directory holding the running trainscope executable.
std::string ExecutableDir();

}  // namespace trainscope::cli
