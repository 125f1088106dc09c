#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets (tests/fuzz/wheel.c,
tests/fuzz/heap.c, tests/fuzz/lf.c): one small hand-written program per
file, each aimed at one hazard.  The byte encoding is the one the targets decode (see their
LLVMFuzzerTestOneInput and tests/fuzz_input.h).  Rerun after changing an
encoding:  python3 tests/fuzz/corpus/make_seeds.py"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- fuzz_input.h: fuzz_delta ---------------------------------------------------
def raw(n):            # 0..63 ns
    return [n & 63]
def ticks(k, off=0):   # k (0..63) ticks of r, plus -1, 0 or +1 ns
    return [0x40 | (k & 63), off + 1]
def big(shift, mult=0, off=0):  # (mult + 1) << shift ticks, plus off ns
    return [0x80 | (shift & 63), mult & 0xFF, (mult >> 8) & 0xFF, (off + 128) & 0xFF]
def past(k, extra=0):  # -(k ticks + extra ns)
    return [0xC0 | (k & 63), extra & 0xFF]

# ---- fuzz_wheel.c -----------------------------------------------------------------
# indices into fuzz_wheel.c's resolutions[] and origins[]
R1, R3, R7, R64, R4096, R1MS, RPRIME, R2P40 = range(8)
O0, O1, OM1, ONEG, O1E12, OMIN, OHALF, OEND = range(8)
def wcfg(res, origin):
    return [(res & 7) | ((origin & 7) << 3)]
def warm(idx, delta):
    return [idx & 63] + delta
def wcancel(idx):
    return [0x80 | (idx & 63)]
def wadv(delta):
    return [0xC0] + delta
W_NEXT_EXPIRY, W_DUE, W_DUE_MINUS_1, W_SAME = [0xC1], [0xC2], [0xC6], [0xC3]

wheel = {
    "boundaries_r1": wcfg(R1, O0) + warm(0, raw(0)) + warm(1, raw(1)) + warm(2, raw(63))
        + warm(3, ticks(64 - 1, 1)) + W_DUE_MINUS_1 + W_DUE + W_DUE + W_DUE + W_DUE,
    "boundaries_ms": wcfg(R1MS, O1E12) + sum((warm(i, ticks(i * 5, i % 3 - 1)) for i in range(12)), [])
        + (W_DUE_MINUS_1 + W_DUE) * 12,
    "past_deadlines": wcfg(R7, ONEG) + wadv(ticks(40)) + warm(0, past(3)) + warm(1, past(0, 1))
        + W_SAME + warm(2, past(63, 255)) + warm(3, raw(0)) + W_SAME + wadv(raw(1)),
    "level_cascades": wcfg(R64, OM1) + warm(0, big(6)) + warm(1, big(12, 1)) + warm(2, big(18, 3, -1))
        + warm(3, big(24, 7, 1)) + W_NEXT_EXPIRY * 12 + W_DUE * 4,
    "overflow_epochs": wcfg(R1, O0) + warm(0, big(45, 0xFFFF)) + warm(1, big(47, 5))
        + warm(2, big(40)) + warm(3, big(44, 9)) + W_NEXT_EXPIRY * 30,
    "end_of_time": wcfg(R1MS, OEND) + warm(0, big(45, 0xFFFF)) + warm(1, big(20)) + warm(2, ticks(1))
        + wadv(big(45, 0xFFFF)) + W_NEXT_EXPIRY * 4,
    "cancel_heavy": wcfg(R4096, O1) + sum((warm(i, ticks(i + 1)) for i in range(16)), [])
        + sum((wcancel(i) for i in range(0, 16, 2)), []) + wadv(ticks(20)) + wcancel(1),
    "rearm_same": wcfg(R3, O0) + sum((warm(7, ticks(i % 7 + 1, i % 3 - 1)) for i in range(20)), [])
        + W_DUE + warm(7, raw(0)) + W_SAME,
    "order_one_jump": wcfg(RPRIME, O0) + sum((warm(i, ticks((i * 37) % 64)) for i in range(40)), [])
        + sum((warm(40 + i, big(6, i)) for i in range(10)), []) + wadv(big(12)),
    "origin_int64_min": wcfg(R1, OMIN) + warm(0, big(30, 2)) + warm(1, past(10)) + wadv(raw(5))
        + warm(2, ticks(3)) + W_NEXT_EXPIRY + W_DUE + W_NEXT_EXPIRY * 6
        # walk the clock to the very end (8 x 2^61 ticks of 1 ns) and arm at
        # INT64_MAX: tick 2^64 - 1, the last one of all
        + wadv(big(45, 0xFFFF)) * 8 + warm(5, big(45, 0xFFFF)) + W_NEXT_EXPIRY + warm(6, raw(0)),
    "tick_64_carry": wcfg(R64, OM1) + wadv(ticks(63)) + warm(0, ticks(1)) + warm(1, ticks(1, 1))
        + warm(2, big(6, 0, -1)) + W_DUE_MINUS_1 + W_DUE + W_DUE + W_DUE,
    "mixed": wcfg(R2P40, OHALF) + warm(0, raw(9)) + warm(1, big(9, 300)) + wcancel(0) + warm(2, past(2))
        + wadv(ticks(9, 1)) + warm(3, big(33, 1)) + W_NEXT_EXPIRY * 3 + wcancel(3)
        + warm(4, ticks(2, -1)) + W_DUE,
}

