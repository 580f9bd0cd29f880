# Sourced by scripts/setup.sh, scripts/test.sh and test/fuzz/run.sh (from the repository root): compile
# through ccache when it is installed (setup.sh installs it), so a fresh clone on a machine that built the
# same sources before (CI after a session) recompiles only what changed. CCACHE_BASEDIR makes the clone's
# absolute paths relative and CCACHE_NOHASHDIR leaves its directory out of the hash: clones at different
# paths share the cache. SPARSE24_NO_CCACHE=1 compiles without it.
# Sets ccache_cmake (arguments for cmake's configure step) and ccache_prefix (a compiler command prefix).
ccache_cmake=()
ccache_prefix=()
if [ "${SPARSE24_NO_CCACHE:-0}" != 1 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  ccache_cmake=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  ccache_prefix=(ccache)
fi
