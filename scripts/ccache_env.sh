# Sourced by scripts/setup.sh, scripts/test.sh and test/fuzz/run.sh (from the repository root): compile
# through ccache when it is installed (setup.sh installs it), so a fresh clone on a machine that built the
# same sources before (CI after a session) recompiles only what changed. CCACHE_BASEDIR makes the clone's
# absolute paths relative and CCACHE_NOHASHDIR leaves its directory out of the hash: clones at different
# paths share the cache. CMake (3.17+) takes CMAKE_CXX_COMPILER_LAUNCHER from the environment when it
# configures a new build directory (the release, sanitizer and Python extension builds); ccache_prefix is
# for compiler commands run directly (the fuzz objects). SPARSE24_NO_CCACHE=1 compiles without it.
ccache_prefix=()
if [ "${SPARSE24_NO_CCACHE:-0}" != 1 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CMAKE_CXX_COMPILER_LAUNCHER=ccache
  ccache_prefix=(ccache)
fi