# ---- fuzz_heap.c ------------------------------------------------------------------
def hcfg(arity4, cap, fini_full=False):
    return [(1 if arity4 else 0) | ((cap & 7) << 1) | (0x10 if fini_full else 0)]
def harm(idx, delta, r=1, fail=False):
    """Arm timer idx at now + delta (delta scale r); with fail, every
    allocation fails during the push (how byte 192..199: r 1..8)."""
    how = 192 + ((r - 1) & 7) if fail else (r - 1) & 15
    return [idx % 96, how] + delta
def hcancel(idx):
    return [idx % 96, 200]
def hadv(delta, scale=0):
    """Advance by |delta| (delta scale r = 1 + (op >> 4) = 7 + scale)."""
    return [0x60 + ((scale & 9) << 4)] + delta
H_NEXT, H_NEXT_MINUS_1, H_SAME = [0x61], [0x65], [0x63]
def hadv_failing(k):
    """Advance to the deadline of the ((24 + k) % n)-th next timer, every
    allocation failing (a shrink must fail harmlessly)."""
    return [0x62 | ((k & 7) << 2)]

heap = {
    "binary_fifo_ties": hcfg(False, 0) + sum((harm(i, raw(5)) for i in range(10)), []) + H_NEXT,
    "quad_fifo_ties": hcfg(True, 0) + sum((harm(i, raw(i % 3)) for i in range(30)), []) + H_NEXT * 3,
    "grow_from_one": hcfg(False, 1) + sum((harm(i, raw(63 - i)) for i in range(40)), []) + hadv(raw(63)),
    "grow_fails": hcfg(True, 2) + harm(0, raw(1)) + harm(1, raw(2)) + harm(2, raw(3), fail=True)
        + harm(3, raw(4)) + harm(4, raw(5), fail=True) + H_NEXT * 5,
    "shrink_fails": hcfg(False, 0) + sum((harm(i, raw(i)) for i in range(33)), [])
        + hadv_failing(30) + hadv_failing(0) + H_NEXT,
    "remove_middle": hcfg(True, 7) + sum((harm(i, ticks(i * 3 % 64)) for i in range(25)), [])
        + sum((hcancel(i) for i in range(3, 25, 4)), []) + H_NEXT * 4 + hadv(big(5)),
    # binary heap [0, 10, 1, 11, 12, 2, 3, 15, 16, 17, 18, 4, 5, 6]:
    # removing 11 moves 6 under 10, where it must sift up, or 10 reaches the
    # top while 6 is still in
    "remove_sift_up": hcfg(False, 0) + sum((harm(i, raw(d)) for i, d in
        enumerate([0, 10, 1, 11, 12, 2, 3, 15, 16, 17, 18, 4, 5, 6])), [])
        + hcancel(3) + H_NEXT * 13,
    "past_and_now": hcfg(True, 3) + harm(0, past(5)) + harm(1, raw(0)) + harm(2, past(63, 255))
        + H_SAME + harm(3, raw(0)) + H_SAME,
    "huge_deadlines": hcfg(False, 4) + harm(0, big(45, 0xFFFF), r=16) + harm(1, big(40))
        + harm(2, past(63, 255), r=16) + hadv(big(45, 0xFFFF), 9) + H_NEXT * 3,
    "rearm_same": hcfg(True, 0) + sum((harm(5, raw(i % 7)) for i in range(30)), [])
        + harm(6, raw(3)) + H_NEXT,
    "interleaved": hcfg(False, 2) + sum((harm(i, ticks(i % 9, i % 3 - 1), r=1 + i % 16)
        + (H_NEXT if i % 5 == 4 else []) for i in range(40)), []),
    "drain_then_refill": hcfg(True, 1, fini_full=True) + sum((harm(i, raw(i)) for i in range(20)), [])
        + hadv(raw(63)) + sum((harm(i, raw(i)) for i in range(20)), []) + H_NEXT_MINUS_1 + H_NEXT,
}


