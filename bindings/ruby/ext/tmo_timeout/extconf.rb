# frozen_string_literal: true
# Makefile for tmo/tmo_timeout.so, the C extension behind bindings/ruby/lib.
#
# Two ways to find libtmo:
#   TMO_LIB=path/to/libtmo.a   the static library a CMake build of this tree
#                              made (scripts/ruby-build and the CMake target
#                              tmo-ruby pass it); the headers are this
#                              tree's include/
#   otherwise                  an installed tmo, through pkg-config tmo
#                              (--static: libtmo is a static library)
require "mkmf"

root = File.expand_path("../../../..", __dir__)
lib = ENV["TMO_LIB"]
if lib && !lib.empty?
  abort "extconf: TMO_LIB=#{lib} does not exist" unless File.file?(lib)
  $INCFLAGS << " -I#{root}/include"
  $LOCAL_LIBS << " #{lib}"
  # libtmo's private libraries, as cmake/tmo.pc.in lists them (the peer
  # engines' libev, libuv, GLib and liburing included).
  deps = `pkg-config --libs libevent_core libevent_pthreads ck libuv glib-2.0 liburing`.strip
  abort "extconf: pkg-config cannot find libevent, ck, libuv, glib-2.0 or liburing (scripts/deps)" unless $?.success?
  $libs << " #{deps} -lev -lpthread -lrt -ldl"
else
  cflags = `pkg-config --cflags tmo`.strip
  libs = `pkg-config --static --libs tmo`.strip
  abort "extconf: pkg-config cannot find tmo: install it, or set TMO_LIB" unless $?.success?
  $INCFLAGS << " #{cflags}"
  $libs << " #{libs}"
end
abort "extconf: tmo/tmo.h not found" unless have_header("tmo/tmo.h")
$CFLAGS << " -std=gnu11 -Wall -Wextra -Wno-unused-parameter"
create_makefile("tmo/tmo_timeout")
