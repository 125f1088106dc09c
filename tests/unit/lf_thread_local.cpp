// Arm and cancel from a C++ thread_local object's destructor on the
// lock-free engines (mpsc, wheel): such destructors run as the thread exits
// (before pthread key destructors), and the engine must stay whole.  Each
// destructor arms and cancels a long timer and arms a short one that must
// fire; then stats, a new thread and destroy must all return.  Waits are on
// state, bounded far beyond need.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tmo/tmo.h"

static int failures;
#define CHECK(c)                                                                           \
	do {                                                                                   \
		if (!(c)) {                                                                        \
			std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);   \
			failures++;                                                                    \
		}                                                                                  \
	} while (0)

static tmo *eng;
static std::atomic<long> fired{0}, bad{0};
static const int kThreads = 64;
static tmo_timer shorts[kThreads];

static void count_cb(tmo_timer *, void *) { fired++; }
static void never_cb(tmo_timer *, void *) { bad++; }

struct AtExit {
	int id = -1;
	~AtExit()
	{
		if (id < 0)
			return;
		tmo_timer t;
		tmo_timer_init(&t);
		if (tmo_arm(eng, &t, 60 * TMO_NSEC_PER_SEC, never_cb, nullptr) != 0 ||
		    tmo_cancel(eng, &t) != TMO_CANCEL_PREVENTED)
			bad++;
		if (tmo_arm(eng, &shorts[id], TMO_NSEC_PER_MSEC, count_cb, nullptr) != 0)
			bad++;
	}
};
static thread_local AtExit at_exit;

static bool wait_fired(long want)
{
	int64_t end = tmo_now_ns() + 30 * TMO_NSEC_PER_SEC;
	while (fired.load() < want && tmo_now_ns() < end)
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	return fired.load() >= want;
}

static void run(const char *name)
{
	fired = 0;
	bad = 0;
	std::memset(shorts, 0, sizeof shorts);
	CHECK(tmo_create(name, nullptr, &eng) == 0);
	for (int i = 0; i < kThreads; i++) {
		std::thread th([i] {
			at_exit.id = i;
			tmo_timer t;
			tmo_timer_init(&t);
			if (tmo_arm(eng, &t, TMO_NSEC_PER_SEC, never_cb, nullptr) != 0 ||
			    tmo_cancel(eng, &t) != TMO_CANCEL_PREVENTED)
				bad++;
		});
		th.join();
	}
	CHECK(wait_fired(kThreads));
	struct tmo_stats st;
	CHECK(tmo_stats(eng, &st) == 0);
	CHECK(st.pending == 0);
	for (int i = 0; i < kThreads; i++) {
		/* WAITED: the callback was still returning; then it is FIRED */
		int rc = tmo_cancel(eng, &shorts[i]);
		CHECK((rc == TMO_CANCEL_WAITED ? tmo_cancel(eng, &shorts[i]) : rc) == TMO_CANCEL_FIRED);
	}
	CHECK(bad.load() == 0);
	CHECK(fired.load() == kThreads);
	CHECK(tmo_destroy(&eng) == 0);
	std::printf("%s %s: %d thread_local destructors armed and cancelled\n",
	            failures ? "FAIL" : "PASS", name, kThreads);
}

int main()
{
	run("mpsc");
	run("wheel");
	return failures ? 1 : 0;
}
