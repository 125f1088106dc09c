/*
 * actors: the Revactor document's MapReduce word count, on every engine.
 *
 * Actors are OS threads (one pthread each), with a mailbox (a struct
 * tmo_queue of include/tmo/wait.h) and Erlang's `receive ... after T`:
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

static const struct sk_metric actors_metrics[] = {
	{"wordcount_sequential_ms", "ms"}, {"wordcount_actors_ms", "ms"},
	{"wordcount_after_ran", "count"}, {"wordcount_count_mismatches", "count"},
	{"race_bad", "count"}, {"race_after_ran", "count"}, {"receive_plain_ns", "ns"},
	{"receive_after_ns", "ns"}, {"after_late_us_p50", "us"}, {"after_late_us_max", "us"},
	{"arm_eagain_retries", "count"}, {NULL, NULL},
};

static const struct sk_size actors_sizes[] = {
	{"words", 1000, 200, "per document"}, {"fetch_latency", 5, 2, "ms"},
	{"race_messages", 2000, 300, ""}, {0},
};

#define US TMO_NSEC_PER_USEC
#define MS TMO_NSEC_PER_MSEC

long ac_eagain;

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

/* A receive (after 1 s) of a message that was there returned r with *got.
 * Wrong unless it got the message, or the after clause ran with the
 * message still in the mailbox (taken back here) and 1 s had passed since
 * *since (the round's start, or the last receive excused so): a stall
 * between the arm and the pop (a loaded machine, qemu-user, a preempted
 * VM; seen once under qemu), and each stall excuses one receive.  The
 * clock is not read per receive: that read would be part of the cost the
 * rounds measure. */
static int receive_wrong(struct tmo_queue *q, struct msg *m, int r, const struct msg *got,
                         int64_t *since, long *stalled)
{
	if (r == 0 && got == m)
		return 0;
	int64_t now = sk_now_ns();
	if (r == 1 && now - *since >= TMO_NSEC_PER_SEC && tmo_queue_remove(q, &m->node) == 1) {
		*since = now;
		(*stalled)++;
		return 0;
	}
	return 1;
}

/* Five rounds of n receives of a message that is there: a plain pop, then
 * receive-with-timeout with the timer armed (no fast path), via scope and
 * via marker; the medians.  Returns the receives that got the wrong thing. */
static int receive_rounds(struct tmo *eng, struct tmo_queue *q, int n, double *p, double *s,
                          double *mk)
{
	struct msg m = {.kind = MSG_SEQ};
	double plain[5], scope[5], marker[5];
	int bad = 0;
	long stalled = 0;
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
			int64_t since = t0;
			for (int i = 0; i < n; i++) {
				struct msg *got;
				tmo_queue_push(q, &m.node);
				int r = ac_receive(&rx, TMO_NSEC_PER_SEC, &got);
				bad += receive_wrong(q, &m, r, got, &since, &stalled);
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
	if (stalled)
		printf("  receive cost: %ld receives ran their after clause (1 s) with the message "
		       "there, their round stalled past the deadline (not wrong: the deadline passed)\n",
		       stalled);
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
	int words = (int)sk_size(run, "words");
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
	int64_t latencies[] = {0, sk_size_ns(run, "fetch_latency")};
	for (int li = 0; li < 2 && rc >= 0; li++)
		for (int ci = 0; ci < 3 && rc >= 0; ci++)
			for (int via = VIA_SCOPE; via <= VIA_MARKER && rc >= 0; via++) {
				rc = ac_wordcount(run, eng, &corpus, counts[ci], latencies[li],
				                  (enum via)via);
				if (rc > 0)
					v += rc;
				sk_progress(run, "word count", (li * 6 + ci * 2 + via + 1) / 12.0);
			}
	for (int via = VIA_SCOPE; via <= VIA_MARKER && rc >= 0; via++) {
		rc = race(run, eng, (enum via)via, (int)sk_size(run, "race_messages"));
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

const struct sk_scenario sk_scenario_actors = {
	.name = "actors",
	.summary = "Revactor MapReduce word count: actors (threads) with receive-with-timeout on the "
	           "engine (scope or marker), sequential vs 50/100/200 actors, message/timeout race, "
	           "cost per receive",
	.correctness = 1,
	.run = actors_run,
	.params = "The Revactor MapReduce word count: 200 generated documents of `words` words, "
	          "counted sequentially and by 50, 100, 200 actors (threads with mailboxes and "
	          "receive-with-timeout, built on a scope and on a marker timer), without and with "
	          "a simulated fetch_latency; then race_messages messages racing the receive "
	          "timeout; then the cost of one receive-with-timeout. --seed generates the "
	          "corpus.",
	.fails_when = "a count differs from the sequential result, a message is lost, duplicated or "
	              "out of order, or a receive returns the wrong thing.",
	.metrics = actors_metrics,
	.sizes = actors_sizes,
};
