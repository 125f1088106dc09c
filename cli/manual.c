/* The manual (--help) and the listings (--list): see cli.h. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kit/sk.h"

#define HELP_WIDTH 78

/* LEAD then TEXT, wrapped at HELP_WIDTH columns, every line indented by
 * `indent` spaces. */
static void wrap(FILE *f, int indent, const char *lead, const char *text)
{
	int col = fprintf(f, "%*s%s", indent, "", lead);
	int first = 1;
	for (;;) {
		while (*text == ' ')
			text++;
		size_t n = strcspn(text, " ");
		if (n == 0)
			break;
		if (!first && col + 1 + (int)n > HELP_WIDTH)
			col = fprintf(f, "\n%*s", indent, "") - 1;
		else if (!first)
			col += fprintf(f, " ");
		col += fprintf(f, "%.*s", (int)n, text);
		text += n;
		first = 0;
	}
	fputc('\n', f);
}

/* One option or status: its name on its own line, its text below. */
static void item(FILE *f, const char *name, const char *text)
{
	fprintf(f, "    %s\n", name);
	wrap(f, 8, "", text);
}

/* NAME, SYNOPSIS, DESCRIPTION, OPTIONS. */
static void usage_options(FILE *f)
{
	fprintf(f, "NAME\n"
	           "    ./harness (tmo-harness) - timeout scenarios against timeout engines\n"
	           "\n"
	           "SYNOPSIS\n"
	           "    ./harness [--impl=NAME[,NAME...]|all] [--scenario=NAME[,NAME...]|all]\n"
	           "              [--threads=N] [--repeat=N] [--json=FILE] [--quick] [--seed=N]\n"
	           "              [--benchmark_NAME=VALUE ...]\n"
	           "    ./harness --list | --list-metrics | --help\n"
	           "\n"
	           "DESCRIPTION\n");
	wrap(f, 4, "",
	     "Runs every chosen scenario against every chosen engine in one process, printing "
	     "each run's figures and each violation with the command line that reproduces it, "
	     "then a summary per scenario and engine and, when throughput, retention or race ran, "
	     "the ratio and targets tables. With no option: smoke on every engine, then the next "
	     "commands to try. The ./harness script checks the Debian packages (scripts/deps) "
	     "and builds build/release (cmake preset release) when needed; the binary is "
	     "build/release/cli/tmo-harness.");
	fprintf(f, "\nOPTIONS\n");
	item(f, "--impl=LIST",
	     "Engines to run, comma-separated, or all (the default); --list names them. A word "
	     "with a '/' or ending in .so is a shared object that exports an engine "
	     "(tmo/engine.h, docs/writing-an-engine.md): --impl=./my_engine.so.");
	item(f, "--scenario=LIST",
	     "Scenarios to run, comma-separated, or all; default " CLI_DEFAULT_SCENARIO
	     ". Each is described under SCENARIOS.");
	item(f, "--threads=N", "Threads for the multi-threaded parts, 1..256 (default 2).");
	item(f, "--repeat=N",
	     "Scenarios that measure speed (throughput) run N fresh engine instances, 1..100 "
	     "(default 1), and report the median, min and max over them, so one slow mode of one "
	     "instance cannot pass for the engine's speed. With N >= 2 each instance runs in a "
	     "process of its own (the harness starts itself with --instance=I,FD, an option for "
	     "that use only), instance 1 of every engine first, then 2 ...: what moves a figure "
	     "between processes shows in its spread, and scripts/compare judges such runs by "
	     "process. Their Google Benchmark entries in the JSON carry tmo_instance and tmo_pid; "
	     "an instance whose process dies is a violation.");
	item(f, "--json=FILE",
	     "Write the results to FILE and the rows to FILE.csv beside it (NAME.json gives "
	     "NAME.csv). Both are replaced whole after every run: written under a temporary name "
	     "beside them, then renamed, so each always holds a complete document, marked "
	     "\"complete\": false until the last run ended. FILE must be a regular file or not "
	     "exist.");
	item(f, "--quick", "CI sizes (each scenario's Sizes below: full, then --quick).");
	item(f, "--seed=N",
	     "Random seed, 0..18446744073709551615 (default 1), recorded in the JSON as a string "
	     "of digits.");
	item(f, "--list", "Engines (resolution, summary, capabilities) and scenarios.");
	item(f, "--list-metrics",
	     "Every metric each scenario declares, with its unit, one tab-separated line each "
	     "(scenario, metric, unit): scripts/lib/metrics.tsv, which scripts/plot reads, is "
	     "this output.");
	item(f, "--help", "This text.");
	item(f, "--benchmark_NAME=VALUE",
	     "Passed to Google Benchmark, e.g. --benchmark_filter=REGEX; not --benchmark_out or "
	     "--benchmark_format (use --json). Unknown ones are refused.");
}

