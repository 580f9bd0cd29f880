// sparse24.Error (a ValueError) for every sparse24::Error, and sparse24.FileError (also an OSError) for the
// ones about a file the system could not open, read or write (the library's messages from io/file.cc).
#include <Python.h>

#include <string>

#include "common.h"
#include "sparse24/error.h"

namespace sparse24::py {
namespace {

PyObject* g_error = nullptr;
PyObject* g_file_error = nullptr;

bool is_file_problem(const std::string& what) {
  for (const char* p : {"cannot open '", "cannot stat '", "cannot read '", "cannot map '", "cannot write '"})
    if (what.find(p) != std::string::npos) return true;
  return what.find("' is not a regular file") != std::string::npos;
}

}  // namespace

void register_errors(nb::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("sparse24.Error",
                                      "Any error the sparse24 library reports (its one-line message).",
                                      PyExc_ValueError, nullptr);
  nb::object bases = nb::make_tuple(nb::handle(g_error), nb::handle(PyExc_OSError));
  g_file_error = PyErr_NewExceptionWithDoc("sparse24.FileError",
                                           "A file could not be opened, read or written (also an OSError).",
                                           bases.ptr(), nullptr);
  m.attr("Error") = nb::handle(g_error);
  m.attr("FileError") = nb::handle(g_file_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const sparse24::Error& e) {
      PyErr_SetString(is_file_problem(e.what()) ? g_file_error : g_error, e.what());
    }
  });
}

}  // namespace sparse24::py
