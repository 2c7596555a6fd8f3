// The cachalot-replay command line, as a function so that tests can run it in-process:
//   cachalot-replay [--config STR] [--repeat N] [--json] [--plot FILE.svg]
//                   [--capacity-factor F] [--one-thread] [--no-baseline] TRACE.csv...
// Exit status: 0 on success, 2 for a usage error, a bad config or a malformed trace (the
// message names the file and line), 1 when the backend fails.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace cachalot::tools {

/// Runs cachalot-replay with `args` (without the program name); returns the exit status.
int replay_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace cachalot::tools
