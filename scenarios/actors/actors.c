/*
 * actors: the Revactor document's MapReduce word count, on every engine.
 *
 * Actors are OS threads (one pthread each), with a mailbox (a struct
 * tmo_queue of include/tmo/scope.h) and Erlang's `receive ... after T`:
 * receive with a timeout.  Like Erlang and Revactor, receive looks in the
 * mailbox first and starts the `after` timer only when it is empty.  Two ways
 * to build the timeout on an engine are compared:
 *
 *   scope  — the wait runs in a timeout scope (throw mode): the engine's
 *            callback interrupts the blocking pop (Timeout.timeout { q.pop });
 *   marker — the engine's callback pushes a per-receiver timeout marker into
 *            the mailbox (eregon's "push some marker on the queue"); a receive
 *            that got a message first cancels the timer and, if the callback
 *            already ran, unlinks the stale marker.
 *
 * Workload (no network: the corpus is generated from --seed): one mapper
 * actor per input document sends (word, 1) for every word to a reducer actor
 * linked to it, then exits (the reducer traps the exit as a message); the
 * reducer collects with receive-with-timeout until every mapper has exited,
 * and sends the counts to its parent.  Sequential vs 50 / 100 / 200 actors,
 * with and without a simulated fetch latency per document (the blog's gain
 * came from overlapping network reads; with none, actors only add cost).
 * The counts must equal the sequential result exactly.
 *
 * Then the race on its own: a producer sends numbered messages with gaps
 * around the receiver's `after`, so messages and timeouts collide; every
 * message must arrive once, in order.  And the cost of one
 * receive-with-timeout on this engine (timer armed, message present), and
 * how late an `after` clause runs.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "actor.h"
#include "kit/util.h"

/* Every figure this scenario reports (sk.h: struct sk_metric). */
static const struct sk_metric actors_metrics[] = {
	{"wordcount_sequential_ms", "ms"}, {"wordcount_actors_ms", "ms"},
	{"wordcount_after_ran", "count"}, {"wordcount_count_mismatches", "count"},
	{"race_bad", "count"}, {"race_after_ran", "count"}, {"receive_plain_ns", "ns"},
	{"receive_after_ns", "ns"}, {"after_late_us_p50", "us"}, {"after_late_us_max", "us"},
	{"arm_eagain_retries", "count"}, {NULL, NULL},
};

static int actors_run(const struct sk_run *run);

const struct sk_scenario sk_scenario_actors = {
	.name = "actors",
	.summary = "Revactor MapReduce word count: actors (threads) with receive-with-timeout on the "
	           "engine (scope or marker), sequential vs 50/100/200 actors, message/timeout race, "
	           "cost per receive",
	.correctness = 1,
	.run = actors_run,
	.params = "The Revactor MapReduce word count: 200 generated documents of 1,000 words "
	          "(--quick: 200), counted sequentially and by 50, 100, 200 actors (threads with "
	          "mailboxes and receive-with-timeout, built on a scope and on a marker timer), "
	          "without and with a simulated fetch latency (5 ms, --quick 2 ms); then messages "
	          "racing the receive timeout, 2,000 (--quick: 300); then the cost of one "
	          "receive-with-timeout. --seed generates the corpus.",
	.fails_when = "a count differs from the sequential result, a message is lost, duplicated or "
	              "out of order, or a receive returns the wrong thing.",
	.metrics = actors_metrics,
};

#define US TMO_NSEC_PER_USEC
#define MS TMO_NSEC_PER_MSEC

static long ac_eagain; /* arms refused with TMO_EAGAIN and retried, this run */

/* ---- the word count ------------------------------------------------------------------ */

struct job {
	const struct sk_run *run;
	struct corpus *corpus;
	int ndocs;
	int64_t latency; /* simulated fetch of one document */
	int64_t after;   /* the reducer's receive timeout */
	struct receiver rx;
	struct table result;
	struct actor *mappers;
	struct actor *parent;
	struct msg result_msg;
	int error;
};