# ---- fuzz_lf.c ----------------------------------------------------------------------
# header: engine, resolution (fuzz_lf.c resolutions[]), node cap (caps[]), end
MPSC, WHEEL = 0, 1
RES_DEFAULT, RES_100US, RES_250US, RES_37US = range(4)
CAP_NONE, CAP_64, CAP_128, CAP_256 = range(4)
END_DRAIN, END_PARKED, END_RUNNING = 0, 2, 3
def lcfg(engine, res=RES_DEFAULT, cap=CAP_NONE, end=END_DRAIN):
    return [engine | (res << 1) | (cap << 3) | (end << 5)]
# an arm's spec: timeout class | re-arm << 3 | the callback cancels itself << 5
# | a slow callback << 6 (T0's arms only)
ZERO, SHORT, LONG, MAX, BAD = 0, 1, 2, 3, 4
RE_LONG, RE_DUE = 1, 2
def spec(cls, re=0, self_cancel=False, slow=False):
    return cls | (re << 3) | (0x20 if self_cancel else 0) | (0x40 if slow else 0)
def extra(cls, x):
    return [x & 0xFF] if cls in (SHORT, LONG) else []
def arm(idx, cls=LONG, x=0, re=0, self_cancel=False, slow=False, on=0):
    """Arm timer idx on thread `on` (0: the fuzzer's own, 1 or 2: a helper);
    SHORT: (x + 1) * 8 us; LONG: 2^(42 + x % 20) ns."""
    s = spec(cls, re, self_cancel, slow)
    if on == 0:
        return [idx & 63, s] + extra(cls, x)
    assert not slow, "a helper's spec has no slow bit"
    return [0x80 | (idx & 63), (on - 1) | (s << 2)] + extra(cls, x)
def cancel(idx, on=0):
    return [0x40 | (idx & 63)] if on == 0 else [0x80 | (idx & 63), (on - 1) | 2]
SETTLE, RUN, PARK, EXIT_T1, EXIT_T2, RING_PASS, CHECK = ([0xC0 | k] for k in range(7))
def arms(idxs, **kw):
    return sum((arm(i, **kw) for i in idxs), [])
def cancels(idxs, on=0):
    return sum((cancel(i, on) for i in idxs), [])

