// `mla`: the command-line front end. Subcommands live in cmd_<name>.cc and register themselves.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/env_check.h"
#include "dist/communicator.h"

namespace mla::cli {
std::vector<CommandEntry>& command_table() {
  static std::vector<CommandEntry> table;
  return table;
}
}  // namespace mla::cli

int main(int argc, char** argv) {
  if (const mla::Status env = mla::check_environment(); !env.ok()) {
    std::fprintf(stderr, "error: %s\n", env.message().c_str());
    return 2;
  }
  // Started by mpirun as one of several ranks: MPI first (it may consume its own arguments);
  // alone, nothing happens here (docs/ARCHITECTURE.md §Ranks).
  if (auto w = mla::dist::init_world(&argc, &argv); !w.ok()) {
    std::fprintf(stderr, "error: %s\n", w.status().message().c_str());
    return 2;
  }
  struct FinalizeAtExit {
    ~FinalizeAtExit() { mla::dist::finalize_world(); }
  } finalize;
  CLI::App app{"mla: an inference engine for Multi-head Latent Attention models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  int exit_code = 0;
  auto& table = mla::cli::command_table();
  std::sort(table.begin(), table.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : table) c.fn(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help or "error: ..."; 0 for --help, non-zero otherwise
  } catch (const std::exception& e) {
    // Errors are Status values; what still throws is the runtime refusing a resource (a thread,
    // memory): one line and a failing exit, never terminate()'s abort.
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
