# The arm64 cross build (preset arm64, docs/arm64.md).  Included by
# tests/CMakeLists.txt.  In a cross build every test executable of this
# directory runs under the emulator, also where a script runs it
# (cmake/cross_run.cmake): wrapped once this directory is complete.
cmake_language(DEFER CALL tmo_cross_wrap_here)