static void sequential(struct corpus *c, int ndocs, int64_t latency, struct table *t)
{
	for (int d = 0; d < ndocs; d++) {
		struct doc *doc = &c->docs[d];
		if (latency > 0)
			sk_sleep_ns(latency); /* the fetch */
		const char *w;
		uint32_t len;
		for (size_t pos = 0; ac_next_word(doc, &pos, &w, &len);)
			ac_table_add(t, w, len, 1);
	}
}

struct mapper_arg {
	struct job *job;
	struct doc *doc;
	struct actor *reducer;
};

static void mapper(struct actor *self)
{
	struct mapper_arg *m = self->arg;
	if (m->job->latency > 0)
		tmo_sleep(m->job->latency); /* the fetch */
	uint32_t k = 0;
	const char *w;
	uint32_t len;
	for (size_t pos = 0; ac_next_word(m->doc, &pos, &w, &len) && k < m->doc->words;) {
		struct msg *msg = &m->doc->msgs[k++];
		msg->kind = MSG_PAIR;
		msg->from = self;
		msg->word = w;
		msg->len = len;
		msg->count = 1;
		tmo_queue_push(&m->reducer->mbox, &msg->node);
	}
}

static void reducer(struct actor *self)
{
	struct job *j = self->arg;
	struct mapper_arg *margs = calloc((size_t)j->ndocs, sizeof *margs);
	int spawned = 0;
	if (margs == NULL) {
		j->error = TMO_ENOMEM;
	} else {
		for (; spawned < j->ndocs; spawned++) {
			margs[spawned] = (struct mapper_arg){j, &j->corpus->docs[spawned], self};
			int rc = ac_spawn(&j->mappers[spawned], mapper, &margs[spawned], self);
			if (rc != 0) {
				j->error = rc;
				break;
			}
		}
	}
	/* collect_partials: until every mapper we spawned has exited. */
	j->rx.mbox = &self->mbox;
	int n = spawned;
	while (n > 0) {
		struct msg *m;
		int rc = ac_receive(&j->rx, j->after, &m);
		if (rc < 0) {
			j->error = rc;
			break;
		}
		if (rc == 1)
			continue; /* after: nothing arrived in time; keep waiting */
		if (m->kind == MSG_EXIT)
			n--;
		else if (m->kind == MSG_PAIR)
			ac_table_add(&j->result, m->word, m->len, m->count);
		else
			j->error = TMO_EINVAL;
	}
	for (int i = 0; i < spawned; i++)
		ac_join(&j->mappers[i]);
	free(margs);
	j->result_msg.kind = MSG_RESULT;
	j->result_msg.from = self;
	tmo_queue_push(&j->parent->mbox, &j->result_msg.node);
}

/* Differences between the sequential and the actor counts. */
static long compare(const struct table *seq, const struct table *act)
{
	long diff = 0;
	for (size_t i = 0; i < seq->cap; i++) {
		const struct entry *e = &seq->e[i];
		if (e->w == NULL)
			continue;
		const struct entry *o = ac_table_slot((struct table *)act, e->w, e->len);
		if (o->w == NULL || o->count != e->count)
			diff++;
	}
	if (seq->used != act->used || seq->total != act->total)
		diff++;
	return diff;
}

