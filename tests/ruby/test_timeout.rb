# frozen_string_literal: false
# ruby/timeout's behaviours, one case each, on the tmo engine TMO_ENGINE
# (helper.rb; ctest runs this file once per engine: tests/ruby/ruby.cmake).
# The cases synchronise on state: a `sleep` inside a timed-out block is what
# is being interrupted, never a handshake.
require_relative "helper"
require_relative "process_cases"
require_relative "race_cases"

class TestTmoTimeout < Test::Unit::TestCase
  include TmoTestHelper

  class MyErrorOuter < StandardError; end
  class MyErrorInner < StandardError; end

  def test_public_surface_is_ruby_timeouts
    assert_equal %i[Error ExitException VERSION], Timeout.constants.sort
    assert_equal RuntimeError, Timeout::Error.superclass
    assert_equal Exception, Timeout::ExitException.superclass
    assert_equal [:timeout], Timeout.singleton_methods.sort
    assert_equal [], Timeout.public_instance_methods(false)
    assert_equal [:timeout], Timeout.private_instance_methods(false)
    assert_match(/\A\d+\.\d+\.\d+\z/, Timeout::VERSION)
  end

  def test_engine_is_the_one_asked_for_and_listed
    assert_equal ENGINE_ASKED, ENGINE
    assert_include Tmo.engines, ENGINE
  end

  def test_block_runs_in_callers_thread
    assert_equal Thread.current, Timeout.timeout(10) { Thread.current }
  end

  def test_block_runs_in_callers_fiber
    require "fiber"
    assert_equal Fiber.current, Timeout.timeout(10) { Fiber.current }
  end

  def test_value_is_returned_and_the_timer_was_armed
    d = stats_delta { assert_equal :ok, Timeout.timeout(1) { :ok } }
    assert_equal 1, d[:armed]
  end

  def test_zero_means_no_timeout
    d = stats_delta { assert_equal :ok, Timeout.timeout(0) { :ok } }
    assert_equal 0, d[:armed]
    assert_equal :ok, Timeout.timeout(0.0) { :ok }
  end

  def test_nil_means_no_timeout
    d = stats_delta { assert_equal [nil, :ok], Timeout.timeout(nil) { |s| [s, :ok] } }
    assert_equal 0, d[:armed]
  end

  def test_negative_is_an_argument_error
    assert_raise_with_message(ArgumentError, /non-negative/) { Timeout.timeout(-1) { :no } }
    assert_raise(ArgumentError) { Timeout.timeout(-0.5) { :no } }
    assert_raise(ArgumentError) { Timeout.timeout(Rational(-1, 2)) { :no } }
  end

  def test_non_numeric_fails_as_in_ruby_timeout
    def (n = Object.new).zero?; false; end
    assert_raise(TypeError, "[ruby-dev:41010]") { Timeout.timeout(n) { sleep 0.1 } }
    assert_raise(NoMethodError) { Timeout.timeout(Object.new) { :no } }
  end

  def test_block_gets_sec
    assert_equal [5, :ok], Timeout.timeout(5) { |s| [s, :ok] }
    r = Rational(1, 3)
    assert_same r, Timeout.timeout(r) { |s| s }
  end

  def test_include_timeout_gives_a_private_timeout
    c = Class.new do
      include Timeout
      def run = timeout(1) { :ok }
    end
    assert_equal :ok, c.new.run
    assert_raise(NoMethodError) { c.new.timeout(1) { :ok } }
  end

  def test_queue_pop_is_interrupted
    q = Thread::Queue.new
    assert_raise(Timeout::Error, "[ruby-dev:32935]") { Timeout.timeout(0.01) { q.pop } }
  end

  def test_sleep_is_interrupted
    assert_raise(Timeout::Error) { Timeout.timeout(0.01) { sleep } }
  end

  def test_busy_loop_is_interrupted
    assert_raise(Timeout::Error) { Timeout.timeout(0.1) { nil while true } }
  end

  def test_enumerator_next_is_interrupted
    e = (o = Object.new).to_enum
    def o.each = sleep
    assert_raise_with_message(Timeout::Error, "execution expired", "[Bug #9380]") do
      Timeout.timeout(0.01) { e.next }
    end
  end

  def test_nested_outer_expires
    a = nil
    assert_raise(Timeout::Error) do
      Timeout.timeout(0.1) do
        Timeout.timeout(30) { nil while true }
        a = 1
      end
    end
    assert_nil a
  end

  def test_nested_error_identity
    e = assert_raise(MyErrorOuter) do
      Timeout.timeout(0.1, MyErrorOuter) { Timeout.timeout(30, MyErrorInner) { nil while true } }
    end
    assert_equal MyErrorOuter, e.class
  end

  def test_nested_inner_error_bubbles_up
    e = assert_raise(Timeout::ExitException) do
      Timeout.timeout(30) { Timeout.timeout(30) { raise Timeout::ExitException, "inner message" } }
    end
    assert_equal "inner message", e.message
  end

  def test_bug8730_rescue_standard_error_never_sees_it
    seen = nil
    assert_raise_with_message(Timeout::Error, "execution expired", "[Bug #8730]") do
      Timeout.timeout(0.01) do
        sleep
      rescue => e
        seen = e
      end
    end
    assert_nil seen
  end

  def test_bug8730_rescue_exception_sees_exit_exception
    seen = nil
    e = assert_raise_with_message(Timeout::Error, "execution expired") do
      Timeout.timeout(0.01) do
        sleep
      rescue Exception => x
        seen = x
        raise
      end
    end
    assert_equal Timeout::ExitException, seen.class
    assert_same seen, e.cause
  end

  def test_custom_class
    err = Class.new(StandardError) { def initialize(msg) = super }
    assert_equal :ok, Timeout.timeout(100, err) { :ok }, "[Bug #9354]"
    assert_raise_with_message(err, "execution expired") { Timeout.timeout(0.01, err) { sleep } }
  end

  def test_custom_class_and_message
    err = Class.new(StandardError)
    assert_raise_with_message(err, "connection to ruby-lang.org expired") do
      Timeout.timeout(0.01, err, "connection to ruby-lang.org expired") { sleep }
    end
    assert_raise_with_message(Timeout::Error, "mine") { Timeout.timeout(0.01, nil, "mine") { sleep } }
  end

  def test_custom_class_rescued_inside_the_block
    exc = Class.new(RuntimeError)
    e = nil
    assert_nothing_raised(exc) do
      Timeout.timeout(0.01, exc) do
        sleep
      rescue exc => e
      end
    end
    assert_raise_with_message(exc, "execution expired") { raise e if e }
  end

  def test_blocks_own_timeout_error_passes_through_unchanged
    mine = Timeout::Error.new("boon")
    e = assert_raise_with_message(Timeout::Error, "boon") do
      Timeout.timeout(10, Timeout::Error) { raise mine }
    end
    assert_same mine, e
    assert_raise_with_message(Timeout::Error, "boon") { Timeout.timeout(10) { raise Timeout::Error, "boon" } }
  end

  def test_handle_interrupt_defers
    ok = false
    assert_raise(Timeout::Error) do
      Thread.handle_interrupt(Timeout::ExitException => :never) do
        Timeout.timeout(0.01) do
          Thread.pass until Thread.pending_interrupt? # the expiry came, masked
          ok = true
          Thread.handle_interrupt(Timeout::ExitException => :on_blocking) { sleep }
        end
      end
    end
    assert(ok, "[Bug #11344]")
  end

  # The expiry came while masked and the block then returned: the call
  # returns the block's value and leaves nothing pending.
  def test_masked_expiry_is_withdrawn_when_the_block_returns
    d = stats_delta do
      r = Thread.handle_interrupt(Timeout::ExitException => :never) do
        v = Timeout.timeout(0.01) do
          Thread.pass until Thread.pending_interrupt?
          :returned
        end
        [v, Thread.pending_interrupt?]
      end
      assert_equal [:returned, false], r
    end
    assert_equal 1, d[:consumed]
  end

  # The block returns after its timer's callback ran (the expiry is handed
  # off, maybe being raised): the call still returns the block's value, and
  # nothing is pending or raised afterwards.  (Masked, so that a watcher
  # that gets the GVL before the block returns cannot end the block.)
  def test_block_returning_after_its_callback_ran
    f0 = Tmo.stats[:fired]
    d = stats_delta do
      r = Thread.handle_interrupt(Timeout::ExitException => :never) do
        v = Timeout.timeout(0.001) do
          nil until Tmo.stats[:fired] > f0
          :returned
        end
        [v, Thread.pending_interrupt?]
      end
      assert_equal [:returned, false], r
    end
    assert_equal 1, d[:withdrawn] + d[:consumed], d.inspect
  end

  # A minimal Fiber scheduler whose timeout_after either runs the block or
  # raises what it is given at once.
  def scheduler_class
    Class.new do
      attr_reader :calls

      def initialize(expire) = (@expire = expire; @calls = [])
      def block(*) = nil
      def unblock(*) = nil
      def kernel_sleep(*) = nil
      def io_wait(*) = nil
      def close = nil

      def timeout_after(sec, exc, message)
        @calls << [sec, exc.class, message]
        @expire ? raise(exc, message) : yield(sec)
      end
    end
  end

  def in_scheduled_fiber(scheduler)
    Thread.new do
      Fiber.set_scheduler(scheduler)
      out = nil
      Fiber.new(blocking: false) { out = (yield rescue $!) }.resume
      out
    end.value
  end

  def test_fiber_schedulers_timeout_after_is_used
    s = scheduler_class.new(false)
    assert_equal :inside, in_scheduled_fiber(s) { Timeout.timeout(2) { :inside } }
    assert_equal [[2, Timeout::ExitException, "execution expired"]], s.calls
    s = scheduler_class.new(true)
    e = in_scheduled_fiber(s) { Timeout.timeout(2) { :inside } }
    assert_equal [Timeout::Error, "execution expired"], [e.class, e.message]
    e = in_scheduled_fiber(s) { Timeout.timeout(2, MyErrorOuter, "m") { :inside } }
    assert_equal [MyErrorOuter, "m"], [e.class, e.message]
    assert_equal [2, Class, "m"], s.calls.last
  end

  def test_a_fiber_that_yields_inside_the_block
    f = Fiber.new { Timeout.timeout(5) { Fiber.yield :inside; :done } }
    assert_equal :inside, f.resume
    assert_equal :done, f.resume
  end
end