/* EXIT STATUS, ENVIRONMENT, FILES. */
static void usage_status(FILE *f)
{
	fprintf(f, "\nEXIT STATUS\n");
	item(f, "0", "Every run clean.");
	item(f, "1",
	     "A violation, a run that could not run (its error is named), a run the watchdog "
	     "stopped (still going after 10 minutes with --quick, 30 without), or results that "
	     "could not be written: the JSON, the CSV or standard output (a full disk, a closed "
	     "stdout).");
	item(f, "2",
	     "A bad command line: unknown option, engine or scenario, a bad value, an unwritable "
	     "--json.");
	item(f, "3",
	     "An --impl=PATH that is no engine, named: TMO_LOAD_ENOFILE (no such file), "
	     "TMO_LOAD_EDLOPEN (not loadable), TMO_LOAD_ENOSYM (no tmo_engine_abi symbol), "
	     "TMO_LOAD_EABI (another engine ABI), TMO_LOAD_ETABLE (a NULL slot, no name, "
	     "unknown caps bits).");
	item(f, "77",
	     "Every run was skipped: none could run here and now for want of a per-user kernel "
	     "resource that other processes hold (kernel timers, threads), and each says why "
	     "(\"status\": \"skipped\", \"reason\" in the JSON). Runs skipped beside clean "
	     "ones leave the status 0.");
	item(f, "130, 143",
	     "Interrupted by SIGINT, SIGTERM: the --json files hold the runs that finished, "
	     "\"complete\": false, \"interrupted\": the signal and the run cut short. A signal "
	     "ignored when the harness started (nohup) stays ignored.");
	fprintf(f, "\nENVIRONMENT\n");
	item(f, "TMO_TEST_SCALE=F",
	     "Multiplies every scenario's sizes and time caps (the sanitizer steps of "
	     "scripts/check set 0.1).");
	fprintf(f, "\nFILES\n");
	wrap(f, 4, "",
	     "The JSON holds Google Benchmark's \"context\" and \"benchmarks\" (compare.py reads "
	     "them) and the harness's \"rows\" (scenario, engine, metric, param, value, unit), "
	     "\"runs\", \"violations\", \"targets\" and \"complete\"; context.tmo records the "
	     "command line, the seed, the commit and the machine (CPUs, model, kernel, "
	     "architecture, load average). "
	     "The CSV holds the rows. scripts/plot DIR draws DIR/*.csv and writes DIR/REPORT.md; "
	     "scripts/compare OLD NEW compares two runs (results/README.md).");
}

/* 1,000, 10,000, 200k, 1M, 0.03: short, exact for the values scenarios use. */
static void format_number(char *buf, size_t n, double v)
{
	if (v >= 1e6 && fmod(v, 1e5) == 0)
		snprintf(buf, n, "%gM", v / 1e6);
	else if (v >= 1e5 && fmod(v, 100) == 0)
		snprintf(buf, n, "%gk", v / 1e3);
	else if (v >= 1e3 && v < 1e6 && fmod(v, 1) == 0)
		snprintf(buf, n, "%d,%03d", (int)(v / 1000), (int)fmod(v, 1000));
	else
		snprintf(buf, n, "%g", v);
}

