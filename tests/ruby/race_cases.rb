# frozen_string_literal: false
# No interrupt after the block returned, however close to the deadline: the
# cancellation race, 100,000 blocks (times TMO_TEST_SCALE) that return
# around their deadline, on 32 threads at once.
class TestTmoTimeoutRace < Test::Unit::TestCase
  include TmoTestHelper

  THREADS = 32

  # One thread's share: blocks that sleep 0.5x..1.5x their deadline, so that
  # about half return before it and half are interrupted, and many return
  # while their expiry is on its way (fired, handed off, being raised).
  # A late interrupt shows as an ExitException raised outside its call, or
  # as one pending right after the call returned.  Outside the call
  # ExitException is masked, so that the counting itself is never
  # interrupted: with the planted defect late interrupts come in bursts,
  # and one raised inside a rescue clause would end the thread uncounted.
  def race_worker(count, d, seed)
    rng = Random.new(seed)
    c = Hash.new(0)
    Thread.handle_interrupt(Timeout::ExitException => :never) do
      count.times do
        begin
          Thread.handle_interrupt(Timeout::ExitException => :immediate) do
            Timeout.timeout(d) { sleep(d * (0.5 + rng.rand)); :ok }
          end
          c[:returned] += 1
        rescue Timeout::Error
          c[:timed_out] += 1
        rescue Timeout::ExitException # raised outside its own call
          c[:late] += 1
        end
        c[:late] += take_pending_exit
      end
      # A late one may come after the last block's take, and would be
      # raised as the mask ends: wait until every expiry made is handled
      # (each of ours is then raised, or withdrawn), and take them all.
      Thread.pass while Tmo.stats[:handoff_pending]
      c[:late] += 1 while take_pending_exit == 1
    end
    c
  end

  # 1 if an ExitException was waiting behind the mask (taken, so that it is
  # counted once and not raised into the next call), else 0.  (Not
  # pending_interrupt?(Timeout::ExitException): ruby 3.1 crashes in it.)
  def take_pending_exit
    return 0 unless Thread.pending_interrupt?
    Thread.handle_interrupt(Timeout::ExitException => :immediate) { Thread.pass }
    0 # something else was pending: it stays so
  rescue Timeout::ExitException
    1
  end

  def test_no_interrupt_after_the_block_returned
    n = [(100_000 * SCALE).round, THREADS * 10].max
    d = [Tmo.resolution_ns / 1e9, 0.001].max
    totals = Hash.new(0)
    delta = stats_delta do
      workers = Array.new(THREADS) { |t| Thread.new { race_worker(n / THREADS, d, t) } }
      workers.each { |w| w.value.each { |k, v| totals[k] += v } }
      Thread.pass while Tmo.stats[:handoff_pending] # every expiry handled
    end
    puts "\nrace on #{ENGINE}: #{n / THREADS * THREADS} blocks, deadline #{(d * 1e6).round} us: " \
         "#{totals[:returned]} returned, #{totals[:timed_out]} timed out, #{totals[:late]} late; " \
         "handoffs withdrawn #{delta[:withdrawn]}, taken back after commit #{delta[:consumed]}; " \
         "arms refused for now and asked again #{delta[:arm_retries]}"
    if Tmo::PLANTED == "late"
      assert_operator totals[:late], :>, 0, "the planted defect (no withdrawal) must be caught"
    else
      assert_equal 0, totals[:late], "interrupts after the block returned"
      assert_equal totals[:timed_out], delta[:timed_out]
    end
  end
end
