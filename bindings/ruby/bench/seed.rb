# frozen_string_literal: true
# The seed benchmark in Ruby, every implementation in one run:
#   ruby bindings/ruby/bench/seed.rb [--rounds=20] [--engines=a,b] [--out=results/ruby-seed]
#                                    [--callgrind]
# (after scripts/ruby-build).  Each implementation runs in its own process
# (bench/worker.rb: Debian's stock timeout 0.2.0, the pure-Ruby watcher-
# thread reference, the tmo binding on each engine, and a bare
# begin/yield/ensure); the figures go to OUT/seed.json, OUT/seed.png|svg
# and OUT/threads.png|svg (gnuplot), and OUT/REPORT.md (the figures and the
# issue's targets, with the machine and its load: speed is measured here,
# never asserted by a test).  --callgrind adds instructions per call
# (valgrind's callgrind, every thread of the process counted: the watcher
# and the engine's threads too) for bare, reference, stock and tmo-wheel:
# (I(4000 calls) - I(2000 calls)) / 2000, a figure the machine's load does
# not move; about 5 minutes more.
require "json"
require "open3"
require "rbconfig"
require "time"
require "tmpdir"
require_relative "report"

root = File.expand_path("../../..", __dir__)
opts = { rounds: 20, out: File.join(root, "results/ruby-seed"), engines: nil, callgrind: false }
ARGV.each do |a|
  case a
  when /\A--rounds=(\d+)\z/ then opts[:rounds] = Integer(Regexp.last_match(1))
  when /\A--engines=(.+)\z/ then opts[:engines] = Regexp.last_match(1).split(",")
  when /\A--out=(.+)\z/ then opts[:out] = File.expand_path(Regexp.last_match(1))
  when "--callgrind" then opts[:callgrind] = true
  else abort "seed.rb: unknown argument #{a} (--rounds=N --engines=a,b --out=DIR)"
  end
end
worker = File.join(__dir__, "worker.rb")
lib = File.join(root, "bindings/ruby/lib")

def run_worker(worker, impl, rounds, env = {})
  out, err, st = Open3.capture3(env, RbConfig.ruby, worker, impl, rounds.to_s)
  return JSON.parse(out, symbolize_names: true) if st.success?

  { impl: impl, skipped: (err.lines.grep(/Error|error/).first || err.lines.last || st.inspect).strip }
end

engines = opts[:engines] || begin
  out, st = Open3.capture2(RbConfig.ruby, "-I", lib, "-rtimeout", "-e", "puts Tmo.engines")
  abort "seed.rb: the binding does not load (scripts/ruby-build first)" unless st.success?
  out.split
end

# Instructions for `n` calls of impl, every thread counted.
def instructions(worker, impl, n, env)
  file = File.join(Dir.tmpdir, "tmo-seed-callgrind.#{Process.pid}")
  _, err, st = Open3.capture3(env, "valgrind", "--tool=callgrind", "--callgrind-out-file=#{file}",
                              RbConfig.ruby, worker, impl, "count", n.to_s)
  raise "callgrind #{impl}: #{err.lines.last}" unless st.success?

  Integer(File.read(file)[/^summary:\s*(\d+)/, 1])
ensure
  File.delete(file) if file && File.exist?(file)
end

load_before = File.read("/proc/loadavg").split.first(3)
t0 = Time.now
runs = []
[["bare", {}], ["stock", {}], ["reference", {}], *engines.map { |e| ["tmo", { "TMO_ENGINE" => e }] }]
  .each do |impl, env|
  label = impl == "tmo" ? "tmo-#{env['TMO_ENGINE']}" : impl
  $stderr.print "seed.rb: #{label} ... "
  r = run_worker(worker, impl, opts[:rounds], env)
  r[:label] = label
  $stderr.puts(r[:skipped] ? "skipped: #{r[:skipped]}" : format("%.3f us per call (CPU, median)", r[:seed_cpu_us_median]))
  runs << r
end

if opts[:callgrind]
  [["bare", {}], ["reference", {}], ["stock", {}], ["tmo", { "TMO_ENGINE" => "wheel" }]].each do |impl, env|
    run = runs.find { |r| r[:label] == (impl == "tmo" ? "tmo-wheel" : impl) } or next
    $stderr.print "seed.rb: callgrind #{run[:label]} ... "
    run[:instructions_per_call] = (instructions(worker, impl, 4000, env) - instructions(worker, impl, 2000, env)) / 2000.0
    $stderr.puts run[:instructions_per_call].round
  end
end

cpu = File.read("/proc/cpuinfo")[/^model name\s*:\s*(.+)$/, 1]
commit = Dir.chdir(root) { `git rev-parse --short HEAD 2>/dev/null`.strip }
result = {
  benchmark: "ruby seed: 20 x Benchmark.measure { 10000.times { Timeout.timeout(1) {} } }",
  date: t0.utc.iso8601, seconds: (Time.now - t0).round(1), commit: commit,
  ruby: RUBY_DESCRIPTION, cpu: cpu, cpus: File.read("/proc/cpuinfo").scan(/^processor\s*:/).size,
  loadavg_before: load_before, loadavg_after: File.read("/proc/loadavg").split.first(3),
  runs: runs
}
result[:callgrind] = opts[:callgrind]
result[:targets] = SeedReport.targets(runs)
Dir.mkdir(opts[:out]) unless Dir.exist?(opts[:out])
File.write(File.join(opts[:out], "seed.json"), JSON.pretty_generate(result) + "\n")
SeedReport.plots(result, opts[:out])
File.write(File.join(opts[:out], "REPORT.md"), SeedReport.markdown(result))
$stderr.puts "seed.rb: #{opts[:out]}/seed.json, REPORT.md, seed.png, threads.png (#{result[:seconds]} s)"