static int wordcount(const struct sk_run *run, struct tmo *eng, struct corpus *corpus,
                     int ndocs, int64_t latency, enum via via)
{
	int v = 0;
	struct table seq;
	if (ac_table_init(&seq, (size_t)corpus->nvocab) != 0)
		return TMO_ENOMEM;
	int64_t t0 = sk_now_ns();
	sequential(corpus, ndocs, latency, &seq);
	double seq_s = (double)(sk_now_ns() - t0) / 1e9;

	struct job j = {.run = run, .corpus = corpus, .ndocs = ndocs, .latency = latency,
	                .after = 500 * US};
	j.rx = (struct receiver){.eng = eng, .via = via, .fast_path = 1};
	j.rx.marker.kind = MSG_TIMEOUT_MARKER;
	struct actor parent = {0}, red = {0};
	j.mappers = calloc((size_t)ndocs, sizeof *j.mappers);
	if (j.mappers == NULL || ac_table_init(&j.result, (size_t)corpus->nvocab) != 0 ||
	    tmo_queue_init(&parent.mbox) != 0) {
		free(j.mappers);
		free(seq.e);
		free(j.result.e);
		return TMO_ENOMEM;
	}
	j.parent = &parent;
	t0 = sk_now_ns();
	int rc = ac_spawn(&red, reducer, &j, NULL);
	if (rc == 0) {
		struct tmo_qnode *n;
		tmo_queue_pop(&parent.mbox, TMO_WAIT_FOREVER, &n); /* the result */
		ac_join(&red);
	}
	double act_s = (double)(sk_now_ns() - t0) / 1e9;
	ac_eagain += j.rx.eagain;
	tmo_queue_destroy(&parent.mbox);
	if (rc == 0 && j.error != 0)
		rc = j.error;
	long diff = rc == 0 ? compare(&seq, &j.result) : 0;
	if (rc == 0 && (diff != 0 || j.rx.lost != 0)) {
		sk_violation(run, "word count, %d actors, latency %lld us, via %s: %ld words differ "
		              "from the sequential count (%zu vs %zu distinct, %llu vs %llu total), "
		              "%ld messages lost",
		              ndocs, (long long)(latency / US), ac_via_name(via), diff, j.result.used,
		              seq.used, (unsigned long long)j.result.total,
		              (unsigned long long)seq.total, j.rx.lost);
		v++;
	}
	if (rc == 0) {
		printf("  %4d actors  latency %5.1f ms  via %-6s | sequential %7.1f ms | actors %7.1f ms "
		       "(x%.2f) | %6llu words, %5zu distinct, %s | receives %ld, timer armed %ld, "
		       "after ran %ld, stale markers %ld\n",
		       ndocs, (double)latency / 1e6, ac_via_name(via), seq_s * 1e3, act_s * 1e3,
		       act_s > 0 ? seq_s / act_s : 0, (unsigned long long)seq.total, seq.used,
		       diff == 0 ? "counts equal" : "COUNTS DIFFER", j.rx.receives, j.rx.armed,
		       j.rx.timeouts, j.rx.stale_markers);
		sk_report_fmt(run, "wordcount_sequential_ms", seq_s * 1e3, "ms", "actors=%d,latency_us=%lld",
		          ndocs, (long long)(latency / US));
		sk_report_fmt(run, "wordcount_actors_ms", act_s * 1e3, "ms",
		          "actors=%d,latency_us=%lld,via=%s", ndocs, (long long)(latency / US),
		          ac_via_name(via));
		sk_report_fmt(run, "wordcount_after_ran", (double)j.rx.timeouts, "count",
		          "actors=%d,latency_us=%lld,via=%s", ndocs, (long long)(latency / US),
		          ac_via_name(via));
		sk_report_fmt(run, "wordcount_count_mismatches", (double)diff, "count",
		          "actors=%d,latency_us=%lld,via=%s", ndocs, (long long)(latency / US),
		          ac_via_name(via));
	}
	free(j.mappers);
	free(seq.e);
	free(j.result.e);
	return rc < 0 ? rc : v;
}

/* ---- the race on its own ------------------------------------------------------- */

struct race {
	struct tmo_queue q;
	struct msg *msgs;
	int n;
	int64_t after;
	int64_t max_gap; /* beyond after + the engine's lateness, so timeouts happen */
	uint64_t seed;
};

static void *race_producer(void *p)
{
	struct race *r = p;
	struct sk_rng rng = {r->seed};
	for (int i = 0; i < r->n; i++) {
		/* Gaps from 0 to past the receiver's after: some messages land just
		 * before, some just after, a timeout. */
		int64_t gap = (int64_t)sk_below(&rng, (uint64_t)r->max_gap);
		sk_wait_until(sk_now_ns() + gap);
		r->msgs[i].kind = MSG_SEQ;
		r->msgs[i].seq = (uint64_t)i;
		tmo_queue_push(&r->q, &r->msgs[i].node);
	}
	return NULL;
}

/* Calibrate: how late does this engine run the after clause?  Gaps then
 * reach past after + that lateness, so timeouts really happen and race with
 * messages (an engine may fire far later than its resolution).  Sets
 * r->max_gap; returns 0 or an error. */
