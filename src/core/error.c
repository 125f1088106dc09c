/* The library's one error table: every enum tmo_error (include/tmo/tmo.h),
 * the scope outcomes included, with its name and its meaning in words. */
#include <stddef.h>

#include "ds/heap.h"
#include "ds/wheel.h"
#include "tmo/tmo.h"

/* The data structures below the core (src/ds/) import nothing and spell
 * their results as plain values: they must be these. */
_Static_assert(TMO_HEAP_EINVAL == TMO_EINVAL && TMO_HEAP_ENOMEM == TMO_ENOMEM,
               "src/ds/heap.h's results must be enum tmo_error values");
_Static_assert(TMO_WHEEL_EINVAL == TMO_EINVAL, "src/ds/wheel.h's result must be TMO_EINVAL");

static const struct {
	int code;
	const char *name;
	const char *text;
} errors[] = {
#define E(code, text) {code, #code, text}
	E(TMO_OK, "success"),
	E(TMO_EBADTIMEOUT, "timeout is negative or above TMO_TIMEOUT_MAX"),
	E(TMO_ENULLCB, "callback is NULL"),
	E(TMO_ENULLTIMER, "timer is NULL"),
	E(TMO_EARMED, "timer is already armed"),
	E(TMO_ENOTARMED, "timer is not armed"),
	E(TMO_EWRONGENGINE, "timer is armed on another engine"),
	E(TMO_ENOMEM, "out of memory"),
	E(TMO_EAGAIN, "out of threads or kernel timers"),
	E(TMO_ENOENGINE, "no engine of that name"),
	E(TMO_ENULLENGINE, "engine handle is NULL (not created or destroyed)"),
	E(TMO_EINVAL, "invalid argument"),
	E(TMO_ESYS, "unexpected system call failure"),
	E(TMO_EDEADLK, "the call would wait for the calling thread itself (a thread the engine "
	               "owns, or a callback waiting for this callback: a cancel deadlock)"),
	E(TMO_EFORKED, "engine was created in the parent before fork()"),
	E(TMO_EUNAVAIL, "the kernel facility the engine needs is unavailable here"),
	E(TMO_ETIMEDOUT, "execution expired"),
	E(TMO_ERAISED, "an exception raised in the block left the scope"),
#undef E
};

static int err_index(int err)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == err)
			return (int)i;
	return -1;
}

const char *tmo_strerror(int err)
{
	int i = err_index(err);
	return i < 0 ? "unknown tmo error" : errors[i].text;
}

const char *tmo_errname(int err)
{
	int i = err_index(err);
	return i < 0 ? "TMO_E?" : errors[i].name;
}
