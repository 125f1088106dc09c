# frozen_string_literal: true
# Timeout on tmo's engines: the public surface of ruby/timeout
# (Timeout.timeout, Timeout::Error, Timeout::ExitException, Timeout::VERSION,
# the private #timeout for `include Timeout`), arm and cancel in C on a tmo
# engine (TMO_ENGINE=NAME, default wheel).  docs/ruby.md.
#
# The extension, tmo/tmo_timeout.so, is found on the load path (installed,
# or a build directory given with -I), else in TMO_RUBY_EXT_DIR, else in
# this tree's build/release/bindings/ruby (what scripts/ruby-build makes).

if defined?(::Timeout::VERSION) && !defined?(::Tmo::PLANTED)
  raise LoadError, "tmo/timeout: Ruby's own timeout #{::Timeout::VERSION} is already loaded; " \
                   "require tmo/timeout before it (or run with -I bindings/ruby/lib)"
end

begin
  require "tmo/tmo_timeout"
rescue LoadError
  dir = ENV["TMO_RUBY_EXT_DIR"] || File.expand_path("../../../../build/release/bindings/ruby", __dir__)
  so = File.join(dir, "tmo", "tmo_timeout.so")
  raise LoadError, "tmo/timeout: the extension is not built (no #{so}): run scripts/ruby-build" unless File.file?(so)
  require so
end

# A later `require "timeout"` that reaches Ruby's own timeout.rb (a load path
# without bindings/ruby/lib) must not redefine Timeout over this one.
require "rbconfig"
$LOADED_FEATURES << File.join(RbConfig::CONFIG["rubylibdir"], "timeout.rb")
