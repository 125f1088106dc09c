/* The actors scenario's word count, sequential and by actors: see actor.h. */
#include "actor.h"

#include "kit/util.h"

#define US TMO_NSEC_PER_USEC
#define MS TMO_NSEC_PER_MSEC

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

int ac_wordcount(const struct sk_run *run, struct tmo *eng, struct corpus *corpus,
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
