# frozen_string_literal: false
# The behaviours that depend on the process: the watcher's first start (in a
# fresh child Ruby, so that it starts where the case says), fork, trap.
class TestTmoTimeoutProcess < Test::Unit::TestCase
  include TmoTestHelper

  # Started inside `Object => :never`, the watcher must still be killable:
  # it does not inherit the caller's mask.  (With the mask inherited, the
  # kill stays pending and join's bound expires: the child prints "alive",
  # and leaves with exit! since an unkillable watcher would hang its exit.)
  def test_watcher_does_not_inherit_the_callers_interrupt_mask
    assert_child_says "ok", <<~'RUBY'
      Thread.handle_interrupt(Object => :never) { Timeout.timeout(1) { :ok } }
      w = Tmo.watcher
      w.kill
      puts(w.join(30) ? "ok" : "alive")
      $stdout.flush
      exit!(0)
    RUBY
  end

  def test_a_killed_watcher_is_started_again
    assert_child_says "Timeout::Error 2", <<~'RUBY'
      Timeout.timeout(1) { :ok }
      Tmo.watcher.kill.join
      begin
        Timeout.timeout(0.01) { sleep }
      rescue Timeout::Error => e
        puts "#{e.class} #{Tmo.stats[:watchers]}"
      end
    RUBY
  end

  def test_thread_group_does_not_keep_the_watcher
    assert_child_says "[] ThreadGroup::Default", <<~'RUBY'
      tg = ThreadGroup.new
      Thread.new { tg.add(Thread.current); Timeout.timeout(10) {} }.join
      puts "#{tg.list} #{Tmo.watcher.group == ThreadGroup::Default ? 'ThreadGroup::Default' : 'other'}"
    RUBY
  end

  def test_enclosed_thread_group
    assert_child_says "42 Timeout::Error", <<~'RUBY'
      Thread.new do
        group = ThreadGroup.new
        group.add(Thread.current)
        group.enclose
        v = Timeout.timeout(1) { 42 }
        e = (Timeout.timeout(0.01) { sleep } rescue $!)
        puts "#{v} #{e.class}"
      end.join
    RUBY
  end

  # The first timeout of the process inside a trap handler (the watcher is
  # started there).
  def test_inside_a_trap_handler
    assert_child_says "OK", <<~'RUBY'
      rd, wr = IO.pipe
      trap("USR1") do
        begin
          Timeout.timeout(0.1) { sleep }
          wr.write "did not raise"
        rescue Timeout::Error
          wr.write "OK"
        ensure
          wr.close
        end
      end
      Process.kill :USR1, Process.pid
      puts rd.read
    RUBY
  end

  # The parent's engine and watcher exist before the fork; the child makes
  # its own.
  def test_fork
    omit "fork not supported" unless Process.respond_to?(:fork)
    assert_equal :ok, Timeout.timeout(1) { :ok }
    watchers = Tmo.stats[:watchers]
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      begin
        r = Timeout.timeout(0.01) { sleep 5 }
        wr.write r.inspect
      rescue Timeout::Error
        v = Timeout.timeout(1) { :ok }
        wr.write "timeout #{v} #{Tmo.stats[:watchers] - watchers} #{Tmo.engine}"
      ensure
        wr.close
        exit!(0)
      end
    end
    wr.close
    Process.wait pid
    assert_equal "timeout ok 1 #{ENGINE}", rd.read
    rd.close
    assert_equal :ok, Timeout.timeout(1) { :ok }, "the parent's engine still works"
  end
end
