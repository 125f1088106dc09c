/*
 * The actors scenario's runtime (the scenario is actors.c beside it): actors
 * as threads with a mailbox and Erlang's `receive ... after T` on an engine,
 * built on a timeout scope or on a marker timer; the generated corpus and the
 * word table the word count fills.
 */
#ifndef SK_ACTORS_ACTOR_H
#define SK_ACTORS_ACTOR_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tmo/scope.h"
#include "tmo/wait.h"
#include "tmo/tmo.h"

struct sk_run;

enum via { VIA_SCOPE, VIA_MARKER };
static inline const char *ac_via_name(enum via v) { return v == VIA_SCOPE ? "scope" : "marker"; }

enum msg_kind { MSG_PAIR, MSG_EXIT, MSG_RESULT, MSG_TIMEOUT_MARKER, MSG_SEQ };

struct actor;

struct msg {
	struct tmo_qnode node;
	enum msg_kind kind;
	struct actor *from;
	const char *word; /* into the corpus, not copied */
	uint32_t len;
	uint32_t count;
	uint64_t seq;
};

typedef void actor_fn(struct actor *self);

struct actor {
	pthread_t th;
	struct tmo_queue mbox;
	actor_fn *fn;
	void *arg;
	struct actor *link; /* gets MSG_EXIT from us when we end (trap_exit) */
	struct msg exit_msg;
};

/* The receiving side's timeout machinery and its counters. */
struct receiver {
	struct tmo *eng;
	enum via via;
	struct tmo_queue *mbox;
	struct tmo_timer timer;
	struct msg marker;
	int fast_path; /* look in the mailbox before arming (Erlang, Revactor) */
	long receives, armed, timeouts, stale_markers, lost, eagain;
};

struct doc {
	char *text;
	size_t len;
	uint32_t words;
	struct msg *msgs; /* one per word, reused by every run */
};

struct corpus {
	char **vocab;
	int nvocab;
	struct doc *docs;
	int ndocs;
	uint64_t total_words;
};

struct entry {
	const char *w;
	uint32_t len;
	uint64_t count;
};

struct table {
	struct entry *e;
	size_t cap, used;
	uint64_t total;
};

/* Actor.spawn_link: start fn on its own thread, linked to `link` (which
 * gets MSG_EXIT when it ends). */
int ac_spawn(struct actor *a, actor_fn *fn, void *arg, struct actor *link);
void ac_join(struct actor *a);
/* `receive ... after(after_ns)`: 0 with *out = the message, 1 when the after
 * clause runs, or a negative error. */
int ac_receive(struct receiver *r, int64_t after_ns, struct msg **out);

/* The corpus, generated from the seed, and the word table. */
void ac_corpus_free(struct corpus *c);
int ac_corpus_make(struct corpus *c, uint64_t seed, int ndocs, int words, int nvocab);
int ac_table_init(struct table *t, size_t expect);
struct entry *ac_table_slot(struct table *t, const char *w, uint32_t len);
void ac_table_add(struct table *t, const char *w, uint32_t len, uint64_t n);
int ac_next_word(const struct doc *d, size_t *pos, const char **w, uint32_t *len);

/* Arms refused with TMO_EAGAIN and retried, this run (actors.c). */
extern long ac_eagain;

/* The word count over ndocs documents, sequentially and by 50, 100, 200
 * actors (wordcount.c); returns the violations or an error. */
int ac_wordcount(const struct sk_run *run, struct tmo *eng, struct corpus *corpus,
                 int ndocs, int64_t latency, enum via via);

#endif
