/* What every C check of the shim shares: CHECK, which counts a failed
 * condition in fails and says where; and, for the checks of the data
 * path (included after shim.h), the flags the Go side sets in the real
 * library (interpose.c): the shim enabled, the shadow rings on, locks
 * taken. A check sets lip_single_poster / lip_single_poller itself when
 * it runs that mode. */
#ifndef LIP_CHECK_H
#define LIP_CHECK_H

#include <stdio.h>
#include <time.h>

static int fails __attribute__((unused));

/* now_ns is the monotonic clock in ns, for the checks' benches. */
static inline double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}
#define CHECK(cond, ...) do { if (!(cond)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

#ifdef LIBIBPATH_SHIM_H
int lip_enabled = 1;
int lip_record = 1;
int lip_child = 0;
int lip_single_poster = 0;
int lip_single_poller = 0;
/* cqex.c's, which no check links: no extended CQ is followed */
int lip_cqex_unpolled = 0;
void lip_cqex_polled(struct ibv_cq *cq) { (void)cq; }

/* LIP_CHECK_NOOP_HOOKS: a check that never diverts a QP gives layer 2's
 * hooks as no-ops. */
#ifdef LIP_CHECK_NOOP_HOOKS
static int hook_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) { return 0; }
static int hook_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int hook_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }
static void hook_intercept(struct ibv_cq *cq, struct ibv_wc *wc, int n) {}
static void hook_surfaced(struct ibv_qp *qp, struct ibv_wc *wc) {}
struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept, hook_surfaced};
#endif
#endif

#endif
