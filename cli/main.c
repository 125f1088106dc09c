/*
 * tmo-harness: runs scenarios (scenarios/NAME.c) against engines (impls/NAME.c).
 * `./harness --help` is the manual.  Exit status: 0 all runs clean, 1 a
 * violation, a run that could not run, or results that could not be
 * written, 2 bad command line, 3 an --impl=PATH.so that is no engine
 * (tmo/engine.h: the error's name and why), 77 every run skipped (a per-user resource
 * other processes hold), 130/143 interrupted (what finished is kept).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "cli.h"
#include "digits.h"
#include "kit/gbench.h"
#include "kit/sk.h"
#include "targets.h"
#include "tmo/engine.h"

#define MAX_SEL CLI_MAX_SEL

/* The watchdog's limit per scenario x engine run, far above any healthy run
 * (the race scenario's time cap is 120 s). */
#ifndef WATCHDOG_QUICK_S
#define WATCHDOG_QUICK_S 600
#endif
#define WATCHDOG_FULL_S 1800

static const struct option longopts[] = {
	{"impl", required_argument, NULL, 'i'},   {"scenario", required_argument, NULL, 's'},
	{"threads", required_argument, NULL, 't'}, {"json", required_argument, NULL, 'j'},
	{"quick", no_argument, NULL, 'q'},         {"seed", required_argument, NULL, 'S'},
	{"list", no_argument, NULL, 'l'},          {"help", no_argument, NULL, 'h'},
	{"repeat", required_argument, NULL, 'r'},  {"list-metrics", no_argument, NULL, 'm'},
	{"instance", required_argument, NULL, 'I'}, {NULL, 0, NULL, 0},
};

/* ARG is a long option that takes a value and was not given one with '=':
 * the next element is its value (e.g. "--threads 4"). */
static int value_follows(const char *arg)
{
	if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0' || strchr(arg, '=') != NULL)
		return 0;
	for (const struct option *o = longopts; o->name != NULL; o++)
		if (o->has_arg == required_argument && strncmp(o->name, arg + 2, strlen(arg + 2)) == 0)
			return 1;
	return 0;
}

/* The command line, parsed. */
struct opts {
	const char *impl, *scen, *json;
	uint64_t threads, seed, repeat;
	int quick, list, list_metrics;
	/* --instance=I,FD (kit/instance.c): this process is instance I of a
	 * parent's --repeat run (FD > 2); FD 0 otherwise. */
	int instance, instance_fd;
	/* Google Benchmark's flags and ours, each with argv[0] first.  Static
	 * storage: the vectors live as long as the process, so the early
	 * returns leak nothing (LeakSanitizer, asan step). */
	char **ours, **gbs;
	int nours, ngbs;
};

/* Google Benchmark's flags go to it, the rest to getopt_long.  Returns 0, or
 * the exit status of a bad command line. */
static int split_args(int argc, char **argv, struct opts *o)
{
	static char **ours, **gbs;
	ours = calloc((size_t)argc + 1, sizeof *ours);
	gbs = calloc((size_t)argc + 1, sizeof *gbs);
	int nours = 0, ngbs = 0, options_end = 0;
	ours[nours++] = gbs[ngbs++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (options_end || (i > 1 && value_follows(argv[i - 1]))) {
			ours[nours++] = argv[i];
		} else if (strcmp(argv[i], "--") == 0) {
			options_end = 1;
			ours[nours++] = argv[i];
		} else if (argv[i][0] == '-' && argv[i][1] != '-' && argv[i][1] != '\0') {
			/* Every option is long: "-xy" is the unknown option "-x". */
			char opt[3] = {'-', argv[i][1], '\0'};
			return cli_usage_error("unknown option '%s' (options are long: --impl=NAME ...)", opt);
		} else if (strncmp(argv[i], "--benchmark_", 12) == 0) {
			/* The harness owns the output: its console table and --json. */
			if (strncmp(argv[i], "--benchmark_out", 15) == 0 ||
			    strncmp(argv[i], "--benchmark_format", 18) == 0)
				return cli_usage_error("'%s': results go to --json=FILE (Google Benchmark's "
				                       "JSON is in it)",
				                       argv[i]);
			gbs[ngbs++] = argv[i];
		} else {
			ours[nours++] = argv[i];
		}
	}
	o->ours = ours, o->gbs = gbs, o->nours = nours, o->ngbs = ngbs;
	return 0;
}

/* An option with a number (digits only, cli/digits.h): its value, or the
 * exit status of a bad one, named: "--seed=' -1': not a number ...". */
