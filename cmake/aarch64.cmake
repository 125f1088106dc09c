# Cross toolchain for arm64 (the `arm64` preset): Debian's cross compiler
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu: libc, libgcc and libstdc++
# in /usr/aarch64-linux-gnu) against a sysroot of the arm64 library
# packages unpacked by scripts/arm64-sysroot (default build/arm64-sysroot;
# -DTMO_ARM64_SYSROOT=DIR or the environment's TMO_ARM64_SYSROOT to use
# another).  Configuring makes the sysroot when it is missing.  Tests run
# under qemu-aarch64 (package qemu-user): CMAKE_CROSSCOMPILING_EMULATOR,
# which ctest puts before every test command that names a target.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

get_filename_component(_tmo_root ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
if(NOT TMO_ARM64_SYSROOT)
  if(DEFINED ENV{TMO_ARM64_SYSROOT})
    set(TMO_ARM64_SYSROOT $ENV{TMO_ARM64_SYSROOT})
  else()
    set(TMO_ARM64_SYSROOT ${_tmo_root}/build/arm64-sysroot)
  endif()
endif()
set(TMO_ARM64_SYSROOT ${TMO_ARM64_SYSROOT} CACHE PATH "arm64 packages unpacked (scripts/arm64-sysroot)")
# try_compile projects read this file again: pass the sysroot on to them.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TMO_ARM64_SYSROOT)
if(NOT EXISTS ${TMO_ARM64_SYSROOT}/.tmo-packages)
  message(STATUS "arm64: making the sysroot ${TMO_ARM64_SYSROOT} (scripts/arm64-sysroot)")
  execute_process(COMMAND ${_tmo_root}/scripts/arm64-sysroot ${TMO_ARM64_SYSROOT}
                  RESULT_VARIABLE _tmo_rc)
  if(NOT _tmo_rc EQUAL 0)
    message(FATAL_ERROR "arm64: scripts/arm64-sysroot failed (${_tmo_rc})")
  endif()
endif()

# An x86 builtin reached on arm64 (__builtin_ia32_pause, ...) is to gcc an
# undeclared function: a warning, and a shared library links with the
# symbol undefined.  Here it is an error, so the arm64 build catches it.
set(CMAKE_C_FLAGS_INIT "-Werror=implicit-function-declaration")

set(_tmo_libs ${TMO_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${TMO_ARM64_SYSROOT} /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config reads the sysroot's .pc files only, and prefixes their paths.
set(ENV{PKG_CONFIG_LIBDIR} ${_tmo_libs}/pkgconfig:${TMO_ARM64_SYSROOT}/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${TMO_ARM64_SYSROOT})
set(ENV{PKG_CONFIG_PATH} "")
# A library's own dependencies (glib's pcre2, ...) are found at link time.
set(_tmo_link "-Wl,-rpath-link,${_tmo_libs}:${TMO_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_tmo_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_tmo_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_tmo_link}")

# qemu-aarch64: the cross libc as its prefix (-L), the sysroot's libraries
# for the guest's loader.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu
    -E LD_LIBRARY_PATH=${_tmo_libs}:${TMO_ARM64_SYSROOT}/lib/aarch64-linux-gnu)
