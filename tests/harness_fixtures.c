/*
 * The harness's correctness checks can fail: broken fixture engines (thin
 * wrappers around the condvar engine, never in the registry or --list) run
 * through the real race, expiry and coalesce scenarios, and each scenario
 * must count violations.  A check that passes a broken engine proves nothing
 * about the real ones.
 *
 *   liar   cancel says TMO_CANCEL_PREVENTED even when the callback ran
 *          -> race must count "both"
 *   early  arms with half the timeout -> expiry must count early fires
 *   lossy  silently drops every 7th arm (returns 0, never arms)
 *          -> coalesce must count lost timers (expiry would too, after
 *          waiting out its grace period: left out to keep the test short)
 *   honest the plain wrapper -> coalesce must pass (the wrapper itself is
 *          sound, so the failures above are the bugs')
 *
 * Registered by tests/harness.cmake (not by the unit_/engine_ globs: it
 * links the scenarios and the harness's report sink).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "scenario.h"

extern const struct tmo_scenario tmo_scenario_race, tmo_scenario_expiry, tmo_scenario_coalesce;

enum bug { HONEST, LIAR, EARLY, LOSSY };

struct fx {
	struct tmo_base base;
	struct tmo *inner;
	atomic_ulong arms;
};

#define FX(e) ((struct fx *)(void *)(e))

static int fx_create(const struct tmo_config *cfg, struct tmo **out, const struct tmo_engine_ops *ops)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL)
		return TMO_ENOMEM;
	f->base.ops = ops;
	int rc = tmo_create("condvar", cfg, &f->inner);
	if (rc != 0) {
		free(f);
		return rc;
	}
	*out = (struct tmo *)(void *)f;
	return 0;
}

static void fx_destroy(struct tmo *e)
{
	tmo_destroy(&FX(e)->inner);
	free(e);
}

static int fx_stats(struct tmo *e, struct tmo_stats *out) { return tmo_stats(FX(e)->inner, out); }
static int fx_park(struct tmo *e, int on) { return tmo_park(FX(e)->inner, on); }
static int fx_arm(struct tmo *e, struct tmo_timer *t, int64_t ns, tmo_callback *cb, void *arg)
{
	return tmo_ops(FX(e)->inner)->arm(FX(e)->inner, t, ns, cb, arg);
}
static int fx_cancel(struct tmo *e, struct tmo_timer *t) { return tmo_ops(FX(e)->inner)->cancel(FX(e)->inner, t); }

static int liar_cancel(struct tmo *e, struct tmo_timer *t)
{
	int rc = tmo_ops(FX(e)->inner)->cancel(FX(e)->inner, t);
	return rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED ? TMO_CANCEL_PREVENTED : rc;
}

static int early_arm(struct tmo *e, struct tmo_timer *t, int64_t ns, tmo_callback *cb, void *arg)
{
	return tmo_ops(FX(e)->inner)->arm(FX(e)->inner, t, ns / 2, cb, arg);
}

static int lossy_arm(struct tmo *e, struct tmo_timer *t, int64_t ns, tmo_callback *cb, void *arg)
{
	if (atomic_fetch_add(&FX(e)->arms, 1) % 7 == 6)
		return 0; /* accepted, never armed: the timer is lost */
	return tmo_ops(FX(e)->inner)->arm(FX(e)->inner, t, ns, cb, arg);
}

static int lossy_cancel(struct tmo *e, struct tmo_timer *t)
{
	int rc = tmo_ops(FX(e)->inner)->cancel(FX(e)->inner, t);
	/* A dropped timer was never armed: pretend the cancel worked. */
	return rc == TMO_ENOTARMED ? TMO_CANCEL_PREVENTED : rc;
}

#define FIXTURE(NAME, ARM, CANCEL)                                                                  \
	extern const struct tmo_engine_ops fx_##NAME;                                               \
	static int NAME##_create(const struct tmo_config *cfg, struct tmo **out)                    \
	{                                                                                           \
		return fx_create(cfg, out, &fx_##NAME);                                             \
	}                                                                                           \
	const struct tmo_engine_ops fx_##NAME = {                                                   \
		#NAME, "fixture: condvar with a deliberate bug", TMO_CAP_PARK, 50000, NAME##_create, \
		fx_destroy, ARM, CANCEL, fx_stats, fx_park, NULL,                                   \
	}

FIXTURE(honest, fx_arm, fx_cancel);
FIXTURE(liar, fx_arm, liar_cancel);
FIXTURE(early, early_arm, fx_cancel);
FIXTURE(lossy, lossy_arm, lossy_cancel);

static int failures;

static void expect(const struct tmo_scenario *sc, const struct tmo_engine_ops *ops, int want_fail)
{
	struct report_opts ro = {NULL, "harness_fixtures", 2, 1, 1, NULL};
	struct tmo_report *rep = report_open(&ro);
	struct tmo_run run = {ops, 2, 1, 1, rep, 1};
	report_begin_run(rep, sc->name, ops->name);
	printf("---- %s on fixture '%s' (want %s) ----\n", sc->name, ops->name,
	       want_fail ? "violations" : "clean");
	int v = sc->run(&run);
	report_end_run(rep, v, 0);
	int ok = want_fail ? v > 0 : v == 0;
	printf("---- %s/%s: %d violations: %s ----\n", sc->name, ops->name, v,
	       ok ? "as expected" : "WRONG");
	failures += !ok;
	report_close(rep);
}

int main(void)
{
	/* Small sizes: the point is that the checks fire, not the load. */
	setenv("TMO_TEST_SCALE", "0.02", 1);
	expect(&tmo_scenario_race, &fx_liar, 1);
	expect(&tmo_scenario_expiry, &fx_early, 1);
	expect(&tmo_scenario_coalesce, &fx_lossy, 1);
	expect(&tmo_scenario_coalesce, &fx_honest, 0);
	printf("%s\n", failures ? "FAIL: a check did not behave" : "every check caught its bug");
	return failures ? 1 : 0;
}
