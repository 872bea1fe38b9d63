/* Multi-device fences, with threads standing in for devices: every device leaves a barrier with
 * the same status (a peer's error is adopted), sequence numbers survive 32-bit wrap-around, a
 * peer that never arrives turns into QMOE_ERR_RUNTIME, not a hang, and a late peer that keeps
 * making progress is waited for past the timeout. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime/fence.h"
#include "support/testlib.h"

enum { DEVICES = 4, ROUNDS = 300 };

typedef struct fence_dev {
    qmoe_fence_slot *slots;
    int self;
    uint32_t seq0;
    qmoe_status got[ROUNDS];
} fence_dev;

/* Device r % DEVICES fails every 7th round. */
static qmoe_status planned(int round, int self)
{
    return round % 7 == 3 && round % DEVICES == self ? QMOE_ERR_RUNTIME : QMOE_OK;
}

static void *device_main(void *arg)
{
    fence_dev *d = arg;
    for (int r = 0; r < ROUNDS; r++)
        d->got[r] = qmoe_fence_barrier(d->slots, d->self, DEVICES, d->seq0 + 1u + (uint32_t)r,
                                       planned(r, d->self), 0, NULL, NULL);
    return NULL;
}

static void run_group(uint32_t seq0)
{
    qmoe_fence_slot *slots = qmoe_fence_alloc(DEVICES);
    CHECK(slots && (uintptr_t)slots % 128 == 0);
    for (int i = 0; i < DEVICES; i++) qmoe_fence_write(&slots[i], seq0, QMOE_OK);
    fence_dev devs[DEVICES];
    pthread_t tids[DEVICES];
    for (int i = 0; i < DEVICES; i++) {
        devs[i] = (fence_dev){.slots = slots, .self = i, .seq0 = seq0};
        pthread_create(&tids[i], NULL, device_main, &devs[i]);
    }
    for (int i = 0; i < DEVICES; i++) pthread_join(tids[i], NULL);
    int bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        qmoe_status want = planned(r, r % DEVICES);
        for (int i = 0; i < DEVICES; i++) bad += devs[i].got[r] != want;
    }
    CHECK_MSG(bad == 0, "seq0 %u: %d device-rounds with the wrong status", (unsigned)seq0, bad);
    qmoe_fence_free(slots);
}

/* A watch whose peers are scripted: peer 1 "works" (its number moves at every look) until the
 * waiter has looked `arrive_after` times, then arrives; peer 2 (if any) never moves. The looks
 * happen only at the waiter's deadlines, so `arrive_after` looks span that many timeouts. */
typedef struct script {
    qmoe_fence_slot *slots;
    uint32_t seq;
    int looks, arrive_after, peer1_moves;
} script;

static uint64_t scripted_progress(void *ctx, int peer)
{
    script *s = ctx;
    if (peer != 1) return 7; /* the waiter itself and a dead peer 2: still */
    if (++s->looks == s->arrive_after) qmoe_fence_write(&s->slots[1], s->seq, QMOE_OK);
    return s->peer1_moves ? (uint64_t)s->looks : 7;
}

static void test_progress(void)
{
    const uint64_t timeout = 5u * 1000 * 1000; /* 5 ms */
    qmoe_fence_slot *slots = qmoe_fence_alloc(3);
    /* a working peer arrives after 6 timeouts: not late */
    script s = {slots, 1, 0, 12, 1};
    qmoe_fence_watch watch = {scripted_progress, &s};
    CHECK(qmoe_fence_barrier(slots, 0, 2, 1, QMOE_OK, timeout, NULL, &watch) == QMOE_OK);
    CHECK_MSG(s.looks >= 12, "the waiter looked %d times", s.looks);
    /* the same peer, still: a timeout */
    s = (script){slots, 2, 0, 1000, 0};
    CHECK(qmoe_fence_barrier(slots, 0, 2, 2, QMOE_OK, timeout, NULL, &watch) == QMOE_ERR_RUNTIME);
    CHECK_MSG(s.looks == 2, "a still peer was looked at %d times", s.looks);
    CHECK(strstr(qmoe_last_error(), "no progress") != NULL);
    /* a moving peer that has already arrived does not keep a dead one's barrier open */
    qmoe_fence_write(&slots[1], 3, QMOE_OK);
    s = (script){slots, 3, 0, 1000, 1};
    CHECK(qmoe_fence_barrier(slots, 0, 3, 3, QMOE_OK, timeout, NULL, &watch) == QMOE_ERR_RUNTIME);
    qmoe_fence_free(slots);
}

int main(void)
{
    CHECK(sizeof(qmoe_fence_slot) == 128);
    run_group(0);
    run_group(0xFFFFFFFFu - ROUNDS / 2); /* wraps in the middle */

    /* a peer that never arrives: bounded wait, then an error */
    qmoe_fence_slot *slots = qmoe_fence_alloc(2);
    qmoe_status st = qmoe_fence_barrier(slots, 0, 2, 1, QMOE_OK, 20u * 1000 * 1000, NULL, NULL);
    CHECK(st == QMOE_ERR_RUNTIME);
    CHECK(atomic_load(&slots[0].at[1].status) == QMOE_ERR_RUNTIME); /* passed on to the peer */
    /* a peer one barrier ahead of us counts as arrived, with its status for our barrier */
    qmoe_fence_write(&slots[1], 4, QMOE_OK);
    qmoe_fence_write(&slots[1], 5, QMOE_ERR_INNER);
    CHECK(qmoe_fence_barrier(slots, 0, 2, 4, QMOE_OK, 20u * 1000 * 1000, NULL, NULL) == QMOE_OK);
    /* a peer's error at our barrier is adopted and republished in our slot */
    qmoe_fence_write(&slots[1], 6, QMOE_ERR_INNER);
    CHECK(qmoe_fence_barrier(slots, 0, 2, 6, QMOE_OK, 0, NULL, NULL) == QMOE_ERR_INNER);
    CHECK(atomic_load(&slots[0].at[0].status) == QMOE_ERR_INNER);
    qmoe_fence_free(slots);
    test_progress();
    return qt_finish("test_fence");
}
