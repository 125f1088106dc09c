// Google Benchmark 1.7.1 behind the C interface of gbench.h.  See gbench.h
// for the contract; notes here are about Google Benchmark's own behaviour.
#include "gbench.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

// sink.h (sk_progress) is a C header without C++ guards.
extern "C" {
#include "sink.h"
}

namespace {

benchmark::State *state_of(sk_gb_state *st) { return reinterpret_cast<benchmark::State *>(st); }
const benchmark::State *state_of(const sk_gb_state *st)
{
	return reinterpret_cast<const benchmark::State *>(st);
}
benchmark::internal::Benchmark *bench_of(struct sk_gb_bench *b)
{
	return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}

void copy(char *dst, size_t cap, const std::string &src)
{
	std::snprintf(dst, cap, "%s", src.c_str());
}

// Keep only "<name>/threads:N": the iteration count, repetition count and
// time type are fields of the JSON already, and names that do not change with
// the run's sizes let compare.py match a --quick run against a full one.
void trim_name(benchmark::BenchmarkReporter::Run &run)
{
	run.run_name.min_time.clear();
	run.run_name.min_warmup_time.clear();
	run.run_name.iterations.clear();
	run.run_name.repetitions.clear();
	run.run_name.time_type.clear();
}

// The display reporter given to RunSpecifiedBenchmarks (a file reporter
// would need --benchmark_out, which the harness's --json replaces): it
// forwards every report to the console table and to a JSON reporter writing
// into memory, and keeps the runs for sk_gb_run()'s caller.
class TeeReporter : public benchmark::BenchmarkReporter {
public:
	TeeReporter(const struct sk_run *run, size_t total)
		: run_(run), total_(total), console_(console_options())
	{
		json_.SetOutputStream(&json_text_);
		json_.SetErrorStream(&std::cerr);
	}
	bool ReportContext(const Context &ctx) override
	{
		// The console reporter prints the machine context (CPUs, caches,
		// load, the debug-build warning) to stderr on every run: show it
		// once per process; the JSON keeps it.
		static bool context_shown = false;
		if (context_shown)
			console_.SetErrorStream(&null_);
		context_shown = true;
		console_.ReportContext(ctx);
		json_.ReportContext(ctx);
		return true;
	}
	void ReportRuns(const std::vector<Run> &report) override
	{
		std::vector<Run> runs(report);
		for (Run &r : runs)
			trim_name(r);
		console_.ReportRuns(runs);
		json_.ReportRuns(runs);
		for (const Run &r : runs)
			keep(r);
		done_++;
		if (total_ > 0)
			sk_progress(run_, "benchmarks", (double)done_ / (double)total_);
	}
	void Finalize() override
	{
		console_.Finalize();
		json_.Finalize();
	}
	std::string json() const { return json_text_.str(); }
	std::vector<sk_gb_result> results;

private:
	// Colour only on a terminal (the default would colour logs too).
	static benchmark::ConsoleReporter::OutputOptions console_options()
	{
		int o = benchmark::ConsoleReporter::OO_Tabular;
		const char *term = std::getenv("TERM");
		if (isatty(STDOUT_FILENO) && term != nullptr && std::strcmp(term, "dumb") != 0)
			o |= benchmark::ConsoleReporter::OO_Color;
		return (benchmark::ConsoleReporter::OutputOptions)o;
	}

	void keep(const Run &r)
	{
		sk_gb_result g;
		std::memset(&g, 0, sizeof g);
		copy(g.name, sizeof g.name, r.benchmark_name());
		g.threads = (int)r.threads;
		g.repetition = r.run_type == Run::RT_Aggregate ? -1 : r.repetition_index;
		if (r.run_type == Run::RT_Aggregate)
			copy(g.aggregate, sizeof g.aggregate, r.aggregate_name);
		g.error = r.error_occurred ? 1 : 0;
		copy(g.error_message, sizeof g.error_message, r.error_message);
		g.iterations = (double)r.iterations;
		// GetAdjusted*Time() is in the run's time unit; ours is always ns
		// (the default), checked here rather than assumed.
		double mult = 1.0;
		switch (r.time_unit) {
		case benchmark::kNanosecond: mult = 1.0; break;
		case benchmark::kMicrosecond: mult = 1e3; break;
		case benchmark::kMillisecond: mult = 1e6; break;
		case benchmark::kSecond: mult = 1e9; break;
		}
		g.real_ns = r.GetAdjustedRealTime() * mult;
		g.cpu_ns = r.GetAdjustedCPUTime() * mult;
		g.real_s = r.real_accumulated_time;
		for (const auto &kv : r.counters) {
			if (g.ncounters >= SK_GB_MAX_COUNTERS)
				break;
			copy(g.counters[g.ncounters].name, sizeof g.counters[0].name, kv.first);
			// Counters reach the reporter finished: rates already divided
			// by the time, averages over threads already taken.
			double v = kv.second.value;
			g.counters[g.ncounters].value = v;
			g.ncounters++;
		}
		results.push_back(g);
	}

