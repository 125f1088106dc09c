/* The harness's selections: --impl's engines and --scenario's scenarios
 * from comma lists (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kit/sk.h"
#include "tmo/engine.h"

/* The names a selection chooses from: engines or scenarios. */
struct menu {
	const char *kind;                 /* "engine" */
	const char *option;               /* "--impl" */
	const void *const *all;           /* NULL-terminated */
	const char *(*name)(const void *);
	/* A word that names a file (engines: a shared object), or NULL. */
	const void *(*load)(const char *path);
};
static const char *engine_name(const void *e) { return ((const struct tmo_engine_ops *)e)->name; }
static const char *scenario_name(const void *s) { return ((const struct sk_scenario *)s)->name; }

/* --impl=PATH.so: the engine in that shared object (tmo/engine.h), or NULL
 * after naming why (exit EXIT_LOAD). */
static const void *engine_load(const char *path)
{
	const struct tmo_engine_ops *ops;
	char why[512];
	int rc = tmo_engine_load(path, &ops, why, sizeof why);
	if (rc == 0)
		return ops;
	fprintf(stderr, "tmo-harness: --impl=%s: %s: %s\n", path, tmo_load_errname(rc), why);
	return NULL;
}

/* One word of a selection: a name in m->all, or (m->load) a file.  Returns
 * it, or NULL after printing why (*rc: -1, exit 2; -EXIT_LOAD: the file is
 * no engine). */
static const void *find_word(const struct menu *m, const char *tok, int *rc)
{
	if (m->load != NULL && tmo_engine_is_path(tok)) {
		const void *loaded = m->load(tok);
		*rc = loaded == NULL ? -EXIT_LOAD : 0;
		return loaded;
	}
	for (const void *const *e = m->all; *e != NULL; e++)
		if (strcmp(m->name(*e), tok) == 0)
			return *e;
	fprintf(stderr, "tmo-harness: unknown %s '%s' (%ss:", m->kind, tok, m->kind);
	for (const void *const *e = m->all; *e != NULL; e++)
		fprintf(stderr, " %s", m->name(*e));
	fprintf(stderr, ")\n");
	*rc = -1;
	return NULL;
}

/* Free the words of out[0..n) that choose() copied (a file's path; a
 * name is the menu's own string). */
static void words_free(const struct menu *m, const void *const *out, const char **words, int n)
{
	for (int i = 0; words != NULL && i < n; i++)
		if (words[i] != m->name(out[i]))
			free((char *)words[i]);
}

/* Split a comma list; "all" (or no list) selects everything; a word that
 * names a file is loaded (m->load).  words (or NULL) gets the word that
 * chose each (the name, or the file: how a child names it again).  Returns
 * the count, or after printing an error -1 (exit 2) or -EXIT_LOAD (the
 * file is no engine). */
static int choose(const struct menu *m, const char *list, const void **out, const char **words)
{
	int n = 0, rc = 0;
	if (list == NULL || strcmp(list, "all") == 0) {
		for (const void *const *e = m->all; *e != NULL && n < CLI_MAX_SEL; e++) {
			if (words != NULL)
				words[n] = m->name(*e);
			out[n++] = *e;
		}
		return n;
	}
	char *copy = strdup(list), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		const void *e = find_word(m, tok, &rc);
		int dup = 0;
		for (int i = 0; e != NULL && i < n; i++) {
			dup |= out[i] == e;
			if (out[i] != e && strcmp(m->name(out[i]), m->name(e)) == 0) {
				/* two shared objects with one name: their rows would mix */
				fprintf(stderr, "tmo-harness: %s '%s' given twice (%s)\n", m->kind,
				        m->name(e), tok);
				rc = -1;
			}
		}
		if (e != NULL && rc == 0 && !dup && n < CLI_MAX_SEL) {
			if (words != NULL)
				words[n] = m->load != NULL && tmo_engine_is_path(tok) ? strdup(tok) : m->name(e);
			out[n++] = e;
		}
	}
	free(copy);
	if (rc != 0) {
		words_free(m, out, words, n);
		return rc;
	}
	if (n == 0)
		fprintf(stderr, "tmo-harness: %s names no %s\n", m->option, m->kind);
	return n == 0 ? -1 : n;
}


static struct menu engine_menu(void)
{
	return (struct menu){"engine", "--impl", (const void *const *)tmo_engines(), engine_name,
	                     engine_load};
}

int cli_choose_engines(const char *list, const struct tmo_engine_ops **out, const char **words)
{
	struct menu m = engine_menu();
	return choose(&m, list, (const void **)out, words);
}

void cli_engine_words_free(const struct tmo_engine_ops *const *engines, const char **words, int n)
{
	struct menu m = engine_menu();
	words_free(&m, (const void *const *)engines, words, n);
}

int cli_choose_scenarios(const char *list, const struct sk_scenario **out)
{
	static const struct menu m = {"scenario", "--scenario", (const void *const *)sk_scenarios,
	                              scenario_name, NULL};
	return choose(&m, list, (const void **)out, NULL);
}