static int race_calibrate(struct receiver *rx, struct race *r)
{
	int64_t late[11];
	for (int i = 0; i < 11; i++) {
		struct msg *m;
		int64_t t0 = sk_now_ns();
		int c = ac_receive(rx, r->after, &m);
		late[i] = sk_now_ns() - t0 - r->after;
		if (c != 1)
			return c < 0 ? c : TMO_EINVAL;
	}
	/* The median, not the maximum: one scheduling hiccup on a loaded
	 * machine must not stretch every gap (and the run) by 100x. */
	qsort(late, 11, sizeof late[0], sk_cmp_i64);
	int64_t typical = late[5] < 0 ? 0 : late[5] > 10 * MS ? 10 * MS : late[5];
	r->max_gap = 2 * (r->after + 2 * typical);
	rx->receives = rx->armed = rx->timeouts = 0;
	return 0;
}

/* Receive until every message came or 60 s passed: each must come once, in
 * order (*bad counts those that did not).  Returns the last receive's result
 * (negative: an error). */
static int race_receive_all(const struct sk_run *run, struct receiver *rx, struct race *r,
                            uint64_t *next, uint64_t *in_order, long *bad)
{
	int64_t give_up = sk_now_ns() + 60 * TMO_NSEC_PER_SEC;
	int rc = 0;
	while (*next < (uint64_t)r->n && sk_now_ns() < give_up) {
		struct msg *m;
		rc = ac_receive(rx, r->after, &m);
		if (rc < 0)
			break;
		if (rc == 1)
			continue;
		if (m->kind != MSG_SEQ || m->seq != *next) {
			if ((*bad)++ < 3)
				sk_violation(run, "race via %s: got %s #%llu, expected message #%llu",
				             ac_via_name(rx->via), m->kind == MSG_SEQ ? "message" : "a marker",
				             (unsigned long long)m->seq, (unsigned long long)*next);
			if (m->kind == MSG_SEQ)
				*next = m->seq + 1;
			continue;
		}
		(*next)++;
		(*in_order)++;
	}
	return rc;
}

static int race(const struct sk_run *run, struct tmo *eng, enum via via, int n)
{
	int v = 0;
	/* after: 200 us, or two ticks of a coarse engine (a 1 ms wheel fires up
	 * to a tick late, and the race is with its callback). */
	int64_t after = 2 * run->ops->resolution_ns > 200 * US ? 2 * run->ops->resolution_ns : 200 * US;
	struct race r = {.n = n, .after = after, .seed = run->seed * 7 + (uint64_t)via};
	r.msgs = calloc((size_t)n, sizeof *r.msgs);
	if (r.msgs == NULL || tmo_queue_init(&r.q) != 0) {
		free(r.msgs);
		return TMO_ENOMEM;
	}
	struct receiver rx = {.eng = eng, .via = via, .mbox = &r.q, .fast_path = 1};
	rx.marker.kind = MSG_TIMEOUT_MARKER;
	int c = race_calibrate(&rx, &r);
	if (c != 0) {
		tmo_queue_destroy(&r.q);
		free(r.msgs);
		return c;
	}
	pthread_t th;
	if (pthread_create(&th, NULL, race_producer, &r) != 0) {
		tmo_queue_destroy(&r.q);
		free(r.msgs);
		return TMO_EAGAIN;
	}
	uint64_t next = 0, in_order = 0;
	long bad = 0;
	int rc = race_receive_all(run, &rx, &r, &next, &in_order, &bad);
	pthread_join(th, NULL);
	ac_eagain += rx.eagain;
	if (rc >= 0 && next < (uint64_t)n) {
		sk_violation(run, "race via %s: only %llu of %d messages arrived", ac_via_name(via),
		              (unsigned long long)next, n);
		bad++;
	}
	struct tmo_qnode *left;
	if (rc >= 0 && tmo_queue_pop(&r.q, 0, &left) == TMO_WAIT_OK) {
		sk_violation(run, "race via %s: something left in the mailbox after the last message",
		              ac_via_name(via));
		bad++;
	}
	if (rx.lost) {
		sk_violation(run, "race via %s: %ld messages lost", ac_via_name(via), rx.lost);
		bad++;
	}
	printf("  race via %-6s: %d messages with gaps 0-%lld us, after %lld us: %llu arrived once "
	       "and in order, after ran %ld, timer armed %ld, stale markers removed %ld, %ld bad\n",
	       ac_via_name(via), n, (long long)(r.max_gap / US), (long long)(r.after / US),
	       (unsigned long long)in_order, rx.timeouts, rx.armed, rx.stale_markers, bad);
	sk_report_fmt(run, "race_bad", (double)bad, "count", "via=%s,messages=%d", ac_via_name(via), n);
	sk_report_fmt(run, "race_after_ran", (double)rx.timeouts, "count", "via=%s,messages=%d",
	          ac_via_name(via), n);
	tmo_queue_destroy(&r.q);
	free(r.msgs);
	v += (int)bad;
	return rc < 0 ? rc : v;
}

