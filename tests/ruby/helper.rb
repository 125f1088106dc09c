# frozen_string_literal: true
# What the Ruby tests share: the binding loaded through plain
# `require "timeout"` (bindings/ruby/lib first on the load path, as a user
# runs it), the engine check, the scale, and child Ruby processes.
#
#   ruby -I build/release/bindings/ruby -I bindings/ruby/lib tests/ruby/test_timeout.rb
#   TMO_ENGINE=NAME        the engine (default wheel)
#   TMO_TEST_SCALE=0.1     shrinks the deadline race (as the C tests do)
# Exit 77 (ctest's skip) when the engine cannot be created here.
require "timeout"
require "rbconfig"
require "open3"

unless defined?(Tmo::PLANTED)
  abort "tests/ruby: `require \"timeout\"` loaded #{$LOADED_FEATURES.grep(/timeout/).inspect}, " \
        "not the tmo binding: put bindings/ruby/lib first on the load path"
end

ENGINE_ASKED = ENV.fetch("TMO_ENGINE", "").empty? ? "wheel" : ENV["TMO_ENGINE"]
begin
  ENGINE = Tmo.engine
rescue Tmo::Error => e
  puts "SKIP: engine #{ENGINE_ASKED} cannot be created here: #{e.message}"
  exit 77
end
puts "tests/ruby: engine #{ENGINE} (resolution #{Tmo.resolution_ns} ns), " \
     "ruby #{RUBY_VERSION}, planted defect: #{Tmo::PLANTED.inspect}"

require "test/unit"

module TmoTestHelper
  SCALE = begin
    v = ENV.fetch("TMO_TEST_SCALE", "1").to_f
    v > 0 && v <= 1 ? v : 1.0
  end

  # The load path this process found the binding on, for child processes.
  def self.load_flags
    so = $LOADED_FEATURES.grep(%r{/tmo/tmo_timeout\.so\z}).first
    lib = File.expand_path("../../bindings/ruby/lib", __dir__)
    ["-I", File.dirname(File.dirname(so)), "-I", lib]
  end

  # Run `script` in a fresh Ruby (same engine, same binding) and return its
  # output and status; the script starts with `require "timeout"` done.
  def ruby_child(script)
    out, st = Open3.capture2e(RbConfig.ruby, *TmoTestHelper.load_flags, "-rtimeout", "-e", script)
    [out, st]
  end

  def assert_child_says(expected, script)
    out, st = ruby_child(script)
    assert_true(st.success?, "child failed (#{st.inspect}):\n#{out}")
    assert_equal(expected, out.lines.last&.chomp, out)
  end

  # The Tmo.stats counters changed by the block.
  def stats_delta
    before = Tmo.stats
    yield
    after = Tmo.stats
    after.to_h { |k, v| [k, v.is_a?(Integer) ? v - before[k] : v] }
  end
end