static int number(const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
	enum cli_num r = cli_parse_u64(optarg, min, max, out);
	if (r == CLI_NUM_OK)
		return 0;
	char fmt[224];
	snprintf(fmt, sizeof fmt, "--%s='%%s': %s: want an integer %llu..%llu", name,
	         cli_num_words(r), (unsigned long long)min, (unsigned long long)max);
	return cli_usage_error(fmt, optarg);
}

/* --instance=I,FD: an instance index and an open descriptor (kit/instance.c
 * starts the harness so; not for people).  Returns 0 or an exit status. */
static int instance_option(struct opts *o)
{
	uint64_t i, fd;
	char *comma = strchr(optarg, ',');
	if (comma == NULL)
		return cli_usage_error("--instance='%s': want I,FD (the harness starts itself so)", optarg);
	*comma = '\0';
	int bad = cli_parse_u64(optarg, 0, 99, &i) != CLI_NUM_OK ||
	          cli_parse_u64(comma + 1, 3, 1 << 20, &fd) != CLI_NUM_OK || fcntl((int)fd, F_GETFD) < 0;
	*comma = ',';
	if (bad)
		return cli_usage_error("--instance='%s': want I,FD: an index 0..99 and an open descriptor",
		                       optarg);
	o->instance = (int)i, o->instance_fd = (int)fd;
	/* The parent waits on this process: it should not outlive the parent. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	return 0;
}

/* getopt_long over our options.  Returns -1 to go on, or an exit status. */
static int parse_options(struct opts *o)
{
	opterr = 0;
	int c, rc = 0;
	while (rc == 0 && (c = getopt_long(o->nours, o->ours, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': o->impl = optarg; break;
		case 's': o->scen = optarg; break;
		case 'j': o->json = optarg; break;
		case 'q': o->quick = 1; break;
		case 'l': o->list = 1; break;
		case 'm': o->list_metrics = 1; break;
		case 'h': cli_usage(stdout); return cli_finish_output(0);
		case 't': rc = number("threads", 1, 256, &o->threads); break;
		case 'r': rc = number("repeat", 1, 100, &o->repeat); break;
		case 'S': rc = number("seed", 0, UINT64_MAX, &o->seed); break;
		case 'I': rc = instance_option(o); break;
		case ':': return cli_usage_error("option '%s' needs a value", o->ours[optind - 1]);
		default:
			/* Short options were refused above: optopt set means a long
			 * option that takes no value was given one. */
			for (const struct option *l = longopts; optopt != 0 && l->name != NULL; l++)
				if (l->val == optopt)
					return cli_usage_error("option '--%s' takes no value", l->name);
			return cli_usage_error("unknown or ambiguous option '%s'", o->ours[optind - 1]);
		}
	}
	if (rc != 0)
		return rc;
	if (optind < o->nours)
		return cli_usage_error("unexpected argument '%s'", o->ours[optind]);
	if (sk_gb_init(o->ngbs, o->gbs) != 0)
		return cli_usage_error("%s", "Google Benchmark flags above refused");
	return -1;
}

/* The command line as the JSON records it: "./harness" and the arguments. */
static char *command_line(int argc, char **argv)
{
	size_t cmdlen = 16;
	for (int i = 0; i < argc; i++)
		cmdlen += strlen(argv[i]) + 1;
	char *command = calloc(1, cmdlen);
	strcpy(command, "./harness");
	for (int i = 1; i < argc; i++) {
		strcat(command, " ");
		strcat(command, argv[i]);
	}
	return command;
}

/* What a scenario x engine run came to, for the summary. */
struct outcome {
	const char *scenario, *engine;
	int result;
	double seconds;
};

/* What was selected, and where the runs' outcomes go. */
struct plan {
	const struct tmo_engine_ops *engines[MAX_SEL];
	const char *words[MAX_SEL]; /* --impl's word for each engine */
	const struct sk_scenario *scenarios[MAX_SEL];
	int nengines, nscen;
	struct outcome *outcomes;
	int nout, failed, skipped;
};

/* The watchdog's limit for one scenario x engine run (or one instance). */
static int64_t watchdog_limit(const struct opts *o)
{
	return (o->quick ? WATCHDOG_QUICK_S : WATCHDOG_FULL_S) * TMO_NSEC_PER_SEC;
}

/* The command that runs one instance of a --repeat run in a process of its
 * own (kit/instance.c adds the scenario, the instance and the results
 * file): this engine, the sizes, the seed and Google Benchmark's flags.
 * NULL when instances run here: one instance, or this is such a child. */
static const char **instance_command(const struct opts *o, const char *word, char opt[3][320])
{
	if (o->repeat < 2 || o->instance_fd > 0)
		return NULL;
	const char **argv = calloc((size_t)o->ngbs + 6, sizeof *argv);
	if (argv == NULL)
		return NULL;
	int n = 0;
	argv[n++] = o->ours[0];
	snprintf(opt[0], sizeof opt[0], "--impl=%s", word);
	snprintf(opt[1], sizeof opt[1], "--threads=%llu", (unsigned long long)o->threads);
	snprintf(opt[2], sizeof opt[2], "--seed=%llu", (unsigned long long)o->seed);
	for (int i = 0; i < 3; i++)
		argv[n++] = opt[i];
	if (o->quick)
		argv[n++] = "--quick";
	for (int i = 1; i < o->ngbs; i++)
		argv[n++] = o->gbs[i];
	return argv;
}

/* One scenario against one engine; the results are written after it, so a
 * crash or the watchdog leaves the runs that finished ("complete": false). */
static void run_one(const struct opts *o, struct plan *p, struct sk_sink *rep,
                    const struct sk_scenario *sc, int e)
{
	const struct tmo_engine_ops *ops = p->engines[e];
	char opt[3][320];
	const char **argv = instance_command(o, p->words[e], opt);
	struct sk_run run = {ops,  (int)o->threads, o->quick,       o->seed,
	                     rep,  (int)o->repeat,  argv,           o->instance,
	                     o->instance_fd};
	if (o->instance_fd == 0) /* a child's tables follow its parent's heading */
		printf("\n==== %s / %s ====\n", sc->name, ops->name);
	sk_sink_begin_run(rep, sc, ops->name);
	cli_watchdog_arm(sc->name, ops->name, watchdog_limit(o));
	int64_t t0 = tmo_now_ns();
	int result = sc->run(&run);
	cli_watchdog_arm(NULL, NULL, 0);
	double secs = (double)(tmo_now_ns() - t0) / 1e9;
	if (sk_sink_end_run(rep, result, secs) != 0)
		p->failed = 1; /* rows refused: printed as they came */
	if (result == SK_SKIPPED)
		p->skipped++;
	else if (result < 0)
		fprintf(stderr, "[%s/%s] could not run: %s (%s)\n", sc->name, ops->name,
		        tmo_errname(result), tmo_strerror(result));
	if (result != 0 && result != SK_SKIPPED)
		p->failed = 1;
	p->outcomes[p->nout++] = (struct outcome){sc->name, ops->name, result, secs};
	if (sk_sink_write(rep, 0) != 0)
		p->failed = 1;
	free(argv);
}

/* A scenario whose --repeat instances run in processes (sk_scenario's
 * instances): instance 1 of every engine, then 2 ..., ahead of the runs. */
static void prerun(const struct opts *o, const struct plan *p, const struct sk_scenario *sc)
{
	if (!sc->instances || o->repeat < 2 || o->instance_fd > 0)
		return;
	printf("\n==== %s: %d instances of each engine, each in a process of its own: instance 1 "
	       "of every engine, then 2 ... ====\n",
	       sc->name, (int)o->repeat);
	for (int i = 0; i < (int)o->repeat; i++) {
		for (int e = 0; e < p->nengines; e++) {
			char opt[3][320];
			const char **argv = instance_command(o, p->words[e], opt);
			printf("---- %s / %s: instance %d of %d ----\n", sc->name, p->engines[e]->name,
			       i + 1, (int)o->repeat);
			cli_watchdog_arm(sc->name, p->engines[e]->name, watchdog_limit(o));
			if (argv != NULL)
				sk_instance_prerun(argv, sc->name, p->engines[e]->name, i);
			cli_watchdog_arm(NULL, NULL, 0);
			free(argv);
		}
	}
}

static void print_summary(const struct plan *p)
{
	printf("\n==== summary ====\n");
	printf("%-12s %-10s %-12s %8s\n", "scenario", "engine", "result", "seconds");
	for (int i = 0; i < p->nout; i++) {
		const struct outcome *x = &p->outcomes[i];
		char res[48];
		if (x->result == SK_SKIPPED)
			snprintf(res, sizeof res, "skipped");
		else if (x->result < 0)
			snprintf(res, sizeof res, "%s", tmo_errname(x->result));
		else if (x->result > 0)
			snprintf(res, sizeof res, "%d violations", x->result);
		else
			snprintf(res, sizeof res, "ok");
		printf("%-12s %-10s %-12s %8.2f\n", x->scenario, x->engine, res, x->seconds);
	}
}

/* The verdict line and the exit status of a finished plan. */
static int verdict(const struct opts *o, const struct plan *p)
{
	int all_skipped = !p->failed && p->nout > 0 && p->skipped == p->nout;
	if (p->failed)
		printf("FAILED: see the violations / errors above\n");
	else if (all_skipped)
		printf("every run skipped: see SKIPPED above for why\n");
	else if (p->skipped)
		printf("all runs clean, %d skipped (see SKIPPED above)\n", p->skipped);
	else
		printf("all runs clean\n");
	if (!p->failed && strcmp(o->scen, CLI_DEFAULT_SCENARIO) == 0 &&
	    tmo_engine_find(p->engines[0]->name) != NULL)
		printf("next: ./harness --list (engines, scenarios); ./harness --impl=%s "
		       "--scenario=throughput --quick\n",
		       p->engines[0]->name);
	return p->failed ? 1 : all_skipped ? EXIT_ALL_SKIPPED : 0;
}

/* Every selected scenario against every selected engine, then the summary,
 * the targets and the final results.  Returns the exit status. */
static int run_plan(const struct opts *o, struct plan *p, struct sk_sink *rep)
{
	if (cli_signals_start(rep, o->json) != 0) {
		fprintf(stderr, "tmo-harness: cannot start the signal thread\n");
		return 1;
	}
	p->outcomes = calloc((size_t)(p->nscen * p->nengines), sizeof *p->outcomes);
	cli_watchdog_start();
	for (int s = 0; s < p->nscen; s++) {
		prerun(o, p, p->scenarios[s]);
		for (int e = 0; e < p->nengines; e++)
			run_one(o, p, rep, p->scenarios[s], e);
		sk_instance_discard();
	}
	cli_watchdog_stop();
	if (o->instance_fd > 0) { /* a child: its parent summarises */
		int rc = cli_signals_finish(sk_sink_write, rep) != 0 || p->failed;
		free(p->outcomes);
		return rc;
	}
	print_summary(p);
	targets_print(rep, p->scenarios, p->nscen, p->engines, p->nengines);
	if (cli_signals_finish(sk_sink_write, rep) != 0) /* again: with the targets, complete */
		p->failed = 1;
	if (o->json != NULL)
		printf("\nresults: %s and %s\n", o->json, sk_sink_csv_path(rep));
	int rc = verdict(o, p);
	free(p->outcomes);
	return rc;
}

/* The selection, the report and the runs.  Returns the exit status. */
static int select_and_run(int argc, char **argv, const struct opts *o, struct plan *p)
{
	p->nengines = cli_choose_engines(o->impl, p->engines, p->words);
	if (p->nengines == 0)
		fprintf(stderr, "tmo-harness: no engine is built (impls/ is empty)\n");
	if (p->nengines == -EXIT_LOAD)
		return EXIT_LOAD;
	if (p->nengines <= 0 || (p->nscen = cli_choose_scenarios(o->scen, p->scenarios)) < 0)
		return 2;
	const char *scale = getenv("TMO_TEST_SCALE");
	if (scale != NULL)
		printf("TMO_TEST_SCALE=%s: scenario sizes are scaled by it (sanitizer runs)\n", scale);
	char *command = command_line(argc, argv);
	struct sk_sink_opts ro = {o->json, "./harness", (int)o->threads, o->quick, o->seed, command};
	struct sk_sink *rep = sk_sink_open(&ro);
	int rc;
	if (rep == NULL) {
		fprintf(stderr, "tmo-harness: out of memory\n");
		rc = 1;
	} else if (sk_sink_check_writable(rep) != 0) {
		/* An unwritable --json is a bad command line: found out before
		 * running, without touching the file. */
		rc = cli_usage_error("--json=%s: cannot write the results there", o->json);
	} else {
		rc = run_plan(o, p, rep);
	}
	sk_sink_close(rep);
	free(command);
	return rc;
}

/* select_and_run, then the words it copied freed on every way out. */
static int harness(int argc, char **argv, const struct opts *o)
{
	struct plan p = {.nout = 0};
	int rc = select_and_run(argc, argv, o, &p);
	cli_engine_words_free(p.engines, p.words, p.nengines);
	return rc;
}

int main(int argc, char **argv)
{
	cli_hold_standard_fds();
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct opts o = {.scen = CLI_DEFAULT_SCENARIO, .threads = 2, .seed = 1, .repeat = 1};
	int rc = split_args(argc, argv, &o);
	if (rc == 0)
		rc = parse_options(&o);
	if (rc >= 0)
		return rc;
	/* The declarations are checked before anything runs: a target naming
	 * a metric no scenario reports is the harness's bug, exit 1. */
	if (targets_check(sk_scenarios, stderr) != 0) {
		fprintf(stderr, "tmo-harness: the scenarios' metric or target tables are wrong\n");
		return 1;
	}
	if (o.list) {
		cli_list();
		return cli_finish_output(0);
	}
	if (o.list_metrics) {
		targets_list_metrics(sk_scenarios, stdout);
		return cli_finish_output(0);
	}
	rc = harness(argc, argv, &o);
	free(o.ours);
	free(o.gbs);
	return cli_finish_output(rc);
}
