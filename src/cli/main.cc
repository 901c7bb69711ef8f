// trainscope: watch deep-learning training, find what goes wrong, show it.
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"trainscope: finds what goes wrong in deep-learning training, and shows it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainscope 0.1.0");
  int exit_code = 0;
  trainscope::cli::AddRunsCommand(app, &exit_code);
  trainscope::cli::AddShowCommand(app, &exit_code);
  trainscope::cli::AddDiagnoseCommand(app, &exit_code);
  trainscope::cli::AddDemoCommand(app, &exit_code);
  trainscope::cli::AddReportCommand(app, &exit_code);
  trainscope::cli::AddPushCommand(app, &exit_code);
#ifdef TRAINSCOPE_WITH_INGEST
  trainscope::cli::AddImportCommand(app, &exit_code);
  trainscope::cli::AddExportCommand(app, &exit_code);
#endif
#ifdef TRAINSCOPE_WITH_SERVER
  trainscope::cli::AddServeCommand(app, &exit_code);
#endif
#ifdef TRAINSCOPE_WITH_PERF
  trainscope::cli::AddTraceCommand(app, &exit_code);
  trainscope::cli::AddPerfCommand(app, &exit_code);
#endif
#ifdef TRAINSCOPE_WITH_NUMERICS
  trainscope::cli::AddNumericsCommand(app, &exit_code);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
