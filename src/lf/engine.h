/*
 * engine.c: create, destroy (and after fork), stats, park; what mpsc's and
 * wheel's vtables share.  The engines (impls/mpsc.c, impls/wheel.c) include
 * this header only.
 */
#ifndef TMO_LF_ENGINE_H
#define TMO_LF_ENGINE_H

#include "arm.h"
#include "cancel.h"

int tmo__lf_create(const struct lf_params *p, const struct tmo_config *cfg, struct tmo **out);
void tmo__lf_destroy(struct tmo *e);
void tmo__lf_destroy_forked(struct tmo *e);
int tmo__lf_stats(struct tmo *e, struct tmo_stats *out);
/* What mpsc's and wheel's vtables share: every op but create. */
extern const struct tmo_testing_ops tmo__lf_testing_ops;
#define LF_ENGINE_OPS                                                                    \
	.arm = tmo__lf_arm, .destroy = tmo__lf_destroy, .cancel = tmo__lf_cancel, .stats = tmo__lf_stats,     \
	.destroy_forked = tmo__lf_destroy_forked, .testing = &tmo__lf_testing_ops

#endif /* TMO_LF_ENGINE_H */
