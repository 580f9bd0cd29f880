// sparse24._core: the extension module behind the Python package sparse24 (python/sparse24/).
#include "common.h"

NB_MODULE(_core, m) {
  m.doc() = "sparse24's C++ library, engine and tokenizer (use the package sparse24, not this module)";
  sparse24::py::register_errors(m);
  sparse24::py::register_arrays(m);
  sparse24::py::register_files(m);
  sparse24::py::register_engine(m);
  sparse24::py::register_decoder(m);
  sparse24::py::register_prune(m);
}
