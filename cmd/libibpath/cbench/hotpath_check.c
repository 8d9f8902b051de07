/* Checks and measures the shim's Default-state hot path (hotpath.c)
 * against a provider stub, without libibverbs or a device:
 *   hotpath_check test    the shadow rings' accounting
 *   hotpath_check bench   ns per post_send / poll_cq, direct vs through the shim
 * Built by internal/shim's tests: gcc -O2 -I.. hotpath_check.c ../hotpath.c */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "shim.h"

int lip_enabled = 1;
int lip_record = 1;
int lip_single_poster = 0;

#define DEPTH 1024
static struct ibv_wc ring[DEPTH];
static unsigned rhead, rtail;

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (wr->wr_id == 0xbad) {
			*bad = wr;
			return 12;
		}
		if (wr->send_flags & IBV_SEND_SIGNALED) {
			struct ibv_wc *w = &ring[rhead++ % DEPTH];
			w->wr_id = wr->wr_id;
			w->qp_num = qp->qp_num;
			w->opcode = IBV_WC_RDMA_WRITE;
			w->status = IBV_WC_SUCCESS;
		}
	}
	return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct ibv_wc *w = &ring[rhead++ % DEPTH];
		w->wr_id = wr->wr_id;
		w->qp_num = qp->qp_num;
		w->opcode = IBV_WC_RECV;
		w->status = IBV_WC_SUCCESS;
	}
	return 0;
}

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int i = 0;
	for (; i < n && rtail != rhead; i++)
		wc[i] = ring[rtail++ % DEPTH];
	return i;
}

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct ibv_qp qp;

static void setup(void)
{
	ctx.ops.post_send = stub_post_send;
	ctx.ops.post_recv = stub_post_recv;
	ctx.ops.poll_cq = stub_poll_cq;
	cq.context = &ctx;
	qp.context = &ctx;
	qp.qp_num = 0x1c3;
	qp.send_cq = qp.recv_cq = &cq;
	if (!lip_ctx_add(&ctx) || !lip_qp_add(&qp, 64, 64, 0)) {
		fprintf(stderr, "setup failed\n");
		exit(2);
	}
}

static int fails;
#define CHECK(cond, ...) do { if (!(cond)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static void drain(void)
{
	struct ibv_wc wc[16];
	while (ctx.ops.poll_cq(&cq, 16, wc) > 0)
		;
}

