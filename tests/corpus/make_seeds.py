#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets (tests/fuzz_wheel.c,
tests/fuzz_heap.c): one small hand-written program per file, each aimed at
one hazard.  The byte encoding is the one the targets decode (see their
LLVMFuzzerTestOneInput and tests/fuzz_input.h).  Rerun after changing an
encoding:  python3 tests/corpus/make_seeds.py"""
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

for target, seeds in (("wheel", wheel), ("heap", heap)):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    for name, prog in seeds.items():
        assert all(0 <= b < 256 for b in prog), name
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes(prog))
    print(f"{target}: {len(seeds)} seeds in {d}")
