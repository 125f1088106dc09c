#include "cases.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char *only;       /* et_cases_from_args: NULL, every case */
static int watchdog_s;         /* et_case_watchdog: 0, none */
static const char *volatile now = "?";

static void on_alarm(int sig)
{
	(void)sig;
	char msg[200];
	int n = snprintf(msg, sizeof msg, "case %s did not finish in %d s (a deadlock?)\n", now,
	                 watchdog_s);
	if (n > 0)
		(void)!write(2, msg, (size_t)n);
	_exit(1);
}

void et_cases_from_args(int argc, char **argv) { only = argc > 2 ? argv[2] : NULL; }

void et_case_watchdog(int seconds)
{
	watchdog_s = seconds > 0 ? seconds : 0;
	if (watchdog_s)
		signal(SIGALRM, on_alarm);
}

const char *et_case_now(void) { return now; }

void et_run_case(const char *name, void (*fn)(void))
{
	if (only != NULL && strstr(name, only) == NULL)
		return;
	now = name;
	if (watchdog_s)
		alarm((unsigned)watchdog_s);
	int before = tmo_test_failures;
	fn();
	if (watchdog_s)
		alarm(0);
	now = "?";
	printf("%s %s\n", tmo_test_failures == before ? "PASS" : "FAIL", name);
	fflush(stdout);
}
