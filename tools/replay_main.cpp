// cachalot-replay: replays RMM-format allocation traces on cachalot (see trace/cli.hpp).
#include <iostream>
#include <string>
#include <vector>

#include "trace/cli.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return cachalot::tools::replay_cli(args, std::cout, std::cerr);
}
