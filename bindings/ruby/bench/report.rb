# frozen_string_literal: true
# bench/seed.rb's targets, gnuplot figures and REPORT.md section.
module SeedReport
  module_function

  def by_label(runs) = runs.reject { |r| r[:skipped] }.to_h { |r| [r[:label], r] }

  def instr_ratio(a, b)
    a[:instructions_per_call] && b[:instructions_per_call] && a[:instructions_per_call] / b[:instructions_per_call]
  end

  # The issue's targets, each a ratio inside this one run.  The value judged
  # is the ratio of the CPU-time medians (what preemption on a shared machine
  # does not inflate); the wall-clock medians' ratio and callgrind's are
  # shown beside it.
  def targets(runs)
    r = by_label(runs)
    w = r["tmo-wheel"] or return []
    rows = []
    [["stock", 0.02, :le], ["reference", 0.1, :le], ["bare", 3, :le]].each do |base, want, _|
      b = r[base] or next
      v = w[:seed_cpu_us_median] / b[:seed_cpu_us_median]
      name = base == "bare" ? "bare begin-yield-ensure" : base
      rows << { target: "tmo wheel / #{name} (seed loop, per call)", want: "<= #{want}x", value: v,
                wall: w[:seed_us_median] / b[:seed_us_median], instr: instr_ratio(w, b), ok: v <= want }
    end
    v = w[:threads4_calls_per_cpu_s] / w[:threads1_calls_per_cpu_s]
    b = r["bare"]
    rows << { target: "tmo wheel, 4 threads / 1 (calls per second)", want: ">= 0.9x", value: v,
              wall: w[:threads4_calls_per_s] / w[:threads1_calls_per_s], ok: v >= 0.9,
              bare: b && b[:threads4_calls_per_cpu_s] / b[:threads1_calls_per_cpu_s] }
    rows
  end

  def term(kind, name) = kind == "png" ? "set terminal pngcairo size 900,500\nset output \"#{name}.png\"" : "set terminal svg size 900,500\nset output \"#{name}.svg\""

  def plots(result, dir)
    runs = result[:runs].reject { |r| r[:skipped] }
    File.write(File.join(dir, "seed.dat"),
               runs.map { |r| format("%s %.6f %.6f\n", r[:label], r[:seed_cpu_us_median], r[:seed_us_median]) }.join)
    File.write(File.join(dir, "threads.dat"),
               runs.map { |r| "#{r[:label]} #{[1, 2, 4].map { |n| r[:"threads#{n}_calls_per_cpu_s"].round }.join(' ')}\n" }.join)
    %w[png svg].each do |kind|
      gnuplot(<<~GP, dir)
        #{term(kind, 'seed')}
        set title "Timeout.timeout(1) {} in Ruby: us per call (medians of #{runs.first[:rounds]} x 10,000; log scale)"
        set style data histograms
        set style fill solid 0.8
        set logscale y
        set ylabel "us per call"
        set xtics rotate by -30
        set grid ytics
        plot "seed.dat" using 2:xtic(1) title "CPU time", "" using 3 title "wall clock"
      GP
      gnuplot(<<~GP, dir)
        #{term(kind, 'threads')}
        set title "Timeout.timeout(1) {} over 1, 2, 4 Ruby threads: calls per CPU second (log scale)"
        set style data histograms
        set style fill solid 0.8
        set logscale y
        set ylabel "calls per CPU second"
        set xtics rotate by -30
        set grid ytics
        plot "threads.dat" using 2:xtic(1) title "1 thread", "" using 3 title "2 threads", "" using 4 title "4 threads"
      GP
    end
  end

  def gnuplot(script, dir)
    Dir.chdir(dir) { IO.popen(%w[gnuplot], "w") { |io| io.write(script) } }
    warn "seed.rb: gnuplot failed" unless $?.success?
  end

  def run_row(r)
    return "| #{r[:label]} | skipped: #{r[:skipped]} | | | | | | | |" if r[:skipped]

    one = r[:timeout1pct_us_median] ? format("%.2f", r[:timeout1pct_us_median]) : "-"
    instr = r[:instructions_per_call] ? r[:instructions_per_call].round.to_s : ""
    th = [1, 2, 4].map { |n| format("%.0f", r[:"threads#{n}_calls_per_cpu_s"]) }
    format("| %s | %.3f | %.3f | %.3f | %s | %s | %s |", r[:label], r[:seed_cpu_us_median], r[:seed_us_median],
           r[:seed_us].min, instr, th.join(" / "), one)
  end

  def target_row(x)
    beside = [x[:wall] && format("wall clock %.3fx", x[:wall]), x[:instr] && format("instructions %.3fx", x[:instr]),
              x[:bare] && format("bare's own 4 threads / 1: %.3fx", x[:bare])]
    format("| %s | %s | %.3fx | %s | %s |", x[:target], x[:want], x[:value], beside.compact.join(", "),
           x[:ok] ? "met" : "MISSED")
  end

  def markdown(res)
    <<~MD
      # The seed benchmark in Ruby

      `ruby bindings/ruby/bench/seed.rb#{res[:callgrind] ? ' --callgrind' : ''}` (#{res[:date]}, commit #{res[:commit]}, #{res[:seconds]} s):
      #{res[:benchmark]}, in one run, one process per implementation.
      #{res[:ruby]}; #{res[:cpu]}, #{res[:cpus]} CPUs, load average #{res[:loadavg_before].join(' ')}
      before and #{res[:loadavg_after].join(' ')} after.  The VM is shared with other work: a
      round of 10,000 calls lasts about a millisecond for the fast rows, and its wall clock is
      mostly whether the process was preempted; the CPU time of the process (every thread) is
      what the targets judge, and every ratio is taken inside this one run.

      | implementation | us per call, CPU (median) | wall (median) | wall (best round) | instructions per call | calls per CPU second, 1 / 2 / 4 threads | 1 % timing out, wall us per call |
      |---|---:|---:|---:|---:|---:|---:|
      #{res[:runs].map { |r| run_row(r) }.join("\n")}

      `stock`: Debian's timeout 0.2.0 (a thread per call); `reference`: one watcher thread in pure
      Ruby (bindings/ruby/bench/reference_timeout.rb, the design of ruby/timeout 0.4+); `tmo-*`:
      the binding on each engine; `bare`: `begin; yield; ensure; end`.  Instructions: callgrind,
      every thread, (I(4000 calls) - I(2000 calls)) / 2000, user space only (stock's thread
      creation is mostly kernel time, which it does not count).  The 1 % column is dominated by
      the 100 deadlines of 1 ms that expire in each round.

      | target | wanted | this run (CPU time) | beside it | |
      |---|---|---:|---|---|
      #{res[:targets].map { |x| target_row(x) }.join("\n")}

      ![seed](seed.svg)
      ![threads](threads.svg)
    MD
  end
end