/* ---- the cost of one receive-with-timeout ------------------------------------------ */

/* Five rounds of n receives of a message that is there: a plain pop, then
 * receive-with-timeout with the timer armed (no fast path), via scope and
 * via marker; the medians.  Returns the receives that got the wrong thing. */
static int receive_rounds(struct tmo *eng, struct tmo_queue *q, int n, double *p, double *s,
                          double *mk)
{
	struct msg m = {.kind = MSG_SEQ};
	double plain[5], scope[5], marker[5];
	int bad = 0;
	for (int round = 0; round < 5; round++) {
		/* A plain pop of a message that is there (no timeout at all). */
		int64_t t0 = sk_now_ns();
		for (int i = 0; i < n; i++) {
			struct tmo_qnode *x;
			tmo_queue_push(q, &m.node);
			bad += tmo_queue_pop(q, TMO_WAIT_FOREVER, &x) != TMO_WAIT_OK;
		}
		plain[round] = (double)(sk_now_ns() - t0) / n;
		/* receive ... after 1 s with the timer armed every time (no fast
		 * path): push, arm, pop, cancel. */
		for (int via = VIA_SCOPE; via <= VIA_MARKER; via++) {
			struct receiver rx = {.eng = eng, .via = (enum via)via, .mbox = q};
			rx.marker.kind = MSG_TIMEOUT_MARKER;
			t0 = sk_now_ns();
			for (int i = 0; i < n; i++) {
				struct msg *got;
				tmo_queue_push(q, &m.node);
				bad += ac_receive(&rx, TMO_NSEC_PER_SEC, &got) != 0 || got != &m;
			}
			double ns = (double)(sk_now_ns() - t0) / n;
			ac_eagain += rx.eagain;
			if (via == VIA_SCOPE)
				scope[round] = ns;
			else
				marker[round] = ns;
		}
	}
	*p = sk_median(plain, 5), *s = sk_median(scope, 5), *mk = sk_median(marker, 5);
	return bad;
}

/* How late the after clause runs: k receives on an empty mailbox per way,
 * sorted into late[via * k ...]. */
static int receive_lateness(const struct sk_run *run, struct tmo *eng, struct tmo_queue *q,
                            int64_t *late, int k)
{
	int bad = 0;
	for (int via = VIA_SCOPE; via <= VIA_MARKER; via++) {
		struct receiver rx = {.eng = eng, .via = (enum via)via, .mbox = q};
		rx.marker.kind = MSG_TIMEOUT_MARKER;
		for (int i = 0; i < k; i++) {
			struct msg *got;
			int64_t t0 = sk_now_ns();
			int rc = ac_receive(&rx, MS, &got);
			late[via * k + i] = sk_now_ns() - t0 - MS;
			bad += rc != 1;
			if (late[via * k + i] < 0) {
				sk_violation(run, "after clause via %s ran %lld ns early", ac_via_name((enum via)via),
				              (long long)-late[via * k + i]);
				bad++;
			}
		}
		ac_eagain += rx.eagain;
		qsort(late + via * k, (size_t)k, sizeof *late, sk_cmp_i64);
	}
	return bad;
}

