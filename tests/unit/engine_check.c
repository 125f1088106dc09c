/*
 * The loader's table check (tmo_engine_check, tmo/engine.h) against the
 * engines built into the library: every built-in table is refused only for
 * its name (taken: it is a built-in's), and the same table under a fresh
 * name passes.  So the check asks of an outside engine nothing the
 * library's own engines (the peers included) do not give, and their caps
 * agree with their park hooks.  Then each rule is shown to refuse: a
 * copy of the condvar table with one thing wrong at a time.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "tmo/engine.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

static void builtins_pass(void)
{
	char why[256];
	int n = 0;
	for (const struct tmo_engine_ops *const *e = tmo_engines(); *e != NULL; e++, n++) {
		CHECK_EQ(tmo_engine_check(*e, why, sizeof why), TMO_LOAD_ETABLE);
		CHECK(strstr(why, "is taken") != NULL);
		struct tmo_engine_ops copy = **e;
		copy.name = "renamed";
		int rc = tmo_engine_check(&copy, why, sizeof why);
		if (rc != 0)
			printf("engine %s refused under a fresh name: %s\n", (*e)->name, why);
		CHECK_EQ(rc, 0);
	}
	printf("engine_check: %d built-in tables pass under a fresh name\n", n);
	CHECK(n > 0);
}

/* A copy of condvar's table with one fault, and the words the refusal must
 * contain. */
static void refused(const char *what, struct tmo_engine_ops bad, const char *want)
{
	char why[256] = "";
	int rc = tmo_engine_check(&bad, why, sizeof why);
	printf("  %-26s -> %s: %s\n", what, tmo_load_errname(rc), why);
	CHECK_EQ(rc, TMO_LOAD_ETABLE);
	CHECK(strstr(why, want) != NULL);
}

static void rules_refuse(void)
{
	const struct tmo_engine_ops *cv = tmo_engine_find("condvar");
	CHECK(cv != NULL && (cv->caps & TMO_CAP_PARK) != 0);
	if (cv == NULL)
		return;
	struct tmo_engine_ops t = *cv;
	t.name = "fresh";
	char why[64];
	CHECK_EQ(tmo_engine_check(&t, why, sizeof why), 0);
	struct tmo_engine_ops b;
	b = t, b.name = NULL, refused("no name", b, "no name");
	b = t, b.name = "", refused("empty name", b, "no name");
	b = t, b.name = "a/b", refused("a '/' in the name", b, "character");
	b = t, b.name = "all", refused("the name 'all'", b, "taken");
	b = t, b.name = "x234567890123456789012345678901234", refused("a long name", b, "longer");
	b = t, b.summary = NULL, refused("no summary", b, "summary");
	b = t, b.create = NULL, refused("no create", b, "create");
	b = t, b.destroy = NULL, refused("no destroy", b, "destroy");
	b = t, b.arm = NULL, refused("no arm", b, "arm");
	b = t, b.cancel = NULL, refused("no cancel", b, "cancel");
	b = t, b.stats = NULL, refused("no stats", b, "stats");
	b = t, b.caps |= 1u << 3, refused("the retired caps bit", b, "0x8");
	b = t, b.caps |= 1u << 9, refused("an unknown caps bit", b, "0x200");
	b = t, b.resolution_ns = 0, refused("resolution 0", b, "resolution");
	b = t, b.testing = NULL, refused("PARK without a hook", b, "no testing->park");
	b = t, b.caps &= ~(unsigned)TMO_CAP_PARK, refused("a hook without PARK", b, "does not declare");
	CHECK_EQ(tmo_engine_check(NULL, why, sizeof why), TMO_LOAD_ETABLE);
	CHECK(tmo_engine_is_path("./x") && tmo_engine_is_path("x.so") && tmo_engine_is_path("/a/b"));
	CHECK(!tmo_engine_is_path("wheel") && !tmo_engine_is_path(".so") && !tmo_engine_is_path(""));
}

int main(void)
{
	builtins_pass();
	rules_refuse();
	return TEST_EXIT();
}
