# frozen_string_literal: true
# The benchmark's pure-Ruby reference: Timeout with ONE watcher thread for
# the whole process, requests handed to it through a Queue and its sleep
# bounded by a ConditionVariable: the design ruby/timeout adopted in 0.4
# after the seed's pull request (Debian's Ruby 3.1 ships 0.2.0, a thread
# per call).  Written for this project; it keeps Bug #8730's ExitException
# and the `klass` path, and is loaded by bench/worker.rb only.
module Timeout
  VERSION = "reference"

  class ExitException < Exception
    def exception(*) = self
  end

  class Error < RuntimeError; end

  # One call's deadline.  `done` is read and set under the request's own
  # lock, so the watcher never raises into a call that already finished.
  class Request
    attr_reader :deadline

    def initialize(thread, sec, what, message)
      @thread = thread
      @what = what # the ExitException to raise, or the klass
      @message = message
      @deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + sec
      @lock = Mutex.new
      @done = false
    end

    def done? = @lock.synchronize { @done }

    def finish = @lock.synchronize { @done = true }

    def expire
      @lock.synchronize do
        next if @done
        @done = true
        @thread.raise(@what, @message)
      end
    end
  end
  private_constant :Request

  @incoming = Queue.new
  @lock = Mutex.new
  @wake = ConditionVariable.new
  @watcher = nil

  class << self
    def timeout(sec, klass = nil, message = nil)
      return yield(sec) if sec.nil? || sec.zero?
      raise ArgumentError, "Timeout sec must be a non-negative number" if sec.negative?

      message ||= "execution expired"
      start_watcher unless @watcher&.alive?
      exit = klass ? nil : ExitException.new(message)
      request = Request.new(Thread.current, sec, klass || exit, message)
      @lock.synchronize do
        @incoming << request
        @wake.signal
      end
      run(request, exit, message) { yield(sec) }
    end

    private

    def run(request, exit, message)
      yield
    rescue ExitException => e
      raise Error, message if e.equal?(exit)

      raise
    ensure
      request.finish
    end

    def start_watcher
      @lock.synchronize do
        return if @watcher&.alive?

        @watcher = Thread.handle_interrupt(Object => :immediate) { Thread.new { watch } }
        @watcher.name = "reference Timeout watcher"
      end
    end

    # Take what came in; sleep until the nearest deadline or a new request;
    # expire what is due; forget what is done.
    def watch
      pending = []
      loop do
        pending << @incoming.pop if pending.empty?
        pending << @incoming.pop until @incoming.empty?
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        nearest = pending.min_by(&:deadline).deadline
        if nearest > now
          @lock.synchronize { @wake.wait(@lock, nearest - now) if @incoming.empty? }
          now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end
        pending.each { |r| r.expire if r.deadline <= now }
        pending.reject!(&:done?)
      end
    end
  end

  private def timeout(*args, &block) = Timeout.timeout(*args, &block)
end
