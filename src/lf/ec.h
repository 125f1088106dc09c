/*
 * ec.c: the futex-backed event counts the lock-free core sleeps and wakes
 * on (CK's ck_ec32, waits bounded by an absolute CLOCK_MONOTONIC deadline).
 */
#ifndef TMO_LF_EC_H
#define TMO_LF_EC_H

#include "lf.h"

/* Sleep until *ec differs from v or deadline_ns (INT64_MAX: none) passes. */
void tmo__lf_ec_wait(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns);
/* Add one to *ec and wake its waiters. */
void tmo__lf_ec_wake(struct ck_ec32 *ec);
/* The same for an event count only the calling thread adds to (the timer
 * thread's done_ec): no locked instruction on x86. */
void tmo__lf_ec_wake_sp(struct ck_ec32 *ec);
uint32_t tmo__lf_ec_value(struct ck_ec32 *ec);

#endif /* TMO_LF_EC_H */