static int test(void)
{
	struct lip_qp *q = lip_qp_find(lip_ctx_of(&ctx), qp.qp_num);
	uint64_t s, r;
	CHECK(q != NULL, "the QP is not found");
	/* 10 WRs, every 4th signaled: after polling, the 2 after the last
	 * signaled one (wr 7) stay outstanding. */
	for (int i = 0; i < 10; i++) {
		struct ibv_sge sge = {.addr = 0x1000 + i, .length = 8, .lkey = 5};
		struct ibv_send_wr w = {.wr_id = i, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sge, .num_sge = 1,
			.send_flags = (i % 4 == 3) ? IBV_SEND_SIGNALED : 0}, *bad;
		w.wr.rdma.remote_addr = 0x9000 + i;
		w.wr.rdma.rkey = 77;
		CHECK(ctx.ops.post_send(&qp, &w, &bad) == 0, "post %d", i);
	}
	lip_qp_outstanding(q, &s, &r);
	CHECK(s == 10, "10 posted, %lu outstanding", (unsigned long)s);
	struct lip_sqe *e = &q->sq[5 & q->smask];
	CHECK(e->wr_id == 5 && e->remote_addr == 0x9005 && e->rkey == 77 && e->num_sge == 1 && e->sge[0].addr == 0x1005,
	      "entry 5 recorded as wr_id %lu raddr %#lx rkey %u", (unsigned long)e->wr_id, (unsigned long)e->remote_addr, e->rkey);
	drain();
	lip_qp_outstanding(q, &s, &r);
	CHECK(s == 2, "after the completions of wr 3 and 7, %lu outstanding (want 2)", (unsigned long)s);
	/* A chain whose second WR the provider refuses: the refused ones are
	 * void, and the next signaled completion retires past them. */
	struct ibv_send_wr w3 = {.wr_id = 12, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr w2 = {.wr_id = 0xbad, .opcode = IBV_WR_SEND, .next = &w3};
	struct ibv_send_wr w1 = {.wr_id = 10, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED, .next = &w2}, *bad = NULL;
	CHECK(ctx.ops.post_send(&qp, &w1, &bad) == 12 && bad == &w2, "the provider's refusal reaches the caller");
	/* ring positions: w1 10, w2 11, w3 12 */
	CHECK((q->sq[11 & q->smask].flags & LIP_SQE_VOID) && (q->sq[12 & q->smask].flags & LIP_SQE_VOID) &&
	      !(q->sq[10 & q->smask].flags & LIP_SQE_VOID), "void marks: the refused WR and those after it, not the one before");
	drain(); /* wr 10 completes: retires 8, 9, 10 */
	lip_qp_outstanding(q, &s, &r);
	CHECK(s == 2, "after wr 10's completion, %lu outstanding (want the 2 refused ones, until a later completion passes them)", (unsigned long)s);
	struct ibv_send_wr w4 = {.wr_id = 14, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	CHECK(ctx.ops.post_send(&qp, &w4, &bad) == 0, "post 14");
	drain();
	lip_qp_outstanding(q, &s, &r);
	CHECK(s == 0, "all retired, %lu outstanding", (unsigned long)s);
	/* Receives: each completion retires the oldest. */
	for (int i = 0; i < 5; i++) {
		struct ibv_recv_wr rw = {.wr_id = 100 + i}, *rbad;
		CHECK(ctx.ops.post_recv(&qp, &rw, &rbad) == 0, "post recv");
	}
	lip_qp_outstanding(q, &s, &r);
	CHECK(r == 5, "5 receives outstanding, %lu", (unsigned long)r);
	drain();
	lip_qp_outstanding(q, &s, &r);
	CHECK(r == 0, "receives retired, %lu left", (unsigned long)r);
	/* More SGEs than kept: recorded as partial. */
	struct ibv_sge sges[LIP_MAX_SGE + 1];
	memset(sges, 0, sizeof(sges));
	struct ibv_send_wr wp = {.wr_id = 20, .opcode = IBV_WR_SEND, .sg_list = sges, .num_sge = LIP_MAX_SGE + 1, .send_flags = IBV_SEND_SIGNALED};
	CHECK(ctx.ops.post_send(&qp, &wp, &bad) == 0, "post partial");
	CHECK(q->sq[14 & q->smask].flags & LIP_SQE_PARTIAL, "a WR with %d SGEs is not marked partial", LIP_MAX_SGE + 1);
	drain();
	/* Error completions retire nothing. */
	ring[rhead % DEPTH] = (struct ibv_wc){.wr_id = 21, .qp_num = qp.qp_num, .status = IBV_WC_RETRY_EXC_ERR};
	struct ibv_send_wr we = {.wr_id = 21, .opcode = IBV_WR_SEND};
	CHECK(ctx.ops.post_send(&qp, &we, &bad) == 0, "post 21");
	rhead++;
	drain();
	lip_qp_outstanding(q, &s, &r);
	CHECK(s == 1, "an error completion retired the entry (%lu outstanding)", (unsigned long)s);
	/* A destroyed QP is forgotten, and its WRs pass through. */
	lip_qp_remove(&qp);
	CHECK(lip_qp_find(lip_ctx_of(&ctx), qp.qp_num) == NULL, "removed QP still found");
	CHECK(ctx.ops.post_send(&qp, &w4, &bad) == 0, "post after remove");
	drain();
	lip_ctx_remove(&ctx);
	CHECK(ctx.ops.post_send == stub_post_send && ctx.ops.poll_cq == stub_poll_cq, "the provider's ops are not restored");
	printf(fails ? "FAIL %d\n" : "PASS\n", fails);
	return fails != 0;
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* bench times N single-WR post_send + poll_cq pairs (every WR signaled,
 * one completion per poll; 32 posts then 32 polls, so no more WRs are
 * outstanding than the QP's 64-entry send queue allows), first straight
 * to the stub provider, then through the shim's wrappers; alternating
 * rounds, best of each. */
static int bench(long n, int rounds)
{
	struct ibv_sge sge = {.addr = 0x1000, .length = 64, .lkey = 5};
	struct ibv_send_wr w = {.opcode = IBV_WR_RDMA_WRITE, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc wc[4];
	struct lip_ctx *c = lip_ctx_of(&ctx);
	double best[2][2] = {{1e18, 1e18}, {1e18, 1e18}}; /* [direct|shim][post|poll] */
	for (int r = 0; r < rounds; r++) {
		for (int via = 0; via < 2; via++) {
			int (*post)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **) = via ? ctx.ops.post_send : c->post_send;
			int (*poll)(struct ibv_cq *, int, struct ibv_wc *) = via ? ctx.ops.poll_cq : c->poll_cq;
			double tp = 0, tq = 0;
			for (long i = 0; i < n; i += 32) {
				double t0 = now_ns();
				for (int k = 0; k < 32; k++) {
					w.wr_id = i + k;
					post(&qp, &w, &bad);
				}
				double t1 = now_ns();
				for (int k = 0; k < 32; k++)
					poll(&cq, 4, wc);
				double t2 = now_ns();
				tp += t1 - t0;
				tq += t2 - t1;
			}
			if (tp / n < best[via][0])
				best[via][0] = tp / n;
			if (tq / n < best[via][1])
				best[via][1] = tq / n;
		}
	}
	printf("post_send direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][0], best[1][0], best[1][0] - best[0][0]);
	printf("poll_cq direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][1], best[1][1], best[1][1] - best[0][1]);
	return 0;
}

int main(int argc, char **argv)
{
	setup();
	if (getenv("IBPATH_SINGLE_POSTER") && strcmp(getenv("IBPATH_SINGLE_POSTER"), "1") == 0)
		lip_single_poster = 1;
	if (argc > 1 && strcmp(argv[1], "bench") == 0)
		return bench(argc > 2 ? atol(argv[2]) : 4000000, argc > 3 ? atoi(argv[3]) : 5);
	return test();
}