	const struct sk_run *run_;
	size_t total_;
	size_t done_ = 0;
	benchmark::ConsoleReporter console_;
	benchmark::JSONReporter json_;
	std::ostringstream json_text_;
	std::ostream null_{nullptr}; // discards (no buffer: writes set badbit)
};

size_t registered = 0;

void help_printer() {}

} // namespace

extern "C" {

int sk_gb_init(int argc, char **argv)
{
	// Initialize() owns --help unless given a printer: the harness prints
	// its own help, so Google Benchmark's printer is a no-op (and the CLI
	// never hands it --help).
	benchmark::Initialize(&argc, argv, help_printer);
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			std::fprintf(stderr, "tmo-harness: unknown Google Benchmark flag '%s'\n", argv[i]);
		return -1;
	}
	return 0;
}

struct sk_gb_bench *sk_gb_register(const char *name, sk_gb_fn *body, void *ctx)
{
	registered++;
	auto *b = benchmark::RegisterBenchmark(
		name, [body, ctx](benchmark::State &st) { body(reinterpret_cast<sk_gb_state *>(&st), ctx); });
	return reinterpret_cast<struct sk_gb_bench *>(b);
}

void sk_gb_iterations(struct sk_gb_bench *b, uint64_t n) { bench_of(b)->Iterations((benchmark::IterationCount)n); }
void sk_gb_repetitions(struct sk_gb_bench *b, int n) { bench_of(b)->Repetitions(n); }
void sk_gb_min_time(struct sk_gb_bench *b, double seconds) { bench_of(b)->MinTime(seconds); }
void sk_gb_threads(struct sk_gb_bench *b, int n) { bench_of(b)->Threads(n); }
void sk_gb_use_real_time(struct sk_gb_bench *b) { bench_of(b)->UseRealTime(); }

int sk_gb_keep_running_batch(sk_gb_state *st, uint64_t n)
{
	return state_of(st)->KeepRunningBatch((benchmark::IterationCount)n) ? 1 : 0;
}
int sk_gb_thread_index(const sk_gb_state *st) { return state_of(st)->thread_index(); }
int sk_gb_thread_count(const sk_gb_state *st) { return state_of(st)->threads(); }
uint64_t sk_gb_max_iterations(const sk_gb_state *st) { return (uint64_t)state_of(st)->max_iterations; }
void sk_gb_pause_timing(sk_gb_state *st) { state_of(st)->PauseTiming(); }
void sk_gb_resume_timing(sk_gb_state *st) { state_of(st)->ResumeTiming(); }
void sk_gb_skip_with_error(sk_gb_state *st, const char *msg) { state_of(st)->SkipWithError(msg); }

void sk_gb_counter(sk_gb_state *st, const char *name, double value, unsigned flags)
{
	int f = benchmark::Counter::kDefaults;
	if (flags & SK_GB_COUNTER_RATE)
		f |= benchmark::Counter::kIsRate;
	if (flags & SK_GB_COUNTER_AVG_THREADS)
		f |= benchmark::Counter::kAvgThreads;
	state_of(st)->counters[name] = benchmark::Counter(value, (benchmark::Counter::Flags)f);
}

void sk_gb_items_processed(sk_gb_state *st, int64_t items) { state_of(st)->SetItemsProcessed(items); }

size_t sk_gb_run(const struct sk_run *run, struct sk_gb_result **out)
{
	*out = nullptr;
	TeeReporter tee(run, registered);
	benchmark::RunSpecifiedBenchmarks(&tee);
	benchmark::ClearRegisteredBenchmarks();
	registered = 0;
	std::fflush(stdout);
	sk_sink_add_gbench_json(run->report, tee.json().c_str());
	size_t n = tee.results.size();
	if (n == 0)
		return 0;
	auto *res = static_cast<sk_gb_result *>(std::calloc(n, sizeof(sk_gb_result)));
	if (res == nullptr)
		return 0;
	std::memcpy(res, tee.results.data(), n * sizeof(sk_gb_result));
	*out = res;
	return n;
}

void sk_gb_results_free(struct sk_gb_result *res) { std::free(res); }

const struct sk_gb_result *sk_gb_find(const struct sk_gb_result *res, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!res[i].error && std::strcmp(res[i].name, name) == 0)
			return &res[i];
	return nullptr;
}

double sk_gb_result_counter(const struct sk_gb_result *r, const char *counter)
{
	for (int i = 0; r != nullptr && i < r->ncounters; i++)
		if (std::strcmp(r->counters[i].name, counter) == 0)
			return r->counters[i].value;
	return NAN;
}

} // extern "C"
