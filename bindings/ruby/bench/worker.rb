# frozen_string_literal: true
# One implementation's figures, as JSON on stdout (bench/seed.rb runs one
# process per implementation, so that each has its own Timeout):
#   ruby bench/worker.rb IMPL ROUNDS
#   ruby bench/worker.rb IMPL count N   (only N seed calls, for callgrind)
# IMPL: stock      Debian's timeout (0.2.0), loaded from Ruby's own lib dir
#       reference  bench/reference_timeout.rb (one watcher thread, pure Ruby)
#       tmo        bindings/ruby (TMO_ENGINE picks the engine)
#       bare       no timeout: `begin; yield; ensure; end`
# Workloads (wall and CPU time of each round): the seed's exact loop, ROUNDS x Benchmark.measure {
# 10000.times { Timeout.timeout(1) {} } }; the same 10,000 calls spread over
# 1, 2 and 4 Ruby threads (calls per second); and 1 % of the calls timing
# out (every 100th is Timeout.timeout(0.001) { sleep 0.01 }).
require "benchmark"
require "json"
require "rbconfig"

impl = ARGV[0]
rounds = ARGV[1] == "count" ? 0 : Integer(ARGV.fetch(1, "20"))
case impl
when "stock"
  load File.join(RbConfig::CONFIG["rubylibdir"], "timeout.rb")
  raise "stock: got Timeout #{Timeout::VERSION}" if defined?(Tmo)
when "reference"
  require_relative "reference_timeout"
when "tmo"
  $LOAD_PATH.unshift File.expand_path("../lib", __dir__)
  require "timeout"
  raise "tmo: the binding did not load" unless defined?(Tmo::PLANTED)
when "bare"
  module Timeout
    VERSION = "none"
    class Error < RuntimeError; end
    def self.timeout(sec, _klass = nil, _message = nil)
      yield(sec)
    ensure
      nil
    end
  end
else
  abort "worker: unknown implementation #{impl}"
end

CALLS = 10_000

if ARGV[1] == "count"
  Integer(ARGV[2]).times { Timeout.timeout(1) {} }
  exit
end

def cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)

# One round of the seed's loop: [wall, CPU] seconds.  The CPU time is every
# thread of the process (the watcher, the engine's, stock's thread per call):
# what a loaded machine's preemption does not inflate.
def seed_round
  c0 = cpu
  real = Benchmark.measure { CALLS.times { Timeout.timeout(1) {} } }.real
  [real, cpu - c0]
end

# The same 10,000 calls shared by `threads` Ruby threads, started before the
# clock starts (a thread's creation costs as much as hundreds of calls) and
# let go together through a gate.
def threads_round(threads)
  gate = Queue.new
  workers = Array.new(threads) { Thread.new { gate.pop; (CALLS / threads).times { Timeout.timeout(1) {} } } }
  Thread.pass until gate.num_waiting == threads
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  c0 = cpu
  threads.times { gate << true }
  workers.each(&:join)
  [CALLS / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0), CALLS / (cpu - c0)]
end

def timing_out_round
  timed_out = 0
  t = Benchmark.measure do
    CALLS.times do |i|
      if (i % 100).zero?
        begin
          Timeout.timeout(0.001) { sleep 0.01 }
        rescue Timeout::Error
          timed_out += 1
        end
      else
        Timeout.timeout(1) {}
      end
    end
  end.real
  [t, timed_out]
end

def median(a) = a.sort[a.size / 2]

seed_round # warm up: the watcher thread, the engine
seed = Array.new(rounds) { seed_round.map { |t| t * 1e6 / CALLS } }
out = { impl: impl, version: Timeout::VERSION, rounds: rounds, calls: CALLS,
        seed_us: seed.map(&:first), seed_us_median: median(seed.map(&:first)),
        seed_cpu_us: seed.map(&:last), seed_cpu_us_median: median(seed.map(&:last)) }
out[:engine] = Tmo.engine if impl == "tmo"
# The slow implementations (a thread per call) get fewer rounds of the
# others; a fast one's round lasts a few milliseconds, so it gets them all.
small = [rounds / 4, 3].max
many = out[:seed_us_median] < 5 ? rounds : small
[1, 2, 4].each do |n|
  r = Array.new(many) { threads_round(n) }
  out[:"threads#{n}_calls_per_s"] = median(r.map(&:first))
  out[:"threads#{n}_calls_per_cpu_s"] = median(r.map(&:last))
end
if impl != "bare"
  rs = Array.new(small) { timing_out_round }
  out[:timeout1pct_us_median] = median(rs.map { |t, _| t * 1e6 / CALLS })
  out[:timeout1pct_timed_out] = rs.map(&:last)
end
puts JSON.generate(out)
