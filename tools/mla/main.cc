// `mla`: the command-line front end. Subcommands live in cmd_<name>.cc.
#include <cstdio>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mla: an inference engine for Multi-head Latent Attention models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  int exit_code = 0;
  mla::cli::register_verify(app, &exit_code);
  mla::cli::register_memory(app, &exit_code);
  mla::cli::register_attention(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help or "error: ..." and gives 0 for --help, non-zero otherwise
  }
  return exit_code;
}
