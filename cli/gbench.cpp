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

// scenario.h (tmo_progress) is a C header without C++ guards.
extern "C" {
#include "report.h"
}

namespace {

benchmark::State *S(gb_state *st) { return reinterpret_cast<benchmark::State *>(st); }
const benchmark::State *S(const gb_state *st)
{
	return reinterpret_cast<const benchmark::State *>(st);
}
benchmark::internal::Benchmark *B(struct gb_bench *b)
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
// into memory, and keeps the runs for gb_run()'s caller.
class TeeReporter : public benchmark::BenchmarkReporter {
public:
	TeeReporter(const struct tmo_run *run, size_t total)
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
			tmo_progress(run_, "benchmarks", (double)done_ / (double)total_);
	}
	void Finalize() override
	{
		console_.Finalize();
		json_.Finalize();
	}
	std::string json() const { return json_text_.str(); }
	std::vector<gb_result> results;

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
		gb_result g;
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
			if (g.ncounters >= GB_MAX_COUNTERS)
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

	const struct tmo_run *run_;
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

int gb_init(int argc, char **argv)
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

struct gb_bench *gb_register(const char *name, gb_fn *body, void *ctx)
{
	registered++;
	auto *b = benchmark::RegisterBenchmark(
		name, [body, ctx](benchmark::State &st) { body(reinterpret_cast<gb_state *>(&st), ctx); });
	return reinterpret_cast<struct gb_bench *>(b);
}

void gb_iterations(struct gb_bench *b, uint64_t n) { B(b)->Iterations((benchmark::IterationCount)n); }
void gb_repetitions(struct gb_bench *b, int n) { B(b)->Repetitions(n); }
void gb_min_time(struct gb_bench *b, double seconds) { B(b)->MinTime(seconds); }
void gb_threads(struct gb_bench *b, int n) { B(b)->Threads(n); }
void gb_use_real_time(struct gb_bench *b) { B(b)->UseRealTime(); }

int gb_keep_running_batch(gb_state *st, uint64_t n)
{
	return S(st)->KeepRunningBatch((benchmark::IterationCount)n) ? 1 : 0;
}
int gb_thread_index(const gb_state *st) { return S(st)->thread_index(); }
int gb_thread_count(const gb_state *st) { return S(st)->threads(); }
uint64_t gb_max_iterations(const gb_state *st) { return (uint64_t)S(st)->max_iterations; }
void gb_pause_timing(gb_state *st) { S(st)->PauseTiming(); }
void gb_resume_timing(gb_state *st) { S(st)->ResumeTiming(); }
void gb_skip_with_error(gb_state *st, const char *msg) { S(st)->SkipWithError(msg); }

void gb_counter(gb_state *st, const char *name, double value, unsigned flags)
{
	int f = benchmark::Counter::kDefaults;
	if (flags & GB_COUNTER_RATE)
		f |= benchmark::Counter::kIsRate;
	if (flags & GB_COUNTER_AVG_THREADS)
		f |= benchmark::Counter::kAvgThreads;
	S(st)->counters[name] = benchmark::Counter(value, (benchmark::Counter::Flags)f);
}

void gb_items_processed(gb_state *st, int64_t items) { S(st)->SetItemsProcessed(items); }

size_t gb_run(const struct tmo_run *run, struct gb_result **out)
{
	*out = nullptr;
	TeeReporter tee(run, registered);
	benchmark::RunSpecifiedBenchmarks(&tee);
	benchmark::ClearRegisteredBenchmarks();
	registered = 0;
	std::fflush(stdout);
	report_add_gbench_json(run->report, tee.json().c_str());
	size_t n = tee.results.size();
	if (n == 0)
		return 0;
	auto *res = static_cast<gb_result *>(std::calloc(n, sizeof(gb_result)));
	if (res == nullptr)
		return 0;
	std::memcpy(res, tee.results.data(), n * sizeof(gb_result));
	*out = res;
	return n;
}

void gb_results_free(struct gb_result *res) { std::free(res); }

const struct gb_result *gb_find(const struct gb_result *res, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!res[i].error && std::strcmp(res[i].name, name) == 0)
			return &res[i];
	return nullptr;
}

double gb_result_counter(const struct gb_result *r, const char *counter)
{
	for (int i = 0; r != nullptr && i < r->ncounters; i++)
		if (std::strcmp(r->counters[i].name, counter) == 0)
			return r->counters[i].value;
	return NAN;
}

} // extern "C"
