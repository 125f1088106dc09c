// Google Benchmark 1.7.1 behind the C interface of gbench.h.  See gbench.h
// for the contract; notes here are about Google Benchmark's own behaviour.
#include "gbench.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

// Google Benchmark's flag (benchmark.cc, exported from libbenchmark.so, not
// in its header): --benchmark_enable_random_interleaving sets it for every
// run; sk_gb_run_interleaved sets it for one run and puts back what it found.
namespace benchmark {
extern bool FLAGS_benchmark_enable_random_interleaving;
}

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

// A registration, kept until sk_gb_run(): Google Benchmark matches its
// --benchmark_filter against the full registered name
// ("<name>/min_time:0.300/repeats:5/real_time/threads:1"), which the
// console and the JSON never show.  The harness takes the filter itself and
// matches it against the name they show ("<name>/threads:N"), with Google
// Benchmark's own rules (POSIX extended regex, searched; a leading '-'
// inverts it), and hands Google Benchmark only what it selected.
struct Spec {
	std::string name;
	sk_gb_fn *body;
	void *ctx;
	uint64_t iterations = 0;
	int repetitions = 0;
	double min_time = 0;
	int threads = 1;
	bool real_time = false;
};
std::vector<std::unique_ptr<Spec>> specs;

std::string filter_text = ".";
bool filter_negative = false;
std::regex filter_re(".", std::regex::extended);

Spec *spec_of(struct sk_gb_bench *b) { return reinterpret_cast<Spec *>(b); }

void help_printer() {}

// Google Benchmark's rules for --benchmark_filter (1.7.1, FindBenchmarks):
// empty or "all" is everything, a leading '-' selects what does not match.
// Returns false (printed) for a regex that does not compile.
bool set_filter(std::string spec)
{
	filter_text = spec;
	if (spec.empty() || spec == "all")
		spec = ".";
	filter_negative = spec[0] == '-';
	if (filter_negative)
		spec.erase(0, 1);
	try {
		filter_re = std::regex(spec, std::regex::extended);
	} catch (const std::regex_error &err) {
		std::fprintf(stderr, "tmo-harness: --benchmark_filter=%s: not a regular expression (%s)\n",
		             filter_text.c_str(), err.what());
		return false;
	}
	return true;
}

bool selected(const std::string &shown)
{
	return std::regex_search(shown, filter_re) != filter_negative;
}

std::string shown_name(const Spec &s) { return s.name + "/threads:" + std::to_string(s.threads); }

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
	// The filter is the harness's (see Spec): Google Benchmark runs what
	// it is handed.
	if (!set_filter(benchmark::GetBenchmarkFilter()))
		return -1;
	benchmark::SetBenchmarkFilter(".");
	return 0;
}

int sk_gb_selected(const char *name, int threads)
{
	return selected(std::string(name) + "/threads:" + std::to_string(threads)) ? 1 : 0;
}

struct sk_gb_bench *sk_gb_register(const char *name, sk_gb_fn *body, void *ctx)
{
	specs.push_back(std::make_unique<Spec>());
	Spec *s = specs.back().get();
	s->name = name;
	s->body = body;
	s->ctx = ctx;
	return reinterpret_cast<struct sk_gb_bench *>(s);
}

void sk_gb_iterations(struct sk_gb_bench *b, uint64_t n) { spec_of(b)->iterations = n; }
void sk_gb_repetitions(struct sk_gb_bench *b, int n) { spec_of(b)->repetitions = n; }
void sk_gb_min_time(struct sk_gb_bench *b, double seconds) { spec_of(b)->min_time = seconds; }
void sk_gb_threads(struct sk_gb_bench *b, int n) { spec_of(b)->threads = n; }
void sk_gb_use_real_time(struct sk_gb_bench *b) { spec_of(b)->real_time = true; }

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
	size_t chosen = 0;
	for (const auto &sp : specs) {
		if (!selected(shown_name(*sp)))
			continue;
		sk_gb_fn *body = sp->body;
		void *ctx = sp->ctx;
		auto *b = benchmark::RegisterBenchmark(sp->name.c_str(), [body, ctx](benchmark::State &st) {
			body(reinterpret_cast<sk_gb_state *>(&st), ctx);
		});
		if (sp->iterations > 0)
			b->Iterations((benchmark::IterationCount)sp->iterations);
		if (sp->repetitions > 0)
			b->Repetitions(sp->repetitions);
		if (sp->min_time > 0)
			b->MinTime(sp->min_time);
		if (sp->real_time)
			b->UseRealTime();
		b->Threads(sp->threads);
		chosen++;
	}
	specs.clear();
	if (chosen == 0) // the filter left none: nothing to run or report
		return 0;
	TeeReporter tee(run, chosen);
	benchmark::RunSpecifiedBenchmarks(&tee, ".");
	benchmark::ClearRegisteredBenchmarks();
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

size_t sk_gb_run_interleaved(const struct sk_run *run, struct sk_gb_result **out)
{
	bool was = benchmark::FLAGS_benchmark_enable_random_interleaving;
	benchmark::FLAGS_benchmark_enable_random_interleaving = true;
	size_t n = sk_gb_run(run, out);
	benchmark::FLAGS_benchmark_enable_random_interleaving = was;
	return n;
}

size_t sk_gb_results_concat(struct sk_gb_result *a, size_t n_a, struct sk_gb_result *b,
                            size_t n_b, struct sk_gb_result **out)
{
	*out = nullptr;
	size_t n = n_a + n_b;
	auto *res = n > 0 ? static_cast<sk_gb_result *>(std::calloc(n, sizeof(sk_gb_result))) : nullptr;
	if (res != nullptr) {
		if (n_a > 0)
			std::memcpy(res, a, n_a * sizeof(sk_gb_result));
		if (n_b > 0)
			std::memcpy(res + n_a, b, n_b * sizeof(sk_gb_result));
	}
	std::free(a);
	std::free(b);
	*out = res;
	return res != nullptr ? n : 0;
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