static int receive_cost(const struct sk_run *run, struct tmo *eng, int n)
{
	struct tmo_queue q;
	if (tmo_queue_init(&q) != 0)
		return TMO_ESYS;
	double p, s, mk;
	int bad = receive_rounds(eng, &q, n, &p, &s, &mk);
	int k = sk_thread_per_timer(run) ? 20 : 50;
	int64_t *late = calloc((size_t)k * 2, sizeof *late);
	if (late != NULL)
		bad += receive_lateness(run, eng, &q, late, k);
	printf("  receive cost (median of 5 x %d): plain pop %.0f ns; receive-with-timeout, timer "
	       "armed: via scope %.0f ns, via marker %.0f ns\n",
	       n, p, s, mk);
	sk_report_fmt(run, "receive_plain_ns", p, "ns", "n=%d", n);
	sk_report_fmt(run, "receive_after_ns", s, "ns", "via=scope,n=%d", n);
	sk_report_fmt(run, "receive_after_ns", mk, "ns", "via=marker,n=%d", n);
	if (late != NULL) {
		for (int via = VIA_SCOPE; via <= VIA_MARKER; via++) {
			int64_t *l = late + via * k;
			printf("  after 1 ms on an empty mailbox via %-6s: late by p50 %.0f us, max %.0f us "
			       "(%d receives)\n",
			       ac_via_name((enum via)via), (double)sk_quantile_i64(l, (size_t)k, 0.5) / 1e3,
			       (double)l[k - 1] / 1e3, k);
			sk_report_fmt(run, "after_late_us_p50", (double)sk_quantile_i64(l, (size_t)k, 0.5) / 1e3,
			          "us", "via=%s,after=1ms", ac_via_name((enum via)via));
			sk_report_fmt(run, "after_late_us_max", (double)l[k - 1] / 1e3, "us",
			          "via=%s,after=1ms", ac_via_name((enum via)via));
		}
	}
	free(late);
	tmo_queue_destroy(&q);
	if (bad)
		sk_violation(run, "receive cost: %d receives returned the wrong thing", bad);
	return bad;
}

/* ---- the scenario ------------------------------------------------------------------- */

static int actors_run(const struct sk_run *run)
{
	struct tmo *eng = NULL;
	int rc = sk_create_or_skip(run, &eng);
	if (rc != 0)
		return rc;
	int v = 0;
	ac_eagain = 0;
	struct corpus corpus;
	int words = run->quick ? 200 : 1000;
	rc = ac_corpus_make(&corpus, run->seed, 200, words, 4000);
	if (rc != 0) {
		tmo_destroy(&eng);
		return rc;
	}
	printf("actors are OS threads (one pthread each); mailboxes are tmo_queue; receive looks in "
	       "the mailbox first and arms the after timer (500 us) only when it is empty\n");
	printf("corpus: 200 generated documents, %llu words, vocabulary %d (seed %llu)\n",
	       (unsigned long long)corpus.total_words, corpus.nvocab,
	       (unsigned long long)run->seed);
	static const int counts[] = {50, 100, 200};
	int64_t latencies[] = {0, run->quick ? 2 * MS : 5 * MS};
	for (int li = 0; li < 2 && rc >= 0; li++)
		for (int ci = 0; ci < 3 && rc >= 0; ci++)
			for (int via = VIA_SCOPE; via <= VIA_MARKER && rc >= 0; via++) {
				rc = wordcount(run, eng, &corpus, counts[ci], latencies[li], (enum via)via);
				if (rc > 0)
					v += rc;
				sk_progress(run, "word count", (li * 6 + ci * 2 + via + 1) / 12.0);
			}
	for (int via = VIA_SCOPE; via <= VIA_MARKER && rc >= 0; via++) {
		rc = race(run, eng, (enum via)via, run->quick ? 300 : 2000);
		if (rc > 0)
			v += rc;
	}
	if (rc >= 0) {
		rc = receive_cost(run, eng, sk_thread_per_timer(run) ? 300 : 20000);
		if (rc > 0)
			v += rc;
	}
	ac_corpus_free(&corpus);
	tmo_destroy(&eng);
	if (ac_eagain > 0)
		printf("note: the engine refused %ld arms with TMO_EAGAIN (retried after 1 ms each; "
		       "receive costs that include them are inflated)\n",
		       ac_eagain);
	sk_report(run, "arm_eagain_retries", "", (double)ac_eagain, "count");
	if (rc < 0)
		return rc;
	printf("actors: %d violations\n", v);
	return v;
}