/* "arms 10M (--quick 1M), time_cap 120 s (--quick 15 s)": the sizes table. */
static void format_sizes(char *buf, size_t n, const struct sk_size *z)
{
	size_t at = 0;
	buf[0] = '\0';
	for (; z != NULL && z->name != NULL && at < n; z++) {
		const char *sp = z->unit[0] ? " " : "";
		char full[32], quick[32];
		format_number(full, sizeof full, z->full);
		format_number(quick, sizeof quick, z->quick);
		at += (size_t)snprintf(buf + at, n - at, "%s%s %s%s%s", at ? ", " : "", z->name, full,
		                       sp, z->unit);
		if (z->quick != z->full && at < n)
			at += (size_t)snprintf(buf + at, n - at, " (--quick %s%s%s)", quick, sp, z->unit);
	}
}

void cli_usage(FILE *f)
{
	usage_options(f);
	usage_status(f);
	fprintf(f, "\nSCENARIOS\n");
	wrap(f, 4, "",
	     "Each scenario below runs against each chosen engine. Besides the failures listed, "
	     "a run fails when it cannot run at all (the engine cannot be created, memory runs "
	     "out): its enum tmo_error is printed.");
	for (const struct sk_scenario *const *s = sk_scenarios; *s != NULL; s++) {
		fprintf(f, "\n    %s (%s%s)\n", (*s)->name,
		        (*s)->correctness ? "correctness" : "benchmark",
		        strcmp((*s)->name, CLI_DEFAULT_SCENARIO) == 0 ? ", the default" : "");
		wrap(f, 8, "", (*s)->summary);
		if ((*s)->sizes != NULL) {
			char sizes[1024];
			format_sizes(sizes, sizeof sizes, (*s)->sizes);
			wrap(f, 8, "Sizes: ", sizes);
		}
		wrap(f, 8, "Runs: ", (*s)->params != NULL ? (*s)->params : "(not documented)");
		wrap(f, 8, "Fails when: ",
		     (*s)->fails_when != NULL ? (*s)->fails_when : "(not documented)");
	}
}

int cli_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "tmo-harness: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(./harness --help for usage, --list for engines and scenarios)\n");
	return 2;
}

/* Indexed by the capability's bit (enum tmo_capability); bit 3 is retired. */
static const char *cap_names[] = {
	[0] = "lockfree-arm", [1] = "no-syscall", [2] = "no-alloc", [4] = "concurrent-callbacks",
	[5] = "thread-per-timer", [6] = "park", [7] = "run-on-loop",
};

static void format_ns(char *buf, size_t n, int64_t ns)
{
	if (ns >= TMO_NSEC_PER_MSEC && ns % TMO_NSEC_PER_MSEC == 0)
		snprintf(buf, n, "%" PRId64 " ms", ns / TMO_NSEC_PER_MSEC);
	else if (ns >= TMO_NSEC_PER_USEC && ns % TMO_NSEC_PER_USEC == 0)
		snprintf(buf, n, "%" PRId64 " us", ns / TMO_NSEC_PER_USEC);
	else
		snprintf(buf, n, "%" PRId64 " ns", ns);
}

void cli_list(void)
{
	printf("engines (name, resolution, summary; capabilities):\n");
	const struct tmo_engine_ops *const *e = tmo_engines();
	if (*e == NULL)
		printf("  (none built: add impls/NAME.c)\n");
	for (; *e != NULL; e++) {
		char res[32];
		format_ns(res, sizeof res, (*e)->resolution_ns);
		printf("  %-10s %8s  %s\n", (*e)->name, res, (*e)->summary);
		printf("  %-10s %8s  caps:", "", "");
		int any = 0;
		for (unsigned b = 0; b < sizeof cap_names / sizeof cap_names[0]; b++)
			if (((*e)->caps & (1u << b)) && cap_names[b] != NULL) {
				printf("%s %s", any ? "," : "", cap_names[b]);
				any = 1;
			}
		printf("%s\n", any ? "" : " none");
	}
	printf("\nscenarios (name, kind, summary):\n");
	for (const struct sk_scenario *const *s = sk_scenarios; *s != NULL; s++)
		printf("  %-12s %-11s %s\n", (*s)->name, (*s)->correctness ? "correctness" : "benchmark",
		       (*s)->summary);
}
