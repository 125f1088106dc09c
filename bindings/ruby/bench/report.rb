# frozen_string_literal: true
# bench/seed.rb's targets, gnuplot figures and REPORT.md section.
module SeedReport
  module_function

  def by_label(runs) = runs.reject { |r| r[:skipped] }.to_h { |r| [r[:label], r] }

  # The issue's targets, each a ratio inside this one run (medians of the
  # rounds; the best round's ratio beside it: the machine is shared).
  def targets(runs)
    r = by_label(runs)
    w = r["tmo-wheel"] or return []
    best = ->(x) { x[:seed_us].min }
    rows = []
    { "stock" => 0.02, "reference" => 0.1 }.each do |base, want|
      next unless r[base]

      rows << { target: "tmo wheel / #{base} (seed loop, us per call)", want: "<= #{want}x",
                value: w[:seed_us_median] / r[base][:seed_us_median], best: best[w] / best[r[base]],
                instr: instr_ratio(w, r[base]), ok: w[:seed_us_median] / r[base][:seed_us_median] <= want }
    end
    if r["bare"]
      v = w[:seed_us_median] / r["bare"][:seed_us_median]
      rows << { target: "tmo wheel / bare begin-yield-ensure", want: "<= 3x", value: v,
                best: best[w] / best[r["bare"]], instr: instr_ratio(w, r["bare"]), ok: v <= 3 }
    end
    v = w[:threads4_calls_per_s] / w[:threads1_calls_per_s]
    rows << { target: "tmo wheel, 4 threads / 1 (calls per second)", want: ">= 0.9x", value: v, ok: v >= 0.9 }
    rows
  end

  def instr_ratio(a, b)
    a[:instructions_per_call] && b[:instructions_per_call] && a[:instructions_per_call] / b[:instructions_per_call]
  end

  def plots(result, dir)
    runs = result[:runs].reject { |r| r[:skipped] }
    File.write(File.join(dir, "seed.dat"),
               runs.map { |r| format("%s %.6f %.6f\n", r[:label], r[:seed_us_median], r[:seed_us].min) }.join)
    File.write(File.join(dir, "threads.dat"),
               runs.map { |r| "#{r[:label]} #{[1, 2, 4].map { |n| r[:"threads#{n}_calls_per_s"].round }.join(' ')}\n" }.join)
    %w[png svg].each do |term|
      gnuplot(<<~GP, dir)
        set terminal #{term == 'png' ? 'pngcairo size 900,500' : 'svg size 900,500'}
        set output "seed.#{term}"
        set title "Timeout.timeout(1) {} in Ruby: us per call (median of #{runs.first[:rounds]} x 10,000; log scale)"
        set style data histograms
        set style fill solid 0.8
        set logscale y
        set ylabel "us per call"
        set xtics rotate by -30
        set grid ytics
        plot "seed.dat" using 2:xtic(1) title "median", "" using 3 title "best round"
      GP
      gnuplot(<<~GP, dir)
        set terminal #{term == 'png' ? 'pngcairo size 900,500' : 'svg size 900,500'}
        set output "threads.#{term}"
        set title "Timeout.timeout(1) {} over 1, 2, 4 Ruby threads: calls per second (log scale)"
        set style data histograms
        set style fill solid 0.8
        set logscale y
        set ylabel "calls per second"
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

  def instructions_table(runs)
    rows = runs.select { |r| r[:instructions_per_call] }
    return "" if rows.empty?

    "Instructions per call (callgrind, every thread of the process, " \
      "(I(4000 calls) - I(2000 calls)) / 2000; the load does not move them):\n\n" \
      "| implementation | instructions per call |\n|---|---:|\n" +
      rows.map { |r| format("| %s | %d |", r[:label], r[:instructions_per_call]) }.join("\n") + "\n"
  end

  def markdown(res)
    runs = res[:runs]
    t = runs.map do |r|
      next "| #{r[:label]} | skipped: #{r[:skipped]} | | | | | |" if r[:skipped]

      one = r[:timeout1pct_us_median] ? format("%.2f", r[:timeout1pct_us_median]) : "-"
      format("| %s | %.3f | %.3f | %d | %d | %d | %s |", r[:label], r[:seed_us_median], r[:seed_us].min,
             r[:threads1_calls_per_s], r[:threads2_calls_per_s], r[:threads4_calls_per_s], one)
    end
    tg = res[:targets].map do |x|
      best = x[:best] ? format(" (best rounds: %.3fx)", x[:best]) : ""
      best += format("; instructions: %.3fx", x[:instr]) if x[:instr]
      format("| %s | %s | %.3fx%s | %s |", x[:target], x[:want], x[:value], best, x[:ok] ? "met" : "MISSED")
    end
    <<~MD
      # The seed benchmark in Ruby

      `ruby bindings/ruby/bench/seed.rb` (#{res[:date]}, commit #{res[:commit]}, #{res[:seconds]} s):
      #{res[:benchmark]}, in one run, one process per implementation.
      #{res[:ruby]}; #{res[:cpu]}, #{res[:cpus]} CPUs, load average #{res[:loadavg_before].join(' ')}
      before and #{res[:loadavg_after].join(' ')} after: a shared VM, so each round
      (10,000 calls, about a millisecond for the fast rows) is noisy; ratios are taken inside this run.

      | implementation | us per call (median) | best round | 1 thread calls/s | 2 threads | 4 threads | 1 % timing out, us per call |
      |---|---:|---:|---:|---:|---:|---:|
      #{t.join("\n")}

      `stock`: Debian's timeout 0.2.0 (a thread per call); `reference`: one watcher thread in pure
      Ruby (bindings/ruby/bench/reference_timeout.rb, the design of ruby/timeout 0.4+); `tmo-*`:
      the binding on each engine; `bare`: `begin; yield; ensure; end`.  The 1 % column is
      dominated by the 100 deadlines of 1 ms that expire in each round.

      #{instructions_table(runs)}
      | target | wanted | this run | |
      |---|---|---|---|
      #{tg.join("\n")}

      ![seed](seed.svg)
      ![threads](threads.svg)
    MD
  end
end
