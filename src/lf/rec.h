/*
 * rec.c: the calling thread's record (found, attached, made, detached at
 * thread exit) and the engines a thread's records belong to.
 */
#ifndef TMO_LF_REC_H
#define TMO_LF_REC_H

#include "lf.h"

struct lf_tls_ent {
	uint64_t id; /* the engine's tmo_base.id; 0: empty */
	struct lf_rec *rec;
};
#define LF_TLS_IE __attribute__((tls_model("initial-exec"), visibility("hidden")))
/* The record of the engine this thread used last. */
extern _Thread_local struct lf_tls_ent tmo__lf_tls_hot LF_TLS_IE;
/* Any other engine's record: found, attached or made (NULL once this
 * thread's exit hook ran, or out of memory). */
struct lf_rec *tmo__lf_rec_slow(struct tmo *e);
static inline struct lf_rec *lf_rec_get(struct tmo *e)
{
	if (LF_LIKELY(tmo__lf_tls_hot.id == e->base.id))
		return tmo__lf_tls_hot.rec;
	return tmo__lf_rec_slow(e);
}
void tmo__lf_recs_free(struct tmo *e);
void tmo__lf_engine_register(struct tmo *e);
void tmo__lf_engine_unregister(struct tmo *e);

#endif /* TMO_LF_REC_H */