lf = {}
for name, eng in (("mpsc", MPSC), ("wheel", WHEEL)):
    lf[name + "_annihilation"] = lcfg(eng) + sum((arm(0) + cancel(0) for _ in range(40)), []) \
        + arm(1, MAX) + cancel(1) + cancel(1)
    # more arms than ring slots: the oldest spill (mpsc: the inbox; wheel: the
    # thread's own wheel), then cancelled there, fired there or left pending
    lf[name + "_ring_spill"] = lcfg(eng, RES_100US) + arms(range(20)) + arms(range(20, 30), cls=ZERO) \
        + cancels(range(0, 30, 2)) + SETTLE + cancels(range(30)) + arms(range(30), cls=SHORT, x=40) \
        + cancels(range(25, 30)) + SETTLE + cancels(range(30))
    # another thread cancels an arm still in T0's ring: the node stays in
    # the slot until T0 arms over it again
    lf[name + "_cross_ring_cancel"] = lcfg(eng) + arms(range(4)) + cancels(range(4), on=1) \
        + arms(range(4, 12)) + cancels(range(4, 12), on=2) + arm(2) + cancels([2, 3], on=1) \
        + RING_PASS + SETTLE
    # a helper arms past its ring and exits: its record's ring spills, the
    # next thread on the slot adopts the record (and, wheel, its base)
    lf[name + "_exit_adopt"] = lcfg(eng, RES_250US) + arms(range(12), on=1) \
        + arms(range(12, 16), cls=ZERO, on=1) + EXIT_T1 + cancels(range(0, 6)) \
        + arms(range(20, 32), on=1) + cancels(range(6, 12), on=1) + SETTLE + cancels(range(20, 32), on=2) \
        + EXIT_T1 + EXIT_T2 + SETTLE
    # callbacks: one cancels itself (TMO_CANCEL_SELF), some re-arm (long: then
    # cancelled from outside, a node in the timer thread's base; due: fires
    # again in the same settle)
    lf[name + "_callback_rearm"] = lcfg(eng, RES_37US) + arm(0, ZERO, re=RE_LONG) \
        + arm(1, ZERO, re=RE_DUE, self_cancel=True) + arm(2, SHORT, 10, re=RE_DUE, on=1) \
        + arm(3, ZERO, self_cancel=True, on=2) + arm(4, ZERO, re=RE_LONG, self_cancel=True) + SETTLE \
        + cancels(range(5)) + cancel(0, on=1) + arms(range(5), cls=ZERO) + SETTLE + cancels(range(5), on=2)
    # the node cap: arms refused (TMO_EAGAIN) exactly when no node is within
    # the caller's reach, helpers refused while T0's cache holds the pool
    lf[name + "_node_cap"] = lcfg(eng, cap=CAP_64) + arms(range(60)) + arm(60, on=1) \
        + cancels(range(0, 40)) + arms(range(60, 64), on=1) + arms(range(0, 10), on=2) + SETTLE \
        + cancels(range(40, 64), on=1) + arms(range(64), cls=ZERO) + SETTLE
    # the timer thread runs while due timers are armed and cancelled: each
    # cancel races its fire; the counters decide, and nothing fires twice
    lf[name + "_race"] = lcfg(eng, RES_37US) + RUN + sum((arm(i, ZERO) + cancel(i) for i in range(16)), []) \
        + sum((arm(i, SHORT, 2, on=1 + i % 2) + cancel(i, on=2 - i % 2) for i in range(16, 32)), []) \
        + arms(range(32, 48), cls=ZERO, re=RE_LONG) + cancels(range(32, 48)) + PARK + SETTLE \
        + RUN + arms(range(48, 60), cls=SHORT, x=100) + arms(range(8)) + cancels(range(48, 60), on=1)
    # slow callbacks while the timer thread runs: a cancel from another
    # thread finds one running and waits (TMO_CANCEL_WAITED), or waits and
    # then prevents the re-arm it made
    lf[name + "_race_waited"] = lcfg(eng, RES_37US) + RUN + sum((arm(i, ZERO, slow=True, re=i % 3)
        + arms(range(40 + 2 * (i % 4), 42 + 2 * (i % 4)), on=1 + i % 2) + cancel(i, on=2 - i % 2)
        + cancels(range(40 + 2 * (i % 4), 42 + 2 * (i % 4)), on=1 + i % 2) for i in range(24)), []) \
        + PARK + SETTLE
    # misuse the model knows: a timer armed twice, invalid timeouts
    lf[name + "_misuse"] = lcfg(eng) + arm(0) + arm(0) + arm(0, ZERO) + arm(1, BAD) + [2, BAD | 8] \
        + cancel(5) + arm(3, ZERO) + arm(3, LONG) + SETTLE + cancel(3) + cancel(3) + arm(3, MAX) \
        + cancel(3) + cancel(3)
    # destroy with timers pending, parked (no callback may run) and running
    lf[name + "_destroy_parked"] = lcfg(eng, end=END_PARKED) + arms(range(10)) + arms(range(10, 20), cls=ZERO) \
        + arms(range(20, 30), on=1) + arms(range(30, 34), cls=ZERO, re=RE_DUE, on=2)
    lf[name + "_destroy_running"] = lcfg(eng, RES_37US, end=END_RUNNING) + arms(range(10)) + RUN \
        + arms(range(10, 30), cls=ZERO, re=RE_LONG) + arms(range(30, 40), on=1)

# wheel: due arms spilled into the owner's wheel are handed to the timer
# thread (a soon list); cancels drop them there, or in its due array while
# it runs
lf["wheel_hand_off"] = lcfg(WHEEL, RES_250US) + arms(range(24), cls=SHORT, x=60) + cancels(range(0, 24, 3)) \
    + SETTLE + RUN + arms(range(24), cls=SHORT, x=200) + arms(range(24, 40)) + PARK \
    + cancels(range(0, 24, 2)) + cancels(range(24, 40), on=1) + SETTLE

# cache_hoard: T0's first arm grows the pool (64 nodes under this cap);
# T1's and T2's arms must find the rest in the depot, not in T0's cache.
lf["cache_hoard"] = lcfg(WHEEL, cap=CAP_64) + arm(0) + arm(1, on=1) + arm(2, on=2) + cancel(0) \
    + arm(1, on=1)

for target, seeds in (("wheel", wheel), ("heap", heap), ("lf", lf)):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    for name, prog in seeds.items():
        assert all(0 <= b < 256 for b in prog), name
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes(prog))
    print(f"{target}: {len(seeds)} seeds in {d}")
