// The cachalot-replay command line, as a function so that tests can run it in-process:
//   cachalot-replay [--config STR] [--repeat N] [--json] [--plot FILE.svg]
//                   [--timeline FILE.csv] [--min-capacity]
//                   [--capacity-factor F | --capacity SIZE] [--one-thread] [--no-baseline]
//                   [--tune [--tune-weight SIZE] [--jobs N]] [--version] [--]
//                   TRACE.csv... ("-" is standard input; every option also takes --opt=value)
// Exit status: 0 on success, 2 for a usage error, a bad config, an out-of-range number, an
// unwritable plot path or a malformed or unreadable trace (the message names the file and line,
// or the operating system's reason), 1 when the backend fails.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace cachalot::tools {

/// Runs cachalot-replay with `args` (without the program name); returns the exit status.
int replay_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace cachalot::tools
