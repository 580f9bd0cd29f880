// The checkout this tool was built from. The only file compiled with its path (SPARSE24_SOURCE_DIR), so a
// build from another clone recompiles only this one (ccache, scripts/ccache_env.sh).
#include <cstdlib>
#include <string>

#include "commands.h"

namespace sparse24::cli {

std::string source_dir() { return SPARSE24_SOURCE_DIR; }

std::string default_python() {
  if (const char* p = std::getenv("SPARSE24_PYTHON")) return p;
  return source_dir() + "/.venv/bin/python";
}

}  // namespace sparse24::cli
